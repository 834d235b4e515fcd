package apiclient

import (
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/pki/authority"
)

// No client of the control plane (the CLI's, the agent's) accepts a host
// certificate: a host posing as the control plane with its mesh
// certificate, kept beside the server's CA, is refused before the token is
// sent, whichever CA the token pins.
func TestTheClientRefusesAServerPresentingAHostCertificate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	now := time.Now()
	material, err := authority.LoadOrCreate(dir, authority.DefaultNames(), now)
	if err != nil {
		t.Fatal(err)
	}
	hostCA, err := authority.LoadOrCreateHostCA(dir, authority.MaxHostLifetime, now)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := pki.NewHostKey()
	csr, _ := pki.HostCSR(key, "h-1")
	certPEM, err := hostCA.SignHost(csr, "h-1", now)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, _ := pki.HostKeyPEM(key)
	hc, err := pki.ParseHostCertificate(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	hc.Certificate.Certificate = append(hc.Certificate.Certificate, hostCA.Cert.Raw)

	var requests atomic.Int32
	impostor := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { requests.Add(1) }))
	impostor.TLS = &tls.Config{Certificates: []tls.Certificate{hc.Certificate}}
	impostor.StartTLS()
	t.Cleanup(impostor.Close)

	for name, fp := range map[string]string{
		"the control plane's CA": material.Fingerprint(),
		"the host CA":            pki.Fingerprint(hostCA.Cert.Raw),
	} {
		t.Run("a token pinning "+name, func(t *testing.T) {
			c, err := New(impostor.URL, pki.NewToken(pki.KindAdmin, fp).String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			err = c.Do(t.Context(), http.MethodGet, "/api/v1/hosts", nil, nil)
			if err == nil {
				t.Fatal("the client accepted a host certificate")
			}
			if name == "the control plane's CA" && !errors.Is(err, pki.ErrFingerprintMismatch) {
				t.Fatalf("err %v, want ErrFingerprintMismatch", err)
			}
		})
	}
	if n := requests.Load(); n != 0 {
		t.Fatalf("the impostor got %d requests", n)
	}
}
