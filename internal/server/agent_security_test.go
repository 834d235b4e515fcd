package server_test

// These tests put the real agent's join client and agent loop in front of the
// server as `hatch server` wires it: HTTPS with the server's own CA, the
// admin token, join and host tokens from the store.

import (
	"bytes"
	"context"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/events"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/hatchery/hatchery/internal/agent"
	"github.com/hatchery/hatchery/internal/cli"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/containers/fake"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/ingress"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/pki/authority"
	"github.com/hatchery/hatchery/internal/seal"
	"github.com/hatchery/hatchery/internal/server"
	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/store/sqlite"
)

// tlsWorld is a control plane served over TLS, with an admin client, and a
// record of every request that reached it, every answer and every log line.
type tlsWorld struct {
	t        *testing.T
	url      string
	dataDir  string
	store    *sqlite.Store
	box      *seal.Box
	admin    *client.Client
	token    string // the admin token
	logs     *lockedBuffer
	requests atomic.Int64 // requests that got past TLS to the HTTP handler

	mu      sync.Mutex // guards answers
	answers []answer
}

type answer struct {
	method, path string
	status       int
	text         string // headers and body
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}
func (b *lockedBuffer) Sync() error { return nil }
func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// logger logs JSON lines at debug level into buf.
func logger(buf *lockedBuffer) *zap.Logger {
	return zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), buf, zap.DebugLevel))
}

func newTLSWorld(t *testing.T) *tlsWorld {
	t.Helper()
	w := &tlsWorld{t: t, dataDir: t.TempDir(), logs: &lockedBuffer{}}
	log := logger(w.logs)
	material, err := authority.LoadOrCreate(filepath.Join(w.dataDir, "tls"), authority.DefaultNames(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	w.store, err = sqlite.Open(t.Context(), filepath.Join(w.dataDir, "hatch.db"), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.store.Close() })
	if w.box, err = seal.LoadOrCreate(filepath.Join(w.dataDir, "seal.key")); err != nil {
		t.Fatal(err)
	}
	hash, admin, err := server.EnsureAdminToken(t.Context(), w.store, filepath.Join(w.dataDir, "admin-token"), material.Fingerprint(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	w.token = admin
	srv := server.BuildTestServer(t, server.DefaultConfig(), server.TestWiring{Dir: w.dataDir, Store: w.store, Box: w.box,
		Auth: server.NewTokenAuth(hash, w.store, time.Now), Fingerprint: material.Fingerprint(), Logger: log}).Server
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	hs := newTLSServer(material, w.observe(srv.Handler()))
	t.Cleanup(func() {
		srv.Close()
		hs.Close()
	})
	w.url = hs.URL
	if w.admin, err = client.New(client.Config{Server: w.url, Token: admin}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.admin.Close)
	return w
}

// observe counts the requests that reach the API and records each answer,
// passing everything through (long polls included).
func (w *tlsWorld) observe(h http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.requests.Add(1)
		tee := &teeWriter{ResponseWriter: rw, status: http.StatusOK}
		h.ServeHTTP(tee, r)
		var headers bytes.Buffer
		_ = rw.Header().Write(&headers)
		w.mu.Lock()
		w.answers = append(w.answers, answer{r.Method, r.URL.Path, tee.status, headers.String() + tee.body.String()})
		w.mu.Unlock()
	})
}

type teeWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (t *teeWriter) WriteHeader(status int) { t.status = status; t.ResponseWriter.WriteHeader(status) }
func (t *teeWriter) Write(b []byte) (int, error) {
	t.body.Write(b)
	return t.ResponseWriter.Write(b)
}
func (t *teeWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// refusedReports counts the 401 answers to the host's status reports after n
// recorded answers.
func (w *tlsWorld) refusedReports(n int, hostID string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	refused := 0
	for _, a := range w.answers[n:] {
		if a.method == "POST" && a.path == "/api/v1/hosts/"+hostID+"/status" && a.status == http.StatusUnauthorized {
			refused++
		}
	}
	return refused
}

func (w *tlsWorld) answerCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.answers)
}

// checkNothingLeaked greps every log line (the server's and those given) and
// every answer for the tokens, their secrets and hashes, and the keys in the
// data dir. Only the answer that issued a token may hold it, and nothing else.
func (w *tlsWorld) checkNothingLeaked(tokens []string, moreLogs ...*lockedBuffer) {
	w.t.Helper()
	var secrets []string
	for _, s := range append(tokens, w.token) {
		tok, err := pki.ParseToken(s)
		if err != nil {
			w.t.Fatal(err)
		}
		secrets = append(secrets, tok.String(), tok.Secret, tok.Hash())
	}
	for _, name := range []string{"tls/ca-key.pem", "tls/server-key.pem", "seal.key"} {
		data, err := os.ReadFile(filepath.Join(w.dataDir, name))
		if err != nil {
			w.t.Fatal(err)
		}
		if block, _ := pem.Decode(data); block != nil {
			data = pem.EncodeToMemory(&pem.Block{Type: block.Type, Bytes: block.Bytes})
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			secrets = append(secrets, lines[1:len(lines)-1]...) // every line of base64 key material
		} else {
			secrets = append(secrets, strings.TrimSpace(string(data)))
		}
	}
	logs := []string{w.logs.String()}
	for _, l := range moreLogs {
		logs = append(logs, l.String())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.answers) == 0 || logs[0] == "" {
		w.t.Fatal("nothing recorded: the grep would prove nothing")
	}
	for _, secret := range secrets {
		for _, l := range logs {
			if strings.Contains(l, secret) {
				w.t.Errorf("a token or key appears in a log line:\n%s", l)
			}
		}
		for _, a := range w.answers {
			issued := a.status == http.StatusCreated && (a.path == "/api/v1/join" || a.path == "/api/v1/join-tokens")
			if strings.Contains(a.text, secret) && !(issued && strings.Count(a.text, secret) == 1 && isToken(tokens, a.text, secret)) {
				w.t.Errorf("a token or key appears in the answer to %s %s (%d): %s", a.method, a.path, a.status, a.text)
			}
		}
	}
}

// isToken reports whether secret is part of a token that text issues.
func isToken(tokens []string, text, secret string) bool {
	for _, tok := range tokens {
		if strings.Contains(text, tok) && strings.Contains(tok, secret) {
			return true
		}
	}
	return false
}

func TestAnAgentWhoseTokenPinsAnotherCARefusesToConnectAndSendsNothing(t *testing.T) {
	w := newTLSWorld(t)
	jt, err := w.admin.JoinTokens().Create(t.Context(), time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	real, _ := pki.ParseToken(jt.Token)
	// The secret is good: had it been sent, the server would have taken it.
	forged := pki.Token{Kind: pki.KindJoin, Secret: real.Secret, Fingerprint: strings.Repeat("0f", 32)}.String()
	before := w.requests.Load()

	dataDir := t.TempDir()
	var stderr bytes.Buffer
	code := cli.Run(t.Context(), []string{"agent", "--server", w.url, "--join", forged, "--name", "alpha", "--data-dir", dataDir}, io.Discard, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), pki.ErrFingerprintMismatch.Error()) {
		t.Fatalf("hatch agent with a token pinning another CA: exit %d, stderr %q; want 1 and ErrFingerprintMismatch", code, stderr.String())
	}
	if n := w.requests.Load() - before; n != 0 {
		t.Fatalf("the server got %d requests from an agent that should not have trusted it", n)
	}
	if _, ok, _ := agent.LoadIdentity(dataDir); ok {
		t.Fatal("the agent kept an identity from a server it did not trust")
	}
	stored, err := w.store.JoinTokenByHash(t.Context(), real.Hash())
	if err != nil || stored.Uses != 0 {
		t.Fatalf("join token %+v (%v): want it unused", stored, err)
	}
	if hosts, _ := w.store.ListHostIdentities(t.Context()); len(hosts) != 0 {
		t.Fatalf("hosts joined: %+v", hosts)
	}
	// The same secret with the right fingerprint gets in: the refusal above
	// was the pin's doing, not the token's.
	if _, err := agent.Join(t.Context(), w.url, jt.Token, "alpha", nil); err != nil {
		t.Fatalf("join with the genuine token: %v", err)
	}
	w.checkNothingLeaked([]string{jt.Token})
}

func TestARemovedHostsAgentIsRefusedAndItsContainersKeepRunning(t *testing.T) {
	w := newTLSWorld(t)
	jt, err := w.admin.JoinTokens().Create(t.Context(), time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	joined, err := agent.Join(t.Context(), w.url, jt.Token, "alpha", nil)
	if err != nil {
		t.Fatal(err)
	}
	id := joined.Identity
	cp, err := agent.NewHTTPClient(id)
	if err != nil {
		t.Fatal(err)
	}
	dock := followingFake(t, id.HostID)
	agentLogs := &lockedBuffer{}
	cfg := agent.DefaultConfig()
	cfg.HostID, cfg.DataDir, cfg.Docker, cfg.ControlPlane, cfg.Logger = id.HostID, t.TempDir(), dock, cp, logger(agentLogs)
	cfg.Events, cfg.Router, cfg.Changes, cfg.Mesh = quietEvents{}, discardRouter{}, agent.NewSignal(), noMesh{}
	cfg.HeartbeatInterval, cfg.PollWait = 50*time.Millisecond, time.Second
	cfg.PollRetryMin, cfg.PollRetryMax = 10*time.Millisecond, 50*time.Millisecond
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.Close(ctx)
	})

	web := contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: "web", Image: "web:1", Replicas: 2, Port: 8080}
	d := contract.DesiredState{HostID: id.HostID, Workloads: []contract.WorkloadSpec{web}}
	d.Seal()
	stored, err := store.EncodeDesiredState(w.box, d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.store.PutDesiredStates(t.Context(), []store.DesiredState{stored}, nil); err != nil {
		t.Fatal(err)
	}
	peers, err := w.store.DesiredPeers(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	version := contract.CombineVersions(d.Version, peers.Version) // what the host gets
	eventually(t, "two replicas running and reported", func() bool {
		st, err := w.store.Status(t.Context(), id.HostID)
		return runningOf(dock.Snapshot(), web) == 2 && err == nil && bytes.Contains(st.Report, []byte(version))
	})

	mark := w.answerCount()
	removed, err := w.admin.Hosts().Remove(t.Context(), "alpha")
	if err != nil || removed.ID != id.HostID {
		t.Fatalf("RemoveHost = %+v, %v", removed, err)
	}
	// A report let in just before the removal may still land; the agent
	// sends one at a time, so once one is refused, none is in flight.
	eventually(t, "a report refused", func() bool { return w.refusedReports(mark, id.HostID) > 0 })
	lastReport, err := w.store.Status(t.Context(), id.HostID)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * cfg.HeartbeatInterval) // ten more heartbeats, all refused
	if n := w.refusedReports(mark, id.HostID); n < 5 {
		t.Fatalf("only %d reports refused in ten heartbeats", n)
	}
	if st, _ := w.store.Status(t.Context(), id.HostID); !st.ReceivedAt.Equal(lastReport.ReceivedAt) {
		t.Fatalf("a report was stored after the host's reports were refused, at %v (removed at %v)", st.ReceivedAt, removed.RemovedAt)
	}
	if n := runningOf(dock.Snapshot(), web); n != 2 {
		t.Fatalf("%d replicas run after the removal, want both: they are the operator's to clean up", n)
	}
	for _, e := range dock.Events() {
		if e.Kind != fake.EventCreate {
			t.Fatalf("the agent of a removed host did %s to a container", e.Kind)
		}
	}
	w.checkNothingLeaked([]string{jt.Token, id.Token}, agentLogs)
}

// newTLSServer serves h over TLS with the server's own certificate.
func newTLSServer(material *authority.Server, h http.Handler) *httptest.Server {
	hs := httptest.NewUnstartedServer(h)
	hs.TLS = material.TLSConfig()
	hs.StartTLS()
	return hs
}

// quietEvents is the Docker event stream of a fake host: it has no events.
type quietEvents struct{}

func (quietEvents) Events(context.Context, events.ListOptions) (<-chan events.Message, <-chan error) {
	return nil, nil // nil channels: nothing arrives until the agent stops
}

// discardRouter is an ingress that routes nothing: these tests are about
// the control plane.
type discardRouter struct{}

func (discardRouter) Update(ingress.Table) error { return nil }
func (discardRouter) Gone(string)                {}
func (discardRouter) SetProblem(string)          {}
func (discardRouter) Challenges() []string       { return nil }
func (discardRouter) HTTPSProblem() string       { return "" }

// noMesh is a mesh with no peers: these tests have one host.
type noMesh struct{}

func (noMesh) SetPeers([]contract.Peer) {}

// followingFake is an in-memory Docker host that does everything at once, its
// clock following the real one (the agent's).
func followingFake(t *testing.T, hostID string) *fake.Fake {
	f := fake.New(hostID, time.Now(), fake.Timing{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if lag := time.Since(f.Now()); lag > 0 {
					f.Advance(lag)
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return f
}

func runningOf(cs []containers.Container, w contract.WorkloadSpec) int {
	n := 0
	for _, c := range cs {
		if c.WorkloadID == w.ID() && c.State == contract.StateRunning {
			n++
		}
	}
	return n
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
