package client

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
)

// Each backup call goes to its route of internal/api/backups.go with its
// method, and a restore is a dry run exactly when it is only planned.
func TestEachBackupCallGoesToItsRoute(t *testing.T) {
	var got, body atomic.Value // the last request's method and URI, and its body
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Method + " " + r.URL.RequestURI())
		b, _ := io.ReadAll(r.Body)
		body.Store(string(b))
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/backups") {
			_, _ = w.Write([]byte("[]"))
			return
		}
		_, _ = w.Write([]byte("{}"))
	}))
	t.Cleanup(srv.Close)
	c, err := New(Config{Server: srv.URL, Token: token("admin")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	const p = "/api/v1/projects/default/shop"
	for _, tc := range []struct {
		want, body string
		call       func(context.Context) error
	}{
		{"POST " + p + "/volumes/data/backups", "", func(ctx context.Context) error {
			_, err := c.Backups().Start(ctx, "default", "shop", "data", "")
			return err
		}},
		{"GET " + p + "/backups", "", func(ctx context.Context) error { _, err := c.Backups().List(ctx, "default", "shop", ""); return err }},
		{"GET " + p + "/backups?volume=data", "", func(ctx context.Context) error {
			_, err := c.Backups().List(ctx, "default", "shop", "data")
			return err
		}},
		{"GET " + p + "/volume-tasks/vt-1", "", func(ctx context.Context) error {
			_, err := c.Backups().Task(ctx, "default", "shop", "vt-1")
			return err
		}},
		{"GET " + p + "/volume-tasks/vt-1?state=running&wait=2s", "", func(ctx context.Context) error {
			_, err := c.Backups().Wait(ctx, "default", "shop", "vt-1", "running", 2*time.Second)
			return err
		}},
		{"POST " + p + "/volumes/data/restore", `{"from":"m-1","to":"data2","dry_run":true}`, func(ctx context.Context) error {
			_, err := c.Backups().PlanRestore(ctx, "default", "shop", "data", api.RestoreRequest{From: "m-1", To: "data2"})
			return err
		}},
		{"POST " + p + "/volumes/data/restore", `{"from":"m-1"}`, func(ctx context.Context) error {
			_, err := c.Backups().Restore(ctx, "default", "shop", "data", api.RestoreRequest{From: "m-1", DryRun: true})
			return err
		}},
		{"DELETE " + p + "/backups/m-1", "", func(ctx context.Context) error { return c.Backups().Forget(ctx, "default", "shop", "m-1") }},
	} {
		t.Run(tc.want, func(t *testing.T) {
			got.Store("")
			if err := tc.call(t.Context()); err != nil {
				t.Fatal(err)
			}
			if got.Load() != tc.want {
				t.Fatalf("the server got %q", got.Load())
			}
			if b := strings.TrimSpace(body.Load().(string)); b != tc.body {
				t.Fatalf("the body was %q, want %q", b, tc.body)
			}
		})
	}
}
