package server

import (
	"crypto/ecdsa"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/pki"
)

func csrBody(t *testing.T, v any) *strings.Reader {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return strings.NewReader(string(b))
}

// newCSR makes a key and a CSR for it, naming hostID.
func newCSR(t *testing.T, hostID string) (*ecdsa.PrivateKey, string) {
	t.Helper()
	key, err := pki.NewHostKey()
	if err != nil {
		t.Fatal(err)
	}
	csr, err := pki.HostCSR(key, hostID)
	if err != nil {
		t.Fatal(err)
	}
	return key, string(csr)
}

// checkHostCert checks a certificate answer: it names hostID only, is for
// key, and chains to the host CA the answer carries, which is the server's.
func checkHostCert(t *testing.T, sh *secureHarness, certPEM, caPEM, hostID string, key *ecdsa.PrivateKey) {
	t.Helper()
	cert, err := pki.ParseCertificatePEM([]byte(certPEM))
	if err != nil {
		t.Fatalf("certificate: %v", err)
	}
	if id, err := pki.HostIDFromCert(cert); err != nil || id != hostID {
		t.Fatalf("certificate names %q (%v), want %q", id, err, hostID)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		t.Fatal("the certificate is not for the key of the CSR")
	}
	ca, err := pki.ParseCertificatePEM([]byte(caPEM))
	if err != nil || !ca.Equal(sh.hostCA.Cert) {
		t.Fatalf("host CA in the answer is not the server's (%v)", err)
	}
	if err := cert.CheckSignatureFrom(ca); err != nil {
		t.Fatalf("not signed by the host CA: %v", err)
	}
	if life := cert.NotAfter.Sub(cert.NotBefore); life > 7*24*time.Hour {
		t.Fatalf("lifetime %v, want at most 7 days", life)
	}
}

func TestJoinWithACSRGetsAHostCertificate(t *testing.T) {
	sh := newSecureHarness(t, DefaultConfig())
	joinTok, _ := sh.createJoinToken(time.Hour, 10)
	key, csr := newCSR(t, "whatever")
	got := decode[api.JoinResponse](t, sh.doAs(joinTok, "POST", "/api/v1/join",
		csrBody(t, api.JoinRequest{Name: "alpha", CSR: csr})), http.StatusCreated)
	sh.remember(got.Token)
	checkHostCert(t, sh, got.Certificate, got.HostCA, got.HostID, key)

	// An agent older than host certificates sends no CSR and gets none.
	old := decode[api.JoinResponse](t, sh.doAs(joinTok, "POST", "/api/v1/join", strings.NewReader(`{"name": "beta"}`)), http.StatusCreated)
	sh.remember(old.Token)
	if old.Certificate != "" || old.HostCA != "" {
		t.Fatal("a join without a CSR got a certificate")
	}
	sh.checkNoSecretLeaked()
}

func TestJoinRefusesABadCSRBeforeSpendingTheToken(t *testing.T) {
	sh := newSecureHarness(t, DefaultConfig())
	joinTok, _ := sh.createJoinToken(time.Hour, 1)
	_, csr := newCSR(t, "x")
	tampered := strings.Replace(csr, csr[len(csr)-60:len(csr)-50], strings.Repeat("A", 10), 1)
	for _, bad := range []string{"not a csr", tampered} {
		resp := sh.doAs(joinTok, "POST", "/api/v1/join", csrBody(t, api.JoinRequest{Name: "alpha", CSR: bad}))
		wantError(t, resp, http.StatusBadRequest, "bad_request", "csr")
	}
	if uses := sh.joinTokenUses(joinTok); uses != 0 {
		t.Fatalf("bad CSRs spent the join token (%d uses)", uses)
	}
}

// A host renews its certificate with its host token: the certificate names
// the host the token authenticated, whatever the CSR says. Who else may not
// is the auth matrix's (TestAuthMatrix).
func TestHostRenewsItsCertificate(t *testing.T) {
	sh := newSecureHarness(t, DefaultConfig())
	joinTok, _ := sh.createJoinToken(time.Hour, 10)
	alpha, alphaTok := sh.join(joinTok, "alpha")
	beta, _ := sh.join(joinTok, "beta")

	key, csr := newCSR(t, beta) // asks for beta's name
	got := decode[api.HostCertificate](t, sh.doAs(alphaTok, "POST", "/api/v1/hosts/"+alpha+"/certificate",
		csrBody(t, api.CertificateRequest{CSR: csr})), http.StatusOK)
	checkHostCert(t, sh, got.Certificate, got.HostCA, alpha, key)

	resp := sh.doAs(alphaTok, "POST", "/api/v1/hosts/"+alpha+"/certificate", csrBody(t, api.CertificateRequest{CSR: "junk"}))
	wantError(t, resp, http.StatusBadRequest, "bad_request", "csr")
	sh.checkNoSecretLeaked()
}
