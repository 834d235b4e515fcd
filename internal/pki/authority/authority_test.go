package authority

import (
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/pki"
)

func serve(t *testing.T, s *Server) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello")
	}))
	srv.TLS = s.TLSConfig()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, rawURL, fingerprint string) error {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pki.ClientConfig(fingerprint, u.Hostname())
	if err != nil {
		return err
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}
	resp, err := c.Get(rawURL)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "hello" {
		t.Fatalf("body %q", body)
	}
	return nil
}

func TestPinnedClientTrustsOnlyItsServer(t *testing.T) {
	now := time.Now()
	s, err := LoadOrCreate(t.TempDir(), []string{"localhost", "127.0.0.1"}, now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := LoadOrCreate(t.TempDir(), []string{"localhost", "127.0.0.1"}, now)
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, s)
	if err := get(t, srv.URL, s.Fingerprint()); err != nil {
		t.Fatalf("pinned client refused its own server: %v", err)
	}
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	if err := get(t, "https://localhost:"+port, s.Fingerprint()); err != nil {
		t.Fatalf("by host name: %v", err)
	}
	err = get(t, srv.URL, other.Fingerprint())
	if !errors.Is(err, pki.ErrFingerprintMismatch) {
		t.Fatalf("a client pinned to another CA got %v, want pki.ErrFingerprintMismatch", err)
	}
}

func TestPinnedClientChecksTheHostName(t *testing.T) {
	// The certificate covers only localhost: reaching the same server as
	// 127.0.0.1 must fail even though the CA matches.
	s, err := LoadOrCreate(t.TempDir(), []string{"localhost"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, s)
	if err := get(t, srv.URL, s.Fingerprint()); err == nil {
		t.Fatal("a certificate without 127.0.0.1 was accepted for 127.0.0.1")
	}
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	if err := get(t, "https://localhost:"+port, s.Fingerprint()); err != nil {
		t.Fatalf("localhost: %v", err)
	}
}

func TestLoadOrCreateKeepsTheCA(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	first, err := LoadOrCreate(dir, []string{"localhost"}, now)
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadOrCreate(dir, []string{"localhost"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if again.Fingerprint() != first.Fingerprint() {
		t.Fatal("a restart changed the CA")
	}
	if !again.certificate.Leaf.Equal(first.certificate.Leaf) {
		t.Fatal("an unchanged serving certificate was replaced")
	}
	// A new name, or a certificate near its end, gives a new serving
	// certificate from the same CA.
	wider, err := LoadOrCreate(dir, []string{"localhost", "hatch.example"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if wider.Fingerprint() != first.Fingerprint() || wider.certificate.Leaf.Equal(first.certificate.Leaf) {
		t.Fatal("a new name should give a new serving certificate under the same CA")
	}
	later, err := LoadOrCreate(dir, []string{"localhost", "hatch.example"}, now.Add(serverLifetime-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if later.certificate.Leaf.Equal(wider.certificate.Leaf) {
		t.Fatal("a serving certificate about to expire was kept")
	}
	for _, name := range []string{caKeyFile, serverKeyFile} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", name, fi.Mode().Perm())
		}
	}
}

func TestPlainTLSClientWithoutThePinFails(t *testing.T) {
	s, err := LoadOrCreate(t.TempDir(), []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, s)
	conn, err := tls.Dial("tcp", strings.TrimPrefix(srv.URL, "https://"), &tls.Config{})
	if err == nil {
		conn.Close()
		t.Fatal("a client using the system roots trusted the private CA")
	}
}
