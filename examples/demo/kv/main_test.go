package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestHandlerAnswersEachRequestWithItsStatus(t *testing.T) {
	srv := httptest.NewServer(newHandler(openStore(t)))
	t.Cleanup(srv.Close)
	steps := []struct {
		method, path, body string
		status             int
		answer             string
	}{
		{"GET", "/kv/visits", "", http.StatusNotFound, ""},
		{"POST", "/kv/visits/incr", "", http.StatusOK, "1\n"},
		{"POST", "/kv/visits/incr", "", http.StatusOK, "2\n"},
		{"GET", "/kv/visits", "", http.StatusOK, "2"},
		{"PUT", "/kv/name", "demo", http.StatusNoContent, ""},
		{"GET", "/kv/name", "", http.StatusOK, "demo"},
		{"POST", "/kv/name/incr", "", http.StatusBadRequest, ""},
		{"GET", "/kv/.hidden", "", http.StatusBadRequest, ""},
		{"PUT", "/kv/big", strings.Repeat("x", maxValue+1), http.StatusRequestEntityTooLarge, ""},
		{"DELETE", "/kv/name", "", http.StatusMethodNotAllowed, ""},
		{"GET", "/healthz", "", http.StatusOK, "ok\n"},
	}
	for _, s := range steps {
		req, _ := http.NewRequest(s.method, srv.URL+s.path, strings.NewReader(s.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != s.status {
			t.Fatalf("%s %s = %d %q, want %d", s.method, s.path, resp.StatusCode, body, s.status)
		}
		if s.answer != "" && string(body) != s.answer {
			t.Fatalf("%s %s answered %q, want %q", s.method, s.path, body, s.answer)
		}
	}
}

func TestRunServesUntilCancelledThenStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	env := map[string]string{"PORT": "0", "DATA_DIR": t.TempDir()}
	addrs := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, func(k string) string { return env[k] }, func(a net.Addr) { addrs <- a }) }()
	var addr net.Addr
	select {
	case addr = <-addrs:
	case err := <-done:
		t.Fatalf("run returned before serving: %v", err)
	}
	_, port, _ := net.SplitHostPort(addr.String())
	resp, err := http.Post("http://127.0.0.1:"+port+"/kv/n/incr", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("incr = %d", resp.StatusCode)
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

func TestRunRefusesABadPort(t *testing.T) {
	err := run(context.Background(), func(k string) string { return map[string]string{"PORT": "http"}[k] }, nil)
	if err == nil || !strings.Contains(err.Error(), "PORT") {
		t.Fatalf("run = %v, want an error naming PORT", err)
	}
}
