package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/hatchery/hatchery/internal/api"
)

// Each sub-client's call goes to its route with its method, as docs/API.md
// names them: the grouping moved the calls, never where they go.
func TestEachCallGoesToItsRoute(t *testing.T) {
	var got atomic.Value // the last request's method and URI
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Method + " " + r.URL.RequestURI())
		_, _ = w.Write([]byte("{}"))
	}))
	t.Cleanup(srv.Close)
	c, err := New(Config{Server: srv.URL, Token: token("admin")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	blob := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(blob, []byte("context"), 0o600); err != nil {
		t.Fatal(err)
	}

	const p = "/api/v1/projects/default/shop"
	for _, tc := range []struct {
		want string
		call func(context.Context) error
	}{
		{"GET /api/v1/projects", func(ctx context.Context) error { _, err := c.Projects().List(ctx); return err }},
		{"PUT /api/v1/registries/127.0.0.1:5000", func(ctx context.Context) error {
			_, err := c.Registries().Login(ctx, "127.0.0.1:5000", "ci", "pw")
			return err
		}},
		{"DELETE /api/v1/registries/ghcr.io", func(ctx context.Context) error { _, err := c.Registries().Logout(ctx, "ghcr.io"); return err }},
		{"GET /api/v1/registries", func(ctx context.Context) error { _, err := c.Registries().List(ctx); return err }},
		{"GET " + p, func(ctx context.Context) error { _, _, err := c.Projects().Get(ctx, "default", "shop"); return err }},
		{"GET " + p + "/status", func(ctx context.Context) error { _, _, err := c.Projects().Status(ctx, "default", "shop"); return err }},
		{"POST " + p + "/plan", func(ctx context.Context) error {
			_, err := c.Projects().Plan(ctx, "default", "shop", api.PlanRequest{})
			return err
		}},
		{"POST " + p + "/destroy", func(ctx context.Context) error {
			_, err := c.Projects().PlanDestroy(ctx, "default", "shop", false)
			return err
		}},
		{"POST " + p + "/rollback", func(ctx context.Context) error {
			_, err := c.Projects().PlanRollback(ctx, "default", "shop", 0)
			return err
		}},
		{"POST " + p + "/apply", func(ctx context.Context) error {
			_, err := c.Projects().Apply(ctx, "default", "shop", "p-1")
			return err
		}},
		{"GET " + p + "/applies", func(ctx context.Context) error { _, err := c.Projects().History(ctx, "default", "shop"); return err }},
		{"POST " + p + "/eggs/web/restart", func(ctx context.Context) error {
			_, err := c.Projects().RestartEgg(ctx, "default", "shop", "web")
			return err
		}},
		{"GET /api/v1/hosts", func(ctx context.Context) error { _, err := c.Hosts().List(ctx); return err }},
		{"GET /api/v1/hosts/h-1", func(ctx context.Context) error { _, err := c.Hosts().Report(ctx, "h-1"); return err }},
		{"DELETE /api/v1/hosts/alpha", func(ctx context.Context) error { _, err := c.Hosts().Remove(ctx, "alpha"); return err }},
		{"PUT /api/v1/hosts/alpha/capacity", func(ctx context.Context) error {
			_, err := c.Hosts().SetCapacity(ctx, "alpha", api.SetHostCapacity{})
			return err
		}},
		{"POST /api/v1/join-tokens", func(ctx context.Context) error { _, err := c.JoinTokens().Create(ctx, 0, 0); return err }},
		{"GET /api/v1/join-tokens", func(ctx context.Context) error { _, err := c.JoinTokens().List(ctx); return err }},
		{"DELETE /api/v1/join-tokens/j-1", func(ctx context.Context) error { _, err := c.JoinTokens().Revoke(ctx, "j-1"); return err }},
		{"POST /api/v1/admin-tokens", func(ctx context.Context) error { _, err := c.AdminTokens().Create(ctx, "ci"); return err }},
		{"GET /api/v1/admin-tokens", func(ctx context.Context) error { _, err := c.AdminTokens().List(ctx); return err }},
		{"DELETE /api/v1/admin-tokens/ci", func(ctx context.Context) error { _, err := c.AdminTokens().Revoke(ctx, "ci"); return err }},
		{"GET /api/v1/events?limit=1000&since=7", func(ctx context.Context) error { _, err := c.Events().List(ctx, 7); return err }},
		{"HEAD /api/v1/blobs/sha256:ab", func(ctx context.Context) error { _, err := c.Blobs().Has(ctx, "sha256:ab"); return err }},
		{"PUT /api/v1/blobs/sha256:ab", func(ctx context.Context) error { return c.Blobs().Put(ctx, "sha256:ab", blob) }},
		{"GET /api/v1/certificates", func(ctx context.Context) error { _, err := c.Certificates().List(ctx); return err }},
	} {
		t.Run(tc.want, func(t *testing.T) {
			got.Store("")
			if err := tc.call(t.Context()); err != nil {
				t.Fatal(err)
			}
			if got.Load() != tc.want {
				t.Fatalf("the server got %q", got.Load())
			}
		})
	}

	// The streams are WebSockets: the server here refuses the upgrade, after
	// seeing where it was asked.
	q := url.Values{"egg": {"web"}}
	for want, call := range map[string]func(context.Context) error{
		"GET " + p + "/logs?egg=web": func(ctx context.Context) error { _, err := c.Sessions().Logs(ctx, "default", "shop", q); return err },
		"GET " + p + "/eggs/web/exec?egg=web": func(ctx context.Context) error {
			_, err := c.Sessions().Exec(ctx, "default", "shop", "web", q)
			return err
		},
	} {
		got.Store("")
		if err := call(t.Context()); err == nil || got.Load() != want {
			t.Errorf("the server got %q (%v), want %q refused", got.Load(), err, want)
		}
	}
}
