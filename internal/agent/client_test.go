package agent

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"go.uber.org/zap/zaptest"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/pki/authority"
)

// tlsServer starts an HTTPS test server with a CA and serving certificate
// made by pki, as the control plane has, and returns it with the CA's
// fingerprint.
func tlsServer(t *testing.T, h http.Handler) (*httptest.Server, string) {
	t.Helper()
	p, err := authority.LoadOrCreate(t.TempDir(), authority.DefaultNames(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are what some tests want
	srv.TLS = p.TLSConfig()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, p.Fingerprint()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func TestJoinTradesTheJoinTokenForAHostIdentity(t *testing.T) {
	hostCA, err := authority.LoadOrCreateHostCA(t.TempDir(), authority.MaxHostLifetime, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var gotAuth, gotName, hostTok string
	srv, fp := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/join" {
			writeJSON(w, 404, map[string]string{"error": "not_found"})
			return
		}
		gotAuth = r.Header.Get("Authorization")
		var body api.JoinRequest
		_ = json.NewDecoder(r.Body).Decode(&body)
		gotName = body.Name
		cert, err := hostCA.SignHost([]byte(body.CSR), "h-123", time.Now())
		if err != nil {
			writeJSON(w, 400, map[string]string{"error": "bad_request", "message": err.Error()})
			return
		}
		writeJSON(w, 200, api.JoinResponse{HostID: "h-123", Token: hostTok, Certificate: string(cert), HostCA: string(hostCA.CertPEM())})
	}))
	joinTok := pki.NewToken(pki.KindJoin, fp).String()
	hostTok = pki.NewToken(pki.KindHost, fp).String()

	key, err := pki.NewHostKey()
	if err != nil {
		t.Fatal(err)
	}
	csr, err := pki.HostCSR(key, "")
	if err != nil {
		t.Fatal(err)
	}
	joined, err := Join(t.Context(), srv.URL, joinTok, "edge-1", csr)
	if err != nil {
		t.Fatal(err)
	}
	if gotAuth != "Bearer "+joinTok || gotName != "edge-1" {
		t.Errorf("server got Authorization %q and name %q", gotAuth, gotName)
	}
	want := Identity{Server: srv.URL, HostID: "h-123", Name: "edge-1", Token: hostTok, CAFingerprint: fp}
	if !reflect.DeepEqual(joined.Identity, want) {
		t.Errorf("identity %+v, want %+v", joined.Identity, want)
	}
	block, _ := pem.Decode(joined.CAPEM)
	if block == nil {
		t.Fatal("no CA certificate kept from the join")
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil || pki.Fingerprint(ca.Raw) != fp || !ca.IsCA {
		t.Errorf("kept certificate is not the pinned CA (err %v)", err)
	}
	// The host certificate is kept beside the identity, for the key made here.
	dir := t.TempDir()
	if err := keepJoinCertificate(dir, "h-123", key, joined.HostCert); err != nil {
		t.Fatal(err)
	}
	certs, err := OpenHostCerts(dir, "h-123", unreachable{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := certs.HostCertificate()
	if err != nil {
		t.Fatal(err)
	}
	if id, err := pki.HostIDFromCert(cert.Leaf); err != nil || id != "h-123" || !key.PublicKey.Equal(cert.Leaf.PublicKey) {
		t.Fatalf("kept certificate names %q (%v), or is for another key", id, err)
	}
	// Another host's certificate is not kept as this one's.
	if err := keepJoinCertificate(t.TempDir(), "h-other", key, joined.HostCert); err == nil {
		t.Fatal("a certificate naming another host was kept")
	}
}

func TestJoinRefusesAServerWhoseCertificateDoesNotMatchTheToken(t *testing.T) {
	var reached atomic.Bool
	srv, _ := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Store(true)
		writeJSON(w, 200, map[string]string{"host_id": "h", "token": "x"})
	}))
	otherCA := strings.Repeat("0f", 32)
	_, err := Join(t.Context(), srv.URL, pki.NewToken(pki.KindJoin, otherCA).String(), "", nil)
	if !errors.Is(err, pki.ErrFingerprintMismatch) {
		t.Errorf("join against another CA: %v, want ErrFingerprintMismatch", err)
	}
	if reached.Load() {
		t.Error("the join token reached a server that failed verification")
	}
}

func TestJoinRejectsTheWrongKindOfTokenAndPlainHTTP(t *testing.T) {
	fp := strings.Repeat("0f", 32)
	for _, tc := range []struct{ name, server, token, want string }{
		{"admin token", "https://127.0.0.1:1", pki.NewToken(pki.KindAdmin, fp).String(), "join token"},
		{"plain http beyond loopback", "http://hatch.invalid:1", pki.NewToken(pki.KindJoin, fp).String(), "loopback"},
		{"garbage token", "https://127.0.0.1:1", "hello", "malformed token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Join(t.Context(), tc.server, tc.token, "", nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestJoinReportsTheServersError(t *testing.T) {
	srv, fp := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 401, map[string]string{"error": "invalid_token", "message": "join token expired"})
	}))
	_, err := Join(t.Context(), srv.URL, pki.NewToken(pki.KindJoin, fp).String(), "", nil)
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Code != "invalid_token" || apiErr.Message != "join token expired" {
		t.Errorf("err %v, want the server's 401 invalid_token", err)
	}
}

// hostServer is a control plane for one host: desired state with long-poll
// semantics, status reports recorded.
func hostServer(t *testing.T, state contract.DesiredState, reports chan<- contract.StatusReport) *HTTPClient {
	t.Helper()
	var token string // set below, before any request, once the CA is known
	srv, fp := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			writeJSON(w, 401, map[string]string{"error": "unauthorized", "message": "bad host token"})
			return
		}
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/hosts/h1/desired-state":
			if r.URL.Query().Get("version") == state.Version {
				wait, err := time.ParseDuration(r.URL.Query().Get("wait"))
				if err != nil {
					writeJSON(w, 400, map[string]string{"error": "bad_request", "message": err.Error()})
					return
				}
				select {
				case <-time.After(wait):
				case <-r.Context().Done():
				}
				w.WriteHeader(http.StatusNotModified)
				return
			}
			writeJSON(w, 200, state)
		case r.Method == http.MethodPost && r.URL.Path == "/api/v1/hosts/h1/status":
			rep, err := contract.DecodeStatusReport(r.Body)
			if err != nil {
				writeJSON(w, 400, map[string]string{"error": "bad_request", "message": err.Error()})
				return
			}
			reports <- rep
			w.WriteHeader(http.StatusNoContent)
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/blobs/sha256:abc":
			_, _ = io.WriteString(w, "tar bytes")
		default:
			writeJSON(w, 404, map[string]string{"error": "not_found", "message": r.URL.Path})
		}
	}))
	token = "hatch-host.secret." + fp
	c, err := NewHTTPClient(Identity{Server: srv.URL, HostID: "h1", Token: token, CAFingerprint: fp})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestDesiredStateLongPoll(t *testing.T) {
	state := contract.DesiredState{HostID: "h1", Workloads: []contract.WorkloadSpec{web(2)}}
	state.Seal()
	c := hostServer(t, state, nil)

	got, err := c.DesiredState(t.Context(), "", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != state.Version || len(got.Workloads) != 1 || got.Workloads[0].Replicas != 2 {
		t.Errorf("got %+v", got)
	}

	began := time.Now()
	_, err = c.DesiredState(t.Context(), state.Version, 300*time.Millisecond)
	if !errors.Is(err, ErrNotModified) {
		t.Errorf("same version: %v, want ErrNotModified", err)
	}
	if held := time.Since(began); held < 250*time.Millisecond {
		t.Errorf("the server answered after %s; the wait was not sent", held)
	}
}

func TestStatusReportAndBlob(t *testing.T) {
	reports := make(chan contract.StatusReport, 1)
	c := hostServer(t, contract.DesiredState{HostID: "h1"}, reports)
	sent := contract.StatusReport{HostID: "h1", Version: "v9", Time: time.Now().UTC().Truncate(time.Second),
		Containers: []contract.ContainerStatus{{WorkloadID: "a/b/c", Slot: 1, State: contract.StateRunning, Healthy: true}}}
	if err := c.ReportStatus(t.Context(), sent); err != nil {
		t.Fatal(err)
	}
	got := <-reports
	if got.Version != sent.Version || !got.Time.Equal(sent.Time) || !reflect.DeepEqual(got.Containers, sent.Containers) {
		t.Errorf("server got %+v, want %+v", got, sent)
	}

	rc, err := c.OpenBlob(t.Context(), "sha256:abc")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "tar bytes" {
		t.Errorf("blob %q", b)
	}
	if _, err := c.OpenBlob(t.Context(), "sha256:missing"); err == nil {
		t.Error("a missing blob gave no error")
	}
}

func TestAWrongHostTokenIsAnAPIError(t *testing.T) {
	c := hostServer(t, contract.DesiredState{HostID: "h1"}, nil)
	right, err := pki.ParseToken(c.api.Token())
	if err != nil {
		t.Fatal(err)
	}
	right.Secret = "other"
	wrong, err := NewHTTPClient(Identity{Server: c.api.Server(), HostID: "h1", Token: right.String(), CAFingerprint: right.Fingerprint})
	if err != nil {
		t.Fatal(err)
	}
	_, err = wrong.DesiredState(context.Background(), "", time.Second)
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Code != "unauthorized" {
		t.Errorf("err %v, want a 401 APIError", err)
	}
}

// The client names the peers it holds, and puts them back into an answer
// that left them out; an answer that leaves out peers it does not hold is
// an error, after which it asks for them whole.
func TestDesiredStateFillsInThePeersItHolds(t *testing.T) {
	peers := []contract.Peer{{HostID: "h1", Addresses: []string{"10.0.0.1:7702"}}, {HostID: "h2"}}
	state := contract.DesiredState{HostID: "h1", Workloads: []contract.WorkloadSpec{web(1)}, Peers: peers,
		PeersVersion: contract.PeersVersion(peers)}
	state.Seal()
	var asked []string // the peers= of each request
	omit := ""         // the PeersVersion an answer without peers claims
	srv, fp := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		held := r.URL.Query().Get("peers")
		asked = append(asked, held)
		answer := state
		if omit != "" {
			answer.Peers, answer.PeersOmitted, answer.PeersVersion = nil, true, omit
		}
		writeJSON(w, 200, answer)
	}))
	c, err := NewHTTPClient(Identity{Server: srv.URL, HostID: "h1", Token: "hatch-host.secret." + fp, CAFingerprint: fp})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	first, err := c.DesiredState(t.Context(), "", 0)
	if err != nil || !reflect.DeepEqual(first.Peers, peers) {
		t.Fatalf("first answer: %+v, %v", first, err)
	}
	omit = state.PeersVersion
	second, err := c.DesiredState(t.Context(), "old", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(second.Peers, peers) || second.PeersOmitted || second.Version != state.Version || second.ComputeVersion() != state.Version {
		t.Fatalf("an answer without peers came back as %+v", second)
	}
	omit = "not-held"
	if _, err := c.DesiredState(t.Context(), "old", 0); err == nil || !strings.Contains(err.Error(), "left out peers") {
		t.Fatalf("an answer leaving out peers the host does not hold: %v", err)
	}
	omit = ""
	if _, err := c.DesiredState(t.Context(), "old", 0); err != nil {
		t.Fatal(err)
	}
	if want := []string{"", state.PeersVersion, state.PeersVersion, ""}; !slices.Equal(asked, want) {
		t.Fatalf("the requests named peers %q, want %q", asked, want)
	}
}
