package server_test

import (
	"errors"
	"go.uber.org/zap/zaptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/agent"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/pki/authority"
)

// The host certificate's life with the real server over TLS: a join with a
// CSR gets one; an agent that joined without (before host certificates)
// gets one through the renewal route; a removed host gets none.
func TestAgentsGetHostCertificatesAtJoinAndByRenewal(t *testing.T) {
	w := newTLSWorld(t)
	jt, err := w.admin.JoinTokens().Create(t.Context(), time.Hour, 2)
	if err != nil {
		t.Fatal(err)
	}
	hostCA, err := authority.LoadOrCreateHostCA(filepath.Join(w.dataDir, "tls"), authority.MaxHostLifetime, time.Now())
	if err != nil {
		t.Fatal(err)
	}

	key, _ := pki.NewHostKey()
	csr, _ := pki.HostCSR(key, "")
	joined, err := agent.Join(t.Context(), w.url, jt.Token, "alpha", csr)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCertificatePEM([]byte(joined.HostCert.Certificate))
	if err != nil {
		t.Fatalf("join answer's certificate: %v", err)
	}
	if id, err := pki.HostIDFromCert(cert); err != nil || id != joined.Identity.HostID || cert.CheckSignatureFrom(hostCA.Cert) != nil {
		t.Fatalf("join certificate names %q (%v), or is not the host CA's", id, err)
	}

	// An agent of before: no CSR at join, its certificate by renewal.
	old, err := agent.Join(t.Context(), w.url, jt.Token, "beta", nil)
	if err != nil {
		t.Fatal(err)
	}
	if old.HostCert.Certificate != "" {
		t.Fatal("a join without a CSR got a certificate")
	}
	cp, err := agent.NewHTTPClient(old.Identity)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := agent.OpenHostCerts(t.TempDir(), old.Identity.HostID, cp, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := certs.Ensure(t.Context()); err != nil {
		t.Fatalf("renewal: %v", err)
	}
	got, err := certs.HostCertificate()
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := pki.HostIDFromCert(got.Leaf); id != old.Identity.HostID || got.Leaf.CheckSignatureFrom(hostCA.Cert) != nil {
		t.Fatalf("renewed certificate names %q, or is not the host CA's", id)
	}

	// Removed: its token, and so its renewals, are refused.
	if _, err := w.admin.Hosts().Remove(t.Context(), "beta"); err != nil {
		t.Fatal(err)
	}
	var apiErr *agent.APIError
	if err := certs.Renew(t.Context()); !errors.As(err, &apiErr) || apiErr.StatusCode != 401 {
		t.Fatalf("a removed host's renewal: %v, want 401", err)
	}
	w.checkNothingLeaked([]string{jt.Token, joined.Identity.Token, old.Identity.Token})
}
