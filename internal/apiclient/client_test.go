package apiclient

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/pki/authority"
)

// tlsServer serves h over TLS with a CA and serving certificate made by pki,
// as `hatch server` does; it returns the server and its CA's fingerprint.
func tlsServer(t *testing.T, h http.Handler) (*httptest.Server, string) {
	t.Helper()
	material, err := authority.LoadOrCreate(t.TempDir(), authority.DefaultNames(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = material.TLSConfig()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, material.Fingerprint()
}

func TestTheClientTalksOnlyToTheServerItsTokenPins(t *testing.T) {
	var requests atomic.Int32
	var gotAuth atomic.Value
	srv, serverFP := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		gotAuth.Store(r.Header.Get("Authorization"))
		_ = json.NewEncoder(w).Encode(map[string]any{"hosts": []api.Host{{ID: "h-1", Name: "alpha", State: "up"}}})
	}))

	t.Run("the right fingerprint: the request is made, with the token", func(t *testing.T) {
		tok := pki.NewToken(pki.KindAdmin, serverFP).String()
		c, err := New(srv.URL, tok)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var hosts api.HostList
		err = c.Do(t.Context(), http.MethodGet, "/api/v1/hosts", nil, &hosts)
		if err != nil || len(hosts.Hosts) != 1 || hosts.Hosts[0].Name != "alpha" {
			t.Fatalf("GET /api/v1/hosts = %+v, %v", hosts, err)
		}
		if gotAuth.Load() != "Bearer "+tok {
			t.Fatal("the server did not get the token as a bearer token")
		}
	})

	t.Run("another fingerprint: the handshake fails and nothing is sent", func(t *testing.T) {
		before := requests.Load()
		tok := pki.NewToken(pki.KindAdmin, strings.Repeat("cd", 32)).String()
		c, err := New(srv.URL, tok)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		err = c.Do(t.Context(), http.MethodGet, "/api/v1/hosts", nil, nil)
		if !errors.Is(err, pki.ErrFingerprintMismatch) {
			t.Fatalf("GET /api/v1/hosts against a server of another CA: %v, want ErrFingerprintMismatch", err)
		}
		if strings.Contains(err.Error(), tok) {
			t.Fatal("the error repeats the token")
		}
		if n := requests.Load() - before; n != 0 {
			t.Fatalf("the server got %d requests from a client that should have refused it", n)
		}
	})
}

func TestPlainHTTPIsAllowedOnlyToLoopback(t *testing.T) {
	tok := pki.NewToken(pki.KindAdmin, strings.Repeat("ab", 32)).String()
	for server, ok := range map[string]bool{
		"http://127.0.0.1:7700":     true,
		"http://[::1]:7700":         true,
		"http://localhost:7700":     true,
		"http://10.0.0.5:7700":      false,
		"http://cp.example.com":     false,
		"ftp://127.0.0.1":           false,
		"127.0.0.1:7700":            false,
		"https://user:pw@host:7700": false,
	} {
		_, err := New(server, tok)
		if (err == nil) != ok {
			t.Errorf("New(%s): %v; want allowed %v", server, err, ok)
		}
	}
}

func TestErrorAnswersBecomeAPIErrors(t *testing.T) {
	srv, serverFP := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error": "not_found", "message": "no host with ID or name \"gamma\""}`))
	}))
	c, err := New(srv.URL, pki.NewToken(pki.KindAdmin, serverFP).String())
	if err != nil {
		t.Fatal(err)
	}
	err = c.Do(t.Context(), http.MethodDelete, "/api/v1/hosts/gamma", nil, nil)
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "not_found" || !strings.Contains(apiErr.Message, "gamma") {
		t.Fatalf("DELETE /api/v1/hosts/gamma = %v, want the server's 404 as an APIError", err)
	}
}
