package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/fleet"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

func TestHealthzNeedsNoToken(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	resp := h.doAs("", "GET", "/healthz", nil)
	if got := decode[map[string]string](t, resp, 200); got["status"] != "ok" {
		t.Fatalf("healthz = %v", got)
	}
}

func TestEveryOtherRouteNeedsTheAdminToken(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	other := pki.NewToken(pki.KindAdmin, fingerprint()).String()
	hostTok := pki.NewToken(pki.KindHost, fingerprint()).String()
	routes := []struct{ method, path string }{
		{"GET", "/api/v1/hosts"}, {"GET", "/api/v1/hosts/h1"}, {"GET", "/api/v1/hosts/h1/desired-state"},
		{"POST", "/api/v1/hosts/h1/status"}, {"PUT", "/api/v1/blobs/sha256:" + strings.Repeat("0", 64)},
		{"GET", "/api/v1/blobs/sha256:" + strings.Repeat("0", 64)}, {"GET", "/api/v1/events"},
		{"GET", "/api/v1/projects"}, {"GET", "/api/v1/projects/default/shop"}, {"GET", "/metrics"},
		{"GET", "/api/v1/no-such-route"}, {"DELETE", "/api/v1/hosts"},
	}
	for _, rt := range routes {
		for name, token := range map[string]string{"no token": "", "another admin token": other, "a host token": hostTok, "garbage": "x"} {
			t.Run(rt.method+" "+rt.path+" with "+name, func(t *testing.T) {
				resp := h.doAs(token, rt.method, rt.path, nil)
				wantError(t, resp, http.StatusUnauthorized, "unauthorized", "token")
				if resp.Header.Get("WWW-Authenticate") == "" {
					t.Fatal("no WWW-Authenticate header")
				}
			})
		}
	}
}

func TestUnknownRoutesAndMethodsAreJSONErrors(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	wantError(t, h.do("GET", "/api/v1/no-such-route", nil), http.StatusNotFound, "not_found", "/api/v1/no-such-route")
	resp := h.do("DELETE", "/api/v1/hosts", nil)
	wantError(t, resp, http.StatusMethodNotAllowed, "method_not_allowed", "DELETE")
	if !strings.Contains(resp.Header.Get("Allow"), "GET") {
		t.Fatalf("Allow = %q", resp.Header.Get("Allow"))
	}
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func TestBlobs(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxBlobBytes = 1000
	fc := fleet.DefaultConfig()
	fc.BlobGrace = 1 // nanosecond: every blob is past its grace when collected (the collector runs only when asked here)
	h := newHarnessOf(t, cfg, fc, nil)
	content := []byte("FROM scratch\nCOPY app /app\n")
	d := digestOf(content)

	if resp := h.do("HEAD", "/api/v1/blobs/"+d, nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("HEAD of a missing blob: %d", resp.StatusCode)
	}
	got := decode[map[string]any](t, h.do("PUT", "/api/v1/blobs/"+d, bytes.NewReader(content)), http.StatusCreated)
	if got["digest"] != d || got["size"] != float64(len(content)) {
		t.Fatalf("PUT = %v", got)
	}
	decode[map[string]any](t, h.do("PUT", "/api/v1/blobs/"+d, bytes.NewReader(content)), http.StatusOK)
	head := h.do("HEAD", "/api/v1/blobs/"+d, nil)
	if head.StatusCode != 200 || head.ContentLength != int64(len(content)) {
		t.Fatalf("HEAD = %d, length %d", head.StatusCode, head.ContentLength)
	}
	get := h.do("GET", "/api/v1/blobs/"+d, nil)
	if body, _ := io.ReadAll(get.Body); get.StatusCode != 200 || !bytes.Equal(body, content) {
		t.Fatalf("GET = %d %q", get.StatusCode, body)
	}

	t.Run("a mismatched upload is refused and nothing kept", func(t *testing.T) {
		other := digestOf([]byte("something else"))
		wantError(t, h.do("PUT", "/api/v1/blobs/"+other, bytes.NewReader(content)), 400, "digest_mismatch", "match")
		if resp := h.do("HEAD", "/api/v1/blobs/"+other, nil); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("HEAD after a mismatch: %d", resp.StatusCode)
		}
	})
	t.Run("an upload over the limit is refused", func(t *testing.T) {
		big := bytes.Repeat([]byte("x"), 1001)
		wantError(t, h.do("PUT", "/api/v1/blobs/"+digestOf(big), bytes.NewReader(big)), 413, "too_large", "1000")
		// Without a Content-Length the limit still holds, while streaming.
		req, _ := http.NewRequestWithContext(t.Context(), "PUT", h.http.URL+"/api/v1/blobs/"+digestOf(big), io.MultiReader(bytes.NewReader(big)))
		req.Header.Set("Authorization", "Bearer "+h.token)
		req.ContentLength = -1
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		wantError(t, resp, 413, "too_large", "")
	})
	t.Run("a bad digest names the field", func(t *testing.T) {
		wantError(t, h.do("PUT", "/api/v1/blobs/md5:abc", bytes.NewReader(content)), 400, "bad_request", "digest")
	})
	t.Run("unreferenced blobs are collected, referenced ones kept", func(t *testing.T) {
		kept := []byte("kept")
		decode[map[string]any](t, h.do("PUT", "/api/v1/blobs/"+digestOf(kept), bytes.NewReader(kept)), http.StatusCreated)
		if err := h.store.PutResource(t.Context(), "default/shop", &resource.Deployed{ID: "1", Type: "egg", Name: "web", Source: digestOf(kept)}); err != nil {
			t.Fatal(err)
		}
		if err := h.fleet.CollectBlobs(t.Context()); err != nil {
			t.Fatal(err)
		}
		if resp := h.do("HEAD", "/api/v1/blobs/"+digestOf(kept), nil); resp.StatusCode != 200 {
			t.Fatalf("referenced blob: HEAD %d", resp.StatusCode)
		}
		if resp := h.do("HEAD", "/api/v1/blobs/"+d, nil); resp.StatusCode != 404 {
			t.Fatalf("unreferenced blob: HEAD %d, want it collected", resp.StatusCode)
		}
	})
}

func TestProjects(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	ctx := t.Context()
	for _, r := range []*resource.Deployed{
		{ID: "w1", Type: "egg", Name: "web", Source: digestOf([]byte("src")), Outputs: map[string]any{"address": "web:8080"}, Parents: []string{"secret/api_key"}},
		{ID: "s1", Type: "secret", Name: "api_key", Inputs: map[string]any{"value": "sealed"}, Outputs: map[string]any{"handle": "s1:hmac-sha256:abcd"}},
	} {
		if err := h.store.PutResource(ctx, "default/shop", r); err != nil {
			t.Fatal(err)
		}
	}
	a, err := h.store.StartApply(ctx, store.NewApply{Project: "default/shop", At: h.srv.now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.store.FinishApply(ctx, a.ID, store.ApplySucceeded, "", h.srv.now()); err != nil {
		t.Fatal(err)
	}

	list := decode[struct{ Projects []api.ProjectSummary }](t, h.do("GET", "/api/v1/projects", nil), 200)
	if len(list.Projects) != 1 || list.Projects[0].Namespace != "default" || list.Projects[0].Name != "shop" ||
		list.Projects[0].Resources != 2 || list.Projects[0].LastApply == nil || list.Projects[0].LastApply.Outcome != "succeeded" {
		t.Fatalf("projects = %+v", list.Projects)
	}

	resp := h.do("GET", "/api/v1/projects/default/shop", nil)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("show: %d %s", resp.StatusCode, body)
	}
	for _, leak := range []string{"hmac-sha256:abcd", "sealed", "sha256:"} {
		if bytes.Contains(body, []byte(leak)) {
			t.Errorf("project view shows %q: %s", leak, body)
		}
	}
	for _, want := range []string{`"address":"web:8080"`, `"handle":"[redacted]"`, `"outcome":"succeeded"`} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("project view lacks %s: %s", want, body)
		}
	}
	wantError(t, h.do("GET", "/api/v1/projects/default/nope", nil), 404, "not_found", "nope")
}

func TestMetricsAreExposed(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	h.do("GET", "/api/v1/hosts", nil)
	resp := h.do("GET", "/metrics", nil)
	body, _ := io.ReadAll(resp.Body)
	for _, name := range []string{"hatch_http_requests_total", "hatch_longpoll_waiters", "hatch_blob_bytes", `route="GET /api/v1/hosts"`} {
		if !bytes.Contains(body, []byte(name)) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}
