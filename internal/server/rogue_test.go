package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/pki"
)

// The rogue host harness: a real server (wired as `hatch server` wires it,
// its tokens in the store) behind a loopback listener, an admin client, and
// hosts that join for real (a join token spent for a host token and a host
// certificate), then say whatever they like with their own credentials:
// crafted reports, polls, session streams. Issue 24's findings each have a
// test through it. The control plane's placement is stood in for by place,
// which writes a host's desired state as the providers do.

// rogueWorld is the server and its admin.
type rogueWorld struct {
	t     *testing.T
	sh    *secureHarness
	url   string
	admin *client.Client
	join  string // a join token with uses to spare
}

// newRogueWorld starts a server with cfg on loopback, plain HTTP (a
// WebSocket needs the real listener, not the secure harness's recorder).
func newRogueWorld(t *testing.T, cfg Config) *rogueWorld {
	t.Helper()
	sh := newSecureHarness(t, cfg)
	hs := httptest.NewServer(sh.srv.Handler())
	t.Cleanup(hs.Close)
	w := &rogueWorld{t: t, sh: sh, url: hs.URL}
	w.admin = w.clientOf(sh.token)
	w.join, _ = sh.createJoinToken(time.Hour, 100)
	return w
}

// clientOf is a client of the server with token.
func (w *rogueWorld) clientOf(token string) *client.Client {
	w.t.Helper()
	c, err := client.New(client.Config{Server: w.url, Token: token})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(c.Close)
	return c
}

// rogueHost is a host that joined for real; what it sends is its own doing.
type rogueHost struct {
	w              *rogueWorld
	ID, Name       string
	Token          string
	Key            *ecdsa.PrivateKey
	Cert           *x509.Certificate // its host certificate, for the mesh
	CertPEM, CAPEM string
	C              *client.Client // with its host token
}

// joinHost joins a host named name with a CSR for a key of its own.
func (w *rogueWorld) joinHost(name string) *rogueHost {
	w.t.Helper()
	key, csr := newCSR(w.t, "")
	var got api.JoinResponse
	joiner := w.clientOf(w.join)
	if err := joiner.Do(w.t.Context(), "POST", "/api/v1/join", api.JoinRequest{Name: name, CSR: csr}, &got); err != nil {
		w.t.Fatalf("join %s: %v", name, err)
	}
	w.sh.remember(got.Token)
	cert, err := pki.ParseCertificatePEM([]byte(got.Certificate))
	if err != nil {
		w.t.Fatalf("join %s: certificate: %v", name, err)
	}
	return &rogueHost{w: w, ID: got.HostID, Name: got.Name, Token: got.Token, Key: key, Cert: cert,
		CertPEM: got.Certificate, CAPEM: got.HostCA, C: w.clientOf(got.Token)}
}

// webOf is egg of default/shop as the providers place it: replicas slots.
func webOf(egg string, replicas int) contract.WorkloadSpec {
	return contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: egg, Image: egg + ":1", Replicas: replicas, Port: 8080}
}

// place writes the host's desired state: these workloads and nothing else,
// as the control plane's providers would.
func (w *rogueWorld) place(h *rogueHost, workloads ...contract.WorkloadSpec) {
	w.t.Helper()
	putDesired(w.t, w.sh.store, w.sh.box, contract.DesiredState{HostID: h.ID, Workloads: workloads})
}

// running is a container of workload (namespace/project/egg) in slot,
// running and healthy, as an agent reports it.
func running(workload string, slot int) contract.ContainerStatus {
	return contract.ContainerStatus{WorkloadID: workload, Slot: slot, ContainerID: "c-" + workload, State: contract.StateRunning, Healthy: true}
}

// poll is the host's desired state, at once.
func (h *rogueHost) poll() contract.DesiredState {
	h.w.t.Helper()
	var d contract.DesiredState
	if err := h.C.Do(h.w.t.Context(), "GET", "/api/v1/hosts/"+h.ID+"/desired-state", nil, &d); err != nil {
		h.w.t.Fatalf("%s's desired state: %v", h.Name, err)
	}
	return d
}

// pollAt is the host's desired-state long-poll from version, held up to
// wait: the state and the answer's status (304: no change within wait).
func (h *rogueHost) pollAt(ctx context.Context, version string, wait time.Duration) (contract.DesiredState, int, error) {
	var d contract.DesiredState
	q := url.Values{"version": {version}, "wait": {wait.String()}}
	resp, err := h.C.Send(ctx, "GET", "/api/v1/hosts/"+h.ID+"/desired-state?"+q.Encode(), nil, "")
	if err != nil {
		return d, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		err = json.NewDecoder(resp.Body).Decode(&d)
	}
	return d, resp.StatusCode, err
}

// tlsCertificate is the host's mesh certificate with its key, as its agent
// presents it to peers.
func (h *rogueHost) tlsCertificate() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{h.Cert.Raw}, PrivateKey: h.Key, Leaf: h.Cert}
}

// report sends a status report of these containers, at the version of the
// host's desired state (as an agent that converged would), through edit
// (nil: as it is).
func (h *rogueHost) report(edit func(*contract.StatusReport), containers ...contract.ContainerStatus) {
	h.w.t.Helper()
	r := contract.StatusReport{HostID: h.ID, Version: h.poll().Version, Time: time.Now(), Containers: containers}
	if edit != nil {
		edit(&r)
	}
	body, err := json.Marshal(r)
	if err != nil {
		h.w.t.Fatal(err)
	}
	if err := h.reportRaw(body); err != nil {
		h.w.t.Fatalf("%s's report: %v", h.Name, err)
	}
}

// reportRaw sends body as the host's status report.
func (h *rogueHost) reportRaw(body []byte) error {
	return h.C.Do(h.w.t.Context(), "POST", "/api/v1/hosts/"+h.ID+"/status", json.RawMessage(body), nil)
}

// offers are the sessions offered to the host now.
func (h *rogueHost) offers() []contract.SessionOffer {
	h.w.t.Helper()
	var out contract.SessionOffers
	if err := h.C.Do(h.w.t.Context(), "GET", "/api/v1/hosts/"+h.ID+"/sessions?wait=0s", nil, &out); err != nil {
		h.w.t.Fatalf("%s's offers: %v", h.Name, err)
	}
	return out.Sessions
}

// awaitOffer waits on the sessions long-poll for the host's next offer.
func (h *rogueHost) awaitOffer(ctx context.Context) (contract.SessionOffer, error) {
	for {
		var out contract.SessionOffers
		if err := h.C.Do(ctx, "GET", "/api/v1/hosts/"+h.ID+"/sessions?wait=5s", nil, &out); err != nil {
			return contract.SessionOffer{}, err
		}
		if len(out.Sessions) > 0 {
			return out.Sessions[0], nil
		}
	}
}

// stream opens the host's stream for session id.
func (h *rogueHost) stream(ctx context.Context, id string) (*websocket.Conn, error) {
	return h.C.Dial(ctx, streamPath(h.ID, url.PathEscape(id)))
}

// sendRecords writes log records on a host's stream.
func sendRecords(ctx context.Context, t *testing.T, conn *websocket.Conn, recs ...contract.LogRecord) {
	t.Helper()
	for _, r := range recs {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := conn.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatalf("write a record: %v", err)
		}
	}
}

// readRecords reads the operator's stream of a logs request to its end.
func readRecords(ctx context.Context, t *testing.T, op *websocket.Conn) ([]contract.LogRecord, error) {
	t.Helper()
	var out []contract.LogRecord
	for {
		_, data, err := op.Read(ctx)
		if err != nil {
			if websocket.CloseStatus(err) == websocket.StatusNormalClosure {
				return out, nil
			}
			return out, err
		}
		var r contract.LogRecord
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatalf("a record %q: %v", data, err)
		}
		out = append(out, r)
	}
}

// TestTheRogueHarnessJoinsForReal checks the harness itself: a host's
// certificate names it and chains to the server's host CA, its poll is held
// until its state changes, and what it reports is what the server stores.
func TestTheRogueHarnessJoinsForReal(t *testing.T) {
	w := newRogueWorld(t, DefaultConfig())
	h := w.joinHost("rogue")
	cert := h.tlsCertificate()
	if id, err := pki.HostIDFromCert(cert.Leaf); err != nil || id != h.ID {
		t.Fatalf("the certificate names %q (%v), want %s", id, err, h.ID)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(h.CAPEM)) {
		t.Fatal("no host CA in the join's answer")
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Fatalf("the certificate does not chain to the host CA: %v", err)
	}
	first := h.poll()
	if _, status, err := h.pollAt(t.Context(), first.Version, 10*time.Millisecond); err != nil || status != http.StatusNotModified {
		t.Fatalf("an unchanged state's poll: %d %v, want 304", status, err)
	}
	type answer struct {
		d      contract.DesiredState
		status int
		err    error
	}
	got := make(chan answer, 1)
	go func() {
		d, status, err := h.pollAt(t.Context(), first.Version, 10*time.Second)
		got <- answer{d, status, err}
	}()
	w.place(h, webOf("web", 1))
	if a := <-got; a.err != nil || a.status != http.StatusOK || len(a.d.Workloads) != 1 || a.d.Workloads[0].Egg != "web" {
		t.Fatalf("the poll after a placement: %d %v %+v, want web", a.status, a.err, a.d.Workloads)
	}
	h.report(nil, running("default/shop/web", 0))
	rep, err := w.admin.Hosts().Report(t.Context(), h.ID)
	if err != nil || len(rep.Containers) != 1 || rep.Version != h.poll().Version {
		t.Fatalf("the stored report %+v (%v), want web's container at the current version", rep, err)
	}
}
