package authority

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
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

func testHostCA(t *testing.T, dir string, now time.Time) *HostCA {
	t.Helper()
	ca, err := LoadOrCreateHostCA(dir, MaxHostLifetime, now)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// issue makes a key and has the CA sign it for id.
func issue(t *testing.T, ca *HostCA, id string, now time.Time) pki.HostCertificate {
	t.Helper()
	key, err := pki.NewHostKey()
	if err != nil {
		t.Fatal(err)
	}
	csr, err := pki.HostCSR(key, id)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := ca.SignHost(csr, id, now)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := pki.HostKeyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := pki.ParseHostCertificate(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return hc
}

func TestSignHostIssuesOnlyTheHostURIForSevenDays(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ca := testHostCA(t, t.TempDir(), now)
	hc := issue(t, ca, "h-0123456789ab", now)
	cert := hc.Leaf

	if hc.HostID != "h-0123456789ab" {
		t.Errorf("host ID %q", hc.HostID)
	}
	if len(cert.URIs) != 1 || cert.URIs[0].String() != "hatch://host/h-0123456789ab" {
		t.Errorf("URIs %v, want only hatch://host/h-0123456789ab", cert.URIs)
	}
	if len(cert.DNSNames)+len(cert.IPAddresses)+len(cert.EmailAddresses) != 0 || cert.Subject.String() != "" {
		t.Errorf("names beyond the URI: DNS %v IP %v email %v subject %q", cert.DNSNames, cert.IPAddresses, cert.EmailAddresses, cert.Subject)
	}
	if life := cert.NotAfter.Sub(cert.NotBefore); life != 7*24*time.Hour {
		t.Errorf("lifetime %v, want 7 days", life)
	}
	if !cert.NotBefore.Before(now) || !cert.NotAfter.After(now.Add(6*24*time.Hour)) {
		t.Errorf("valid %v to %v, not around %v", cert.NotBefore, cert.NotAfter, now)
	}
	if renew := pki.RenewAt(cert); !renew.Equal(cert.NotBefore.Add(84 * time.Hour)) {
		t.Errorf("renew at %v, want half-life", renew)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("verify for %v: %v", usage, err)
		}
	}
	if cert.IsCA {
		t.Error("a host certificate is a CA")
	}
}

func TestSignHostTakesEd25519Keys(t *testing.T) {
	now := time.Now()
	ca := testHostCA(t, t.TempDir(), now)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	csr, err := pki.HostCSR(key, "h-1")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := ca.SignHost(csr, "h-1", now)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, _ := pki.HostKeyPEM(key)
	if hc, err := pki.ParseHostCertificate(certPEM, keyPEM); err != nil || hc.HostID != "h-1" {
		t.Fatalf("parse: %v %q", err, hc.HostID)
	}
}

func TestSignHostNamesTheAuthenticatedHostNotTheRequest(t *testing.T) {
	now := time.Now()
	ca := testHostCA(t, t.TempDir(), now)
	key, _ := pki.NewHostKey()
	csr, _ := pki.HostCSR(key, "h-victim") // asks for another host's name
	certPEM, err := ca.SignHost(csr, "h-caller", now)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := pki.ParseCertificatePEM(certPEM)
	if id, err := pki.HostIDFromCert(cert); err != nil || id != "h-caller" {
		t.Fatalf("certificate names %q (%v), want h-caller", id, err)
	}
}

func TestSignHostRefusesBadRequests(t *testing.T) {
	now := time.Now()
	ca := testHostCA(t, t.TempDir(), now)
	good, _ := pki.NewHostKey()
	goodCSR, _ := pki.HostCSR(good, "h-1")

	tampered := func() []byte {
		block, _ := pem.Decode(goodCSR)
		der := bytes.Clone(block.Bytes)
		der[len(der)-3] ^= 0xff // inside the signature
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	}
	csrFor := func(key any) []byte {
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	}
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)

	for name, csr := range map[string][]byte{
		"not PEM":        []byte("hello"),
		"wrong PEM type": bytes.Replace(goodCSR, []byte("CERTIFICATE REQUEST"), []byte("CERTIFICATE"), 2),
		"bad signature":  tampered(),
		"P-384 key":      csrFor(p384),
		"RSA key":        csrFor(rsaKey),
		"garbage in PEM": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte("junk")}),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ca.SignHost(csr, "h-1", now); !errors.Is(err, ErrBadCSR) {
				t.Fatalf("err %v, want ErrBadCSR", err)
			}
		})
	}
	for _, id := range []string{"", "h/1", "h 1", "../x", "h?x"} {
		if _, err := ca.SignHost(goodCSR, id, now); err == nil {
			t.Errorf("host ID %q signed", id)
		}
	}
}

func TestHostCAIsKeptAndIsNotTheServerCA(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	srv, err := LoadOrCreate(dir, []string{"localhost"}, now)
	if err != nil {
		t.Fatal(err)
	}
	ca := testHostCA(t, dir, now)
	if bytes.Equal(ca.Cert.Raw, srv.CA.Raw) {
		t.Fatal("the host CA is the server CA")
	}
	again := testHostCA(t, dir, now.Add(time.Hour))
	if !bytes.Equal(again.Cert.Raw, ca.Cert.Raw) {
		t.Fatal("the host CA was made anew at the second start")
	}
	if fi, err := os.Stat(filepath.Join(dir, hostCAKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("host CA key: %v %v", fi.Mode(), err)
	}
	for _, life := range []time.Duration{0, -time.Hour, MaxHostLifetime + time.Second} {
		if _, err := LoadOrCreateHostCA(dir, life, now); err == nil {
			t.Errorf("lifetime %v accepted", life)
		}
	}
}

// A certificate the host CA's key signed with a DNS name (a bug, or a stolen
// key used carelessly) still does not verify: the CA is constrained to name
// hosts only.
func TestHostCAIsConstrainedToHostURIs(t *testing.T) {
	now := time.Now()
	ca := testHostCA(t, t.TempDir(), now)
	key, _ := pki.NewHostKey()
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for name, tmpl := range map[string]*x509.Certificate{
		"DNS name":  {DNSNames: []string{"localhost"}},
		"other URI": {URIs: []*url.URL{{Scheme: "https", Host: "example.com"}}},
	} {
		tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = serial(), now.Add(-time.Minute), now.Add(time.Hour)
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
		if err != nil {
			t.Fatal(err)
		}
		cert, _ := x509.ParseCertificate(der)
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now}); err == nil {
			t.Errorf("%s: a certificate outside the host CA's constraints verified", name)
		}
	}
}

func TestHostIDFromCertRefusesOtherCertificates(t *testing.T) {
	srv, err := LoadOrCreate(t.TempDir(), []string{"localhost", "127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.HostIDFromCert(srv.certificate.Leaf); err == nil {
		t.Error("the serving certificate passed for a host certificate")
	}
	for _, u := range []string{"https://host/h-1", "hatch://hosts/h-1", "hatch://host/", "hatch://host/h-1/x", "hatch://host/h-1?x=1"} {
		parsed, _ := url.Parse(u)
		if _, err := pki.HostIDFromCert(&x509.Certificate{URIs: []*url.URL{parsed}}); err == nil {
			t.Errorf("URI %s passed", u)
		}
	}
}

// No client of the control plane accepts a host certificate: a server that
// presents one (a host posing as the control plane) is refused whether the
// client pins the server CA (not in the chain) or, wrongly, the host CA (no
// host name in a host certificate).
func TestControlPlaneClientsRefuseHostCertificates(t *testing.T) {
	now := time.Now()
	dir := t.TempDir()
	srv, err := LoadOrCreate(dir, []string{"localhost", "127.0.0.1"}, now)
	if err != nil {
		t.Fatal(err)
	}
	ca := testHostCA(t, dir, now)
	hc := issue(t, ca, "h-1", now)
	hc.Certificate.Certificate = append(hc.Certificate.Certificate, ca.Cert.Raw)

	impostor := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	impostor.TLS = &tls.Config{Certificates: []tls.Certificate{hc.Certificate}}
	impostor.StartTLS()
	t.Cleanup(impostor.Close)

	if err := get(t, impostor.URL, srv.Fingerprint()); !errors.Is(err, pki.ErrFingerprintMismatch) {
		t.Errorf("pinning the server CA: err %v, want pki.ErrFingerprintMismatch", err)
	}
	if err := get(t, impostor.URL, pki.Fingerprint(ca.Cert.Raw)); err == nil || !strings.Contains(err.Error(), "verify server certificate") {
		t.Errorf("pinning the host CA: err %v, want a failed verification", err)
	}
}
