package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/pki/authority"
	"github.com/hatchery/hatchery/internal/store/sqlite"
)

// secureHarness is a server as `hatch server` wires it: the admin token, join
// tokens and host tokens from the store, on a settable clock. It records
// every answer it gives and every log line, for the grep of secrets.
type secureHarness struct {
	*harness
	t       *testing.T
	clock   *clock
	logs    *lockedBuffer
	hostCA  *authority.HostCA
	mu      sync.Mutex // guards answers
	answers []recorded
	secrets []string // every token, secret and hash the test made or got
}

// recorded is one answer of the server: its route, status, headers and body.
type recorded struct {
	method, path string
	status       int
	header       http.Header
	body         []byte
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

// tokenStore is a new SQLite store in a directory of its own with the
// admin token made in it, as `hatch server` makes them: where every
// harness with real token authentication starts.
type tokenStore struct {
	dir         string
	st          *sqlite.Store
	hash, admin string // the admin token's hash, and the token
}

func newTokenStore(tb testing.TB, log *zap.Logger, now time.Time) tokenStore {
	tb.Helper()
	ts := tokenStore{dir: tb.TempDir()}
	var err error
	if ts.st, err = sqlite.Open(tb.Context(), filepath.Join(ts.dir, "hatch.db"), log); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ts.st.Close() })
	if ts.hash, ts.admin, err = EnsureAdminToken(tb.Context(), ts.st, filepath.Join(ts.dir, "admin-token"), fingerprint(), now); err != nil {
		tb.Fatal(err)
	}
	return ts
}

func newSecureHarness(t *testing.T, cfg Config) *secureHarness {
	t.Helper()
	logs := &lockedBuffer{}
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), logs, zap.DebugLevel))
	clk := &clock{now: time.Now().UTC().Truncate(time.Millisecond)}
	ts := newTokenStore(t, log, clk.Now())
	st, admin := ts.st, ts.admin
	b := BuildTestServer(t, cfg, TestWiring{Dir: ts.dir, Store: st, Auth: NewTokenAuth(ts.hash, st, clk.Now), ServerID: "srv-matrix",
		Logger: log, Now: clk.Now})
	srv := b.Server
	sh := &secureHarness{t: t, clock: clk, logs: logs, hostCA: b.HostCA}
	hs := httptest.NewServer(sh.record(srv.Handler()))
	t.Cleanup(hs.Close)
	sh.harness = &harness{t: t, srv: srv, http: hs, store: st, blobs: b.Blobs, box: b.Box, fleet: b.Fleet, token: admin, clock: clk}
	sh.remember(admin)
	return sh
}

// record keeps a copy of every answer.
func (sh *secureHarness) record(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		sh.mu.Lock()
		sh.answers = append(sh.answers, recorded{r.Method, r.URL.Path, rec.Code, rec.Header().Clone(), rec.Body.Bytes()})
		sh.mu.Unlock()
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
}

// remember adds a token, its secret and its hash to what must never leak.
func (sh *secureHarness) remember(token string) {
	tok, err := pki.ParseToken(token)
	if err != nil {
		sh.t.Fatalf("remember: %v", err)
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.secrets = append(sh.secrets, tok.String(), tok.Secret, tok.Hash())
}

// createJoinToken makes a join token through the API.
func (sh *secureHarness) createJoinToken(ttl time.Duration, uses int) (token, id string) {
	sh.t.Helper()
	body := `{"ttl": "` + ttl.String() + `", "uses": ` + jsonInt(uses) + `}`
	got := decode[api.JoinToken](sh.t, sh.do("POST", "/api/v1/join-tokens", strings.NewReader(body)), http.StatusCreated)
	sh.remember(got.Token)
	return got.Token, got.ID
}

// join joins a host with the join token; it returns the host ID and token.
func (sh *secureHarness) join(joinToken, name string) (hostID, hostToken string) {
	sh.t.Helper()
	resp := sh.doAs(joinToken, "POST", "/api/v1/join", strings.NewReader(`{"name": "`+name+`"}`))
	got := decode[api.JoinResponse](sh.t, resp, http.StatusCreated)
	sh.remember(got.Token)
	return got.HostID, got.Token
}

// setDesired stores a desired state for the host, its workload built from
// the blob with the digest.
func (sh *secureHarness) setDesired(hostID, digest string) {
	sh.t.Helper()
	d := contract.DesiredState{HostID: hostID, Workloads: []contract.WorkloadSpec{{
		Namespace: "default", Project: "shop", Egg: "web", BlobID: digest, Replicas: 1, Port: 8080,
	}}}
	putDesired(sh.t, sh.store, sh.box, d)
}

// putBlob stores content as a blob and returns its digest.
func (sh *secureHarness) putBlob(content string) string {
	sh.t.Helper()
	d := digestOf([]byte(content))
	resp := sh.do("PUT", "/api/v1/blobs/"+d, strings.NewReader(content))
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		sh.t.Fatalf("PUT blob: %d", resp.StatusCode)
	}
	return d
}

// issuing reports whether an answer is one that hands out a new token: the
// one place a token may appear, once.
func issuing(a recorded) bool {
	return a.status == http.StatusCreated && a.method == "POST" &&
		(a.path == "/api/v1/join" || a.path == "/api/v1/join-tokens" || a.path == "/api/v1/admin-tokens")
}

// checkNoSecretLeaked greps every answer but the issuing ones, and every log
// line, for every token, secret and hash the test saw.
func (sh *secureHarness) checkNoSecretLeaked() {
	sh.t.Helper()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	logs := sh.logs.String()
	if len(sh.answers) == 0 || logs == "" {
		sh.t.Fatal("nothing recorded: the grep would prove nothing")
	}
	for _, secret := range sh.secrets {
		if strings.Contains(logs, secret) {
			sh.t.Errorf("a token, secret or hash appears in the log:\n%s", logs)
		}
		for _, a := range sh.answers {
			if issuing(a) {
				continue
			}
			var headers bytes.Buffer
			_ = a.header.Write(&headers)
			if bytes.Contains(a.body, []byte(secret)) || strings.Contains(headers.String(), secret) {
				sh.t.Errorf("a token, secret or hash appears in the answer to %s %s: %s", a.method, a.path, a.body)
			}
		}
	}
}

func jsonInt(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// readAll reads a body as a string.
func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
