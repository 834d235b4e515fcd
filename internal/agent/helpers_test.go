package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/containers/fake"
	"github.com/hatchery/hatchery/internal/contract"
)

const testHost = "host-a"

var errDown = errors.New("connection refused")

// fakeControlPlane is an in-memory control plane: a desired state that tests
// set, long polls that wait for it to change, and the status reports
// received.
type fakeControlPlane struct {
	mu      sync.Mutex
	state   *contract.DesiredState // nil: nothing to hand out yet
	changed chan struct{}          // closed and replaced on every change
	down    bool
	// delay holds every poll this long before it is answered (a slow
	// control plane, or one the agent's first converge outruns).
	delay   time.Duration
	polls   int
	reports []contract.StatusReport
}

func newFakeControlPlane() *fakeControlPlane {
	return &fakeControlPlane{changed: make(chan struct{})}
}

func (cp *fakeControlPlane) set(d contract.DesiredState) {
	d.Seal()
	cp.setRaw(d)
}

// setRaw hands out d as it is, version included.
func (cp *fakeControlPlane) setRaw(d contract.DesiredState) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.state = &d
	close(cp.changed)
	cp.changed = make(chan struct{})
}

func (cp *fakeControlPlane) setDown(down bool) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.down = down
	close(cp.changed)
	cp.changed = make(chan struct{})
}

func (cp *fakeControlPlane) DesiredState(ctx context.Context, version string, wait time.Duration) (contract.DesiredState, error) {
	cp.mu.Lock()
	delay := cp.delay
	cp.mu.Unlock()
	if delay > 0 {
		select {
		case <-ctx.Done():
			return contract.DesiredState{}, ctx.Err()
		case <-time.After(delay):
		}
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		cp.mu.Lock()
		cp.polls++
		down, st, changed := cp.down, cp.state, cp.changed
		cp.mu.Unlock()
		switch {
		case down:
			return contract.DesiredState{}, errDown
		case st != nil && st.Version != version:
			return *st, nil
		}
		select {
		case <-ctx.Done():
			return contract.DesiredState{}, ctx.Err()
		case <-timer.C:
			return contract.DesiredState{}, ErrNotModified
		case <-changed:
		}
	}
}

func (cp *fakeControlPlane) ReportStatus(ctx context.Context, r contract.StatusReport) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.down {
		return errDown
	}
	cp.reports = append(cp.reports, r)
	return nil
}

func (cp *fakeControlPlane) lastReport() (contract.StatusReport, int) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if len(cp.reports) == 0 {
		return contract.StatusReport{}, 0
	}
	return cp.reports[len(cp.reports)-1], len(cp.reports)
}

// web is a plain stateless workload.
func web(replicas int) contract.WorkloadSpec {
	return contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: "web", Image: "web:1", Replicas: replicas, Port: 8080}
}

func desiredState(ws ...contract.WorkloadSpec) contract.DesiredState {
	d := contract.DesiredState{HostID: testHost, Workloads: ws}
	d.Seal()
	return d
}

// testConfig is an agent config for tests: a fresh data dir, quick timings,
// a Docker event stream that stays quiet unless the test feeds it, and a
// router that records what the agent tells it.
func testConfig(t *testing.T, dc containers.Client, cp ControlPlane, dataDir string) Config {
	cfg := DefaultConfig()
	cfg.HostID, cfg.DataDir, cfg.Docker, cfg.ControlPlane = testHost, dataDir, dc, cp
	cfg.Events, cfg.Router, cfg.Changes = &fakeEvents{}, &fakeRouter{}, NewSignal()
	cfg.Mesh = &fakeMesh{}
	cfg.Logger = zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
	cfg.HeartbeatInterval = 20 * time.Millisecond
	cfg.PollWait = 200 * time.Millisecond
	cfg.PollRetryMin, cfg.PollRetryMax = 5*time.Millisecond, 20*time.Millisecond
	return cfg
}

// startAgent makes and starts an agent, closed when the test ends.
func startAgent(t *testing.T, cfg Config) *Agent {
	t.Helper()
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			t.Errorf("close agent: %v", err)
		}
	})
	return a
}

// newFake returns a fake Docker host where everything happens at once, and
// whose clock follows the real one (the agent's clock in these tests) until
// the test ends.
func newFake(t *testing.T) *fake.Fake {
	f := fake.New(testHost, time.Now(), fake.Timing{})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if d := time.Until(f.Now()); d < 0 {
					f.Advance(-d)
				}
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return f
}

// tickAndConverge moves the fake's clock (the agent's) a second on and
// waits for a converge that saw the new time.
func tickAndConverge(t *testing.T, f *fake.Fake, a *Agent) {
	t.Helper()
	f.Advance(time.Second)
	target := f.Now()
	a.Notify()
	eventually(t, "a converge at "+target.Format(time.TimeOnly), func() error {
		if r, _ := a.Status(); !r.Time.Equal(target) {
			return fmt.Errorf("last converge at %s", r.Time.Format(time.TimeOnly))
		}
		return nil
	})
}

// eventually polls check until it returns nil or 5 seconds pass.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s: %v", what, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// running counts the host's running containers of a workload with its
// current spec hash.
func running(cs []containers.Container, w contract.WorkloadSpec) int {
	n := 0
	for _, c := range cs {
		if c.WorkloadID == w.ID() && c.SpecHash == contract.SpecHash(w) && c.State == contract.StateRunning {
			n++
		}
	}
	return n
}

// countingDocker wraps a containers.Client, counting Lists and optionally
// blocking or panicking in them.
type countingDocker struct {
	containers.Client
	mu        sync.Mutex
	lists     int
	gate      chan struct{} // if non-nil, Lists from number blockFrom on wait until it is closed
	blockFrom int           // 1-based; 0 means 1
	panicOn   int           // the List call number (1-based) that panics; 0 none
}

func (d *countingDocker) List(ctx context.Context) ([]containers.Container, error) {
	d.mu.Lock()
	d.lists++
	n, gate, p := d.lists, d.gate, d.panicOn
	d.mu.Unlock()
	if n == p {
		panic("injected panic in List")
	}
	if gate != nil && n >= max(d.blockFrom, 1) {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return d.Client.List(ctx)
}

func (d *countingDocker) listCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lists
}

// fakeMesh records the valid host sets the agent gives the mesh.
type fakeMesh struct {
	mu    sync.Mutex // guards peers
	peers [][]contract.Peer
}

func (m *fakeMesh) SetPeers(peers []contract.Peer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.peers = append(m.peers, slices.Clone(peers))
}

func (m *fakeMesh) last() []contract.Peer {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.peers) == 0 {
		return nil
	}
	return m.peers[len(m.peers)-1]
}
