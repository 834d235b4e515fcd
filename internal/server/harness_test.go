package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/blob"
	"github.com/hatchery/hatchery/internal/fleet"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/seal"
	"github.com/hatchery/hatchery/internal/store/sqlite"
)

// clock is a settable clock for liveness tests.
type clock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// harness is a server on a real SQLite file and blob directory, behind httptest.
type harness struct {
	t     testing.TB
	srv   *Server
	http  *httptest.Server
	store *sqlite.Store
	blobs *blob.Store
	box   *seal.Box
	fleet *fleet.Service
	token string
	clock *clock // nil: the real clock
}

func fingerprint() string { return strings.Repeat("ab", 32) }

func newHarness(t testing.TB, cfg Config, fakeClock *clock) *harness {
	t.Helper()
	return newHarnessOf(t, cfg, fleet.DefaultConfig(), fakeClock)
}

// newHarnessOf is newHarness with a fleet of its own settings.
func newHarnessOf(t testing.TB, cfg Config, fc fleet.Config, fakeClock *clock) *harness {
	t.Helper()
	tok := pki.NewToken(pki.KindAdmin, fingerprint())
	w := TestWiring{AdminHash: tok.Hash(), Logger: zaptest.NewLogger(t), Fleet: fc}
	if fakeClock != nil {
		w.Now = fakeClock.Now
	}
	// Tests of other concerns fail authentication on purpose, all from
	// 127.0.0.1: the limit on failures is tested on its own.
	cfg.AuthFailureBurst = 1 << 20
	b := BuildTestServer(t, cfg, w)
	hs := httptest.NewServer(b.Server.Handler())
	t.Cleanup(hs.Close)
	return &harness{t: t, srv: b.Server, http: hs, store: b.Store, blobs: b.Blobs, box: b.Box, fleet: b.Fleet,
		token: tok.String(), clock: fakeClock}
}

// do sends a request with the admin token.
func (h *harness) do(method, path string, body io.Reader) *http.Response {
	h.t.Helper()
	return h.doAs(h.token, method, path, body)
}

func (h *harness) doAs(token, method, path string, body io.Reader) *http.Response {
	h.t.Helper()
	req, err := http.NewRequestWithContext(h.t.Context(), method, h.http.URL+path, body)
	if err != nil {
		h.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// decode reads a JSON response body, checking its status.
func decode[T any](t *testing.T, resp *http.Response, status int) T {
	t.Helper()
	var v T
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("%s %s: status %d, want %d; body %s", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, status, body)
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return v
}

// wantError checks an error response's status, code, and that its message
// names what it should.
func wantError(t *testing.T, resp *http.Response, status int, code, mentions string) {
	t.Helper()
	e := decode[api.Error](t, resp, status)
	if string(e.Code) != code || !strings.Contains(e.Message, mentions) {
		t.Fatalf("error %+v, want code %q and a message mentioning %q", e, code, mentions)
	}
}

// gaugeValue reads a gauge.
func gaugeValue(t testing.TB, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// eventually polls cond until it holds or 5 seconds pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
