package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestPageShowsReplicaVersionAndCount(t *testing.T) {
	cfg := config{Version: "2", Replica: "abc123"}
	tests := []struct {
		name    string
		counter Counter
		visits  string
	}{
		{"counted", fixedCounter{n: 41}, "visits: 41\n"},
		{"kv failing", fixedCounter{err: errors.New("connection refused")}, "visits: unavailable (kv does not answer)\n"},
		{"no kv configured", nil, "visits: unavailable (no KV_URL)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := get(t, newHandler(cfg, tt.counter), "/")
			if status != http.StatusOK {
				t.Fatalf("GET / = %d, want 200 even without a count", status)
			}
			want := "Hello from Hatchery!\nreplica: abc123\nversion: 2\n" + tt.visits
			if body != want {
				t.Fatalf("GET / =\n%s\nwant\n%s", body, want)
			}
		})
	}
}

func TestVersionAndHealthz(t *testing.T) {
	h := newHandler(config{Version: "7"}, nil)
	if status, body := get(t, h, "/version"); status != 200 || body != "7\n" {
		t.Fatalf("GET /version = %d %q", status, body)
	}
	if status, _ := get(t, h, "/healthz"); status != 200 {
		t.Fatalf("GET /healthz = %d", status)
	}
	if status, _ := get(t, h, "/nothing"); status != http.StatusNotFound {
		t.Fatalf("GET /nothing = %d, want 404", status)
	}
}

func TestKVCounterIncrementsTheVisitsKey(t *testing.T) {
	var path string
	kv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path = r.Method + " " + r.URL.Path
		_, _ = io.WriteString(w, "12\n")
	}))
	t.Cleanup(kv.Close)
	n, err := (&kvCounter{base: kv.URL, client: kv.Client()}).Incr(context.Background(), "visits")
	if err != nil || n != 12 {
		t.Fatalf("Incr = %d, %v; want 12", n, err)
	}
	if path != "POST /kv/visits/incr" {
		t.Fatalf("kv was asked %s", path)
	}
}

func TestKVCounterReportsABadAnswer(t *testing.T) {
	for name, h := range map[string]http.HandlerFunc{
		"error status": func(w http.ResponseWriter, r *http.Request) { http.Error(w, "disk full", 500) },
		"not a number": func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "many") },
	} {
		t.Run(name, func(t *testing.T) {
			kv := httptest.NewServer(h)
			t.Cleanup(kv.Close)
			if _, err := (&kvCounter{base: kv.URL, client: kv.Client()}).Incr(context.Background(), "visits"); err == nil {
				t.Fatal("Incr succeeded on a bad answer")
			}
		})
	}
}

func TestConfigDefaultsAndRefusesABadPort(t *testing.T) {
	cfg, err := configFromEnv(env(map[string]string{"KV_URL": "http://kv:8081/", "HOSTNAME": "c1"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Port != 8080 || cfg.Version != "unknown" || cfg.KVURL != "http://kv:8081" || cfg.Replica != "c1" {
		t.Fatalf("config = %+v", cfg)
	}
	if _, err := configFromEnv(env(map[string]string{"PORT": "99999"})); err == nil || !strings.Contains(err.Error(), "PORT") {
		t.Fatalf("PORT=99999 gave %v, want an error naming PORT", err)
	}
}

func TestRunCountsThroughKVAndStopsWhenCancelled(t *testing.T) {
	kv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "1\n") }))
	t.Cleanup(kv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan net.Addr, 1)
	done := make(chan error, 1)
	vars := env(map[string]string{"PORT": "0", "VERSION": "3", "KV_URL": kv.URL, "HOSTNAME": "r0"})
	go func() { done <- run(ctx, vars, func(a net.Addr) { addrs <- a }) }()
	var addr net.Addr
	select {
	case addr = <-addrs:
	case err := <-done:
		t.Fatalf("run returned before serving: %v", err)
	}
	_, port, _ := net.SplitHostPort(addr.String())
	resp, err := http.Get("http://127.0.0.1:" + port + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "version: 3\nvisits: 1\n") {
		t.Fatalf("GET / = %q", body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run = %v after cancel, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}

type fixedCounter struct {
	n   int64
	err error
}

func (c fixedCounter) Incr(context.Context, string) (int64, error) { return c.n, c.err }

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
