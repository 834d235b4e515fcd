package agent

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"errors"
	"go.uber.org/zap/zaptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/pki/authority"
)

// unreachable is a control plane that cannot be reached.
type unreachable struct{}

func (unreachable) RenewCertificate(context.Context, []byte) (api.HostCertificate, error) {
	return api.HostCertificate{}, errors.New("connection refused")
}

// signingRenewer signs as the control plane would, for host.
type signingRenewer struct {
	ca    *authority.HostCA
	host  string
	now   func() time.Time
	calls atomic.Int64
}

func (s *signingRenewer) RenewCertificate(_ context.Context, csr []byte) (api.HostCertificate, error) {
	s.calls.Add(1)
	cert, err := s.ca.SignHost(csr, s.host, s.now())
	if err != nil {
		return api.HostCertificate{}, err
	}
	return api.HostCertificate{Certificate: string(cert), HostCA: string(s.ca.CertPEM())}, nil
}

func newSigningRenewer(t *testing.T, host string, now func() time.Time) *signingRenewer {
	t.Helper()
	ca, err := authority.LoadOrCreateHostCA(t.TempDir(), authority.MaxHostLifetime, now())
	if err != nil {
		t.Fatal(err)
	}
	return &signingRenewer{ca: ca, host: host, now: now}
}

func TestHostCertificateIsRenewedAtHalfLifeWithANewKey(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	dir := t.TempDir()
	r := newSigningRenewer(t, "h-1", clock)
	certs, err := OpenHostCerts(dir, "h-1", r, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	certs.now = clock
	if _, err := certs.HostCertificate(); !errors.Is(err, ErrNoHostCertificate) {
		t.Fatalf("before any certificate: %v", err)
	}
	if err := certs.Ensure(t.Context()); err != nil {
		t.Fatal(err)
	}
	first, err := certs.HostCertificate()
	if err != nil || r.calls.Load() != 1 {
		t.Fatalf("after Ensure: %v, %d calls", err, r.calls.Load())
	}
	for _, f := range []string{hostKeyFile, hostCertFile, hostCAFile} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v, want mode 0600", f, fi, err)
		}
	}

	now = now.Add(3*24*time.Hour + 11*time.Hour) // before half-life (3.5 days from 5 minutes back)
	if err := certs.Ensure(t.Context()); err != nil || r.calls.Load() != 1 {
		t.Fatalf("renewed before half-life: %v, %d calls", err, r.calls.Load())
	}
	now = now.Add(time.Hour) // past it
	if err := certs.Ensure(t.Context()); err != nil || r.calls.Load() != 2 {
		t.Fatalf("not renewed past half-life: %v, %d calls", err, r.calls.Load())
	}
	second, _ := certs.HostCertificate()
	if second.Leaf.Equal(first.Leaf) || second.Leaf.PublicKey.(*ecdsa.PublicKey).Equal(first.Leaf.PublicKey) {
		t.Fatal("the renewal kept the certificate or the key")
	}
	// What is on disk is what is used.
	reopened, err := OpenHostCerts(dir, "h-1", unreachable{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	onDisk, err := reopened.HostCertificate()
	if err != nil || !onDisk.Leaf.Equal(second.Leaf) {
		t.Fatalf("reopened: %v", err)
	}
	if reopened.HostCA() == nil {
		t.Fatal("no host CA pool")
	}
}

// An agent that joined before host certificates (an identity, no host
// certificate) gets one at its next start through the renewal route; until
// then, and while the control plane cannot be reached, the mesh is told
// there is none.
func TestAnAgentWithoutAHostCertificateGetsOneAtStart(t *testing.T) {
	dir := t.TempDir()
	r := newSigningRenewer(t, "h-1", time.Now)
	certs, err := OpenHostCerts(dir, "h-1", r, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); certs.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := certs.HostCertificate(); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no certificate 5 s after start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := r.calls.Load(); n != 1 {
		t.Fatalf("%d renewals, want 1", n)
	}
}

func TestAKeptCertificateThatIsNotThisHostsIsReplaced(t *testing.T) {
	now := time.Now()
	dir := t.TempDir()
	other := newSigningRenewer(t, "h-other", time.Now)
	foreign, err := OpenHostCerts(dir, "h-other", other, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := foreign.Ensure(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The same files, opened as h-1: not its certificate.
	mine, err := OpenHostCerts(dir, "h-1", newSigningRenewer(t, "h-1", time.Now), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mine.HostCertificate(); !errors.Is(err, ErrNoHostCertificate) {
		t.Fatalf("another host's certificate was taken: %v", err)
	}
	// A key that does not match the certificate (a crash between the two
	// writes) is not used either.
	key, _ := pki.NewHostKey()
	keyPEM, _ := pki.HostKeyPEM(key)
	if err := os.WriteFile(filepath.Join(dir, hostKeyFile), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	again, err := OpenHostCerts(dir, "h-other", other, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again.HostCertificate(); !errors.Is(err, ErrNoHostCertificate) {
		t.Fatalf("a mismatched key and certificate were used: %v", err)
	}
	if err := again.Ensure(t.Context()); err != nil {
		t.Fatal(err)
	}
	got, _ := again.HostCertificate()
	kept, _ := os.ReadFile(filepath.Join(dir, hostKeyFile))
	if bytes.Equal(kept, keyPEM) || got.Leaf.NotBefore.Before(now.Add(-time.Hour)) {
		t.Fatal("the mismatched pair was not replaced")
	}
}

// A failed renewal changes nothing: the certificate in use stays.
func TestAFailedRenewalKeepsTheCertificate(t *testing.T) {
	dir := t.TempDir()
	r := newSigningRenewer(t, "h-1", time.Now)
	certs, _ := OpenHostCerts(dir, "h-1", r, zaptest.NewLogger(t))
	if err := certs.Renew(t.Context()); err != nil {
		t.Fatal(err)
	}
	before, _ := certs.HostCertificate()
	certs.renewer = unreachable{}
	if err := certs.Renew(t.Context()); err == nil {
		t.Fatal("renewal against an unreachable control plane succeeded")
	}
	// A wrong answer (another host's certificate) is refused too.
	certs.renewer = &signingRenewer{ca: r.ca, host: "h-2", now: time.Now}
	if err := certs.Renew(t.Context()); err == nil {
		t.Fatal("a certificate for another host was installed")
	}
	after, _ := certs.HostCertificate()
	if !after.Leaf.Equal(before.Leaf) {
		t.Fatal("a failed renewal replaced the certificate")
	}
}
