package agent

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/pki/authority"
)

// switchableControlPlane is one control plane until fixed, another after.
type switchableControlPlane struct {
	mu           sync.Mutex
	before, fixd ControlPlane
	fixed        bool
}

func (s *switchableControlPlane) current() ControlPlane {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fixed {
		return s.fixd
	}
	return s.before
}

func (s *switchableControlPlane) fix() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fixed = true
}

func (s *switchableControlPlane) DesiredState(ctx context.Context, version string, wait time.Duration) (contract.DesiredState, error) {
	return s.current().DesiredState(ctx, version, wait)
}

func (s *switchableControlPlane) ReportStatus(ctx context.Context, r contract.StatusReport) error {
	return s.current().ReportStatus(ctx, r)
}

// An agent whose control plane presents a certificate from another CA than
// the one it pinned: an error line at once and then once per interval (not
// a warning then silence, not a line per retry), /healthz at 503 with the
// reason, nothing sent to the server; all cleared once it verifies again.
func TestAControlPlaneThatDoesNotVerifyIsAnErrorEveryIntervalAndA503(t *testing.T) {
	var reached atomic.Int32
	srv, _ := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
	other, err := authority.LoadOrCreate(t.TempDir(), authority.DefaultNames(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	fp := other.Fingerprint() // the CA this host joined with: not the server's
	untrusted, err := NewHTTPClient(Identity{Server: srv.URL, HostID: testHost, Token: "hatch-host.secret." + fp, CAFingerprint: fp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(untrusted.Close)
	good := newFakeControlPlane()
	good.set(desiredState(web(1)))
	cp := &switchableControlPlane{before: untrusted, fixd: good}

	f := newFake(t)
	cfg := testConfig(t, f, cp, t.TempDir())
	core, logs := observer.New(zapcore.ErrorLevel)
	cfg.Logger = zap.New(zapcore.NewTee(cfg.Logger.Core(), core))
	cfg.UntrustedLogInterval = 250 * time.Millisecond
	router := cfg.Router.(*fakeRouter)
	startAgent(t, cfg)

	const watch = 1100 * time.Millisecond
	time.Sleep(watch)
	var lines int
	for _, e := range logs.All() {
		if strings.Contains(e.Message, "cannot verify the control plane") {
			lines++
		}
	}
	// At once, then every 250 ms over 1.1 s: 4 or 5 (a loaded machine may
	// retry late, never more often). Polls and heartbeats retried far more.
	if lines < 3 || lines > 5 {
		t.Errorf("%d error lines in %s with a 250ms interval, want 3 to 5", lines, watch)
	}
	if p := router.currentProblem(); !strings.Contains(p, "does not verify against the CA this host joined with") ||
		!strings.Contains(p, "join this host again") {
		t.Errorf("healthz problem %q", p)
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the unverified server got %d requests", n)
	}

	cp.fix()
	eventually(t, "the problem cleared once the server verifies", func() error {
		if p := router.currentProblem(); p != "" {
			return fmt.Errorf("problem %q", p)
		}
		return nil
	})
}
