package docker

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/hatchery/hatchery/internal/contract"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func tgt(interval, startPeriod time.Duration, retries int) target {
	return target{probe: probe{interval: interval, timeout: time.Second, startPeriod: startPeriod, retries: retries}, addr: "10.0.0.1", startedAt: t0}
}

func TestResultNextFollowsTheHealthRules(t *testing.T) {
	s := time.Second
	tests := []struct {
		name       string
		target     target
		checks     []bool          // outcomes
		at         []time.Duration // since start
		wantStreak int
		wantHealth bool
	}{
		{"a pass is healthy", tgt(2*s, 0, 3), []bool{true}, []time.Duration{0}, 0, true},
		{"a failure after a pass is not healthy but counts once", tgt(2*s, 0, 3), []bool{true, false}, []time.Duration{0, 2 * s}, 1, false},
		{"failures after a pass count each", tgt(2*s, 0, 3), []bool{true, false, false, false}, []time.Duration{0, 2 * s, 4 * s, 6 * s}, 3, false},
		{"a pass resets the streak", tgt(2*s, 0, 3), []bool{true, false, false, true}, []time.Duration{0, 2 * s, 4 * s, 6 * s}, 0, true},
		{"failures in the start period do not count", tgt(2*s, 10*s, 3), []bool{false, false, false, false}, []time.Duration{0, 2 * s, 4 * s, 9 * s}, 0, false},
		{"failures after the start period count", tgt(2*s, 3*s, 3), []bool{false, false, false}, []time.Duration{1 * s, 4 * s, 6 * s}, 2, false},
		{"a pass ends the start period", tgt(2*s, 60*s, 3), []bool{true, false, false}, []time.Duration{0, 2 * s, 4 * s}, 2, false},
		{"fast probes before the first pass count once per interval", tgt(2*s, 0, 3),
			[]bool{false, false, false, false, false, false, false, false, false},
			[]time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond, s, 1250 * time.Millisecond, 1500 * time.Millisecond, 1750 * time.Millisecond, 2 * s},
			2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r result
			for i, ok := range tt.checks {
				r = r.next(ok, t0.Add(tt.at[i]), tt.target)
			}
			if r.streak != tt.wantStreak || r.healthy != tt.wantHealth {
				t.Fatalf("streak %d healthy %v, want %d %v", r.streak, r.healthy, tt.wantStreak, tt.wantHealth)
			}
		})
	}
}

// TestResultNextProperties checks the rules over random check sequences:
// healthy is exactly "the last check passed", a pass leaves no streak, the
// streak never exceeds the failures since the last pass, and nothing counts
// in the start period before a first pass.
func TestResultNextProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		interval := time.Duration(rapid.IntRange(1, 40).Draw(t, "interval")) * 250 * time.Millisecond
		startPeriod := time.Duration(rapid.IntRange(0, 40).Draw(t, "startPeriod")) * 250 * time.Millisecond
		tg := tgt(interval, startPeriod, 3)
		n := rapid.IntRange(1, 60).Draw(t, "n")
		var r result
		at := t0
		failsSincePass, passedEver := 0, false
		for i := range n {
			at = at.Add(time.Duration(rapid.IntRange(1, 12).Draw(t, "gap"+strconv.Itoa(i))) * 250 * time.Millisecond)
			ok := rapid.Bool().Draw(t, "ok"+strconv.Itoa(i))
			before := r
			r = r.next(ok, at, tg)
			if r.healthy != ok {
				t.Fatalf("check %d passed=%v but healthy=%v", i, ok, r.healthy)
			}
			if ok {
				failsSincePass, passedEver = 0, true
				if r.streak != 0 {
					t.Fatalf("streak %d after a pass", r.streak)
				}
				continue
			}
			failsSincePass++
			if r.streak > failsSincePass {
				t.Fatalf("streak %d exceeds the %d failures since the last pass", r.streak, failsSincePass)
			}
			if r.streak < before.streak {
				t.Fatalf("a failure lowered the streak from %d to %d", before.streak, r.streak)
			}
			if !passedEver && at.Before(t0.Add(startPeriod)) && r.streak != 0 {
				t.Fatalf("a failure in the start period counted")
			}
			if passedEver && r.streak != before.streak+1 {
				t.Fatalf("after a first pass every failure counts: %d -> %d", before.streak, r.streak)
			}
		}
	})
}

func TestAgentProbePrecedenceAndDefaults(t *testing.T) {
	w := contract.WorkloadSpec{Port: 8080, Health: contract.HealthCheck{HTTP: "healthz", TCP: true}}
	p, ok := agentProbe(w)
	if !ok || p.http != "/healthz" || p.port != 8080 {
		t.Fatalf("http over tcp: %+v %v", p, ok)
	}
	if p.interval != defaultProbeInterval || p.timeout != defaultProbeTimeout || p.retries != contract.DefaultHealthRetries {
		t.Errorf("defaults not applied: %+v", p)
	}
	w.Health.HTTP = ""
	if p, ok := agentProbe(w); !ok || p.http != "" {
		t.Errorf("tcp probe: %+v %v", p, ok)
	}
	w.Health = contract.HealthCheck{Cmd: []string{"/app", "-check"}}
	if _, ok := agentProbe(w); ok {
		t.Error("a cmd check is Docker's, not an agent probe")
	}
	short := baseProbe(contract.WorkloadSpec{Health: contract.HealthCheck{Interval: 500 * time.Millisecond}})
	if short.timeout != 500*time.Millisecond {
		t.Errorf("the default timeout exceeds a short interval: %s", short.timeout)
	}
}

func hostPort(t *testing.T, rawURL string) (string, int) {
	t.Helper()
	u, _ := http.NewRequest("GET", rawURL, nil)
	host, port, err := net.SplitHostPort(u.URL.Host)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(port)
	return host, n
}

func TestProbeHTTPPassesOn2xxAnd3xxOnly(t *testing.T) {
	for _, status := range []int{200, 204, 301, 302, 404, 500, 503} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/healthz" {
					w.WriteHeader(418)
					return
				}
				if status/100 == 3 {
					w.Header().Set("Location", "/elsewhere")
				}
				w.WriteHeader(status)
			}))
			defer srv.Close()
			host, port := hostPort(t, srv.URL)
			err := probeHTTPOrTCP(context.Background(), target{addr: host, probe: probe{http: "/healthz", port: port}})
			if pass := status < 400; (err == nil) != pass {
				t.Fatalf("probe = %v, want pass=%v", err, pass)
			}
		})
	}
}

func TestProbeTCPNeedsAListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	tg := target{addr: "127.0.0.1", probe: probe{port: port}}
	if err := probeHTTPOrTCP(context.Background(), tg); err != nil {
		t.Fatalf("open port: %v", err)
	}
	ln.Close()
	if err := probeHTTPOrTCP(context.Background(), tg); err == nil {
		t.Fatal("closed port passed")
	}
	if err := probeHTTPOrTCP(context.Background(), target{probe: probe{port: port}}); err == nil {
		t.Fatal("a container without an address passed")
	}
	if err := probeHTTPOrTCP(context.Background(), target{addr: "127.0.0.1"}); err == nil {
		t.Fatal("a workload without a port passed")
	}
}

func TestProbeHTTPGivesUpAtItsDeadline(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	host, port := hostPort(t, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := probeHTTPOrTCP(ctx, target{addr: host, probe: probe{http: "/", port: port}}); err == nil {
		t.Fatal("a hung server passed")
	}
	if time.Since(start) > 2*time.Second {
		t.Fatal("the probe outlived its deadline")
	}
}

// scripted is a probe whose outcome per container the test sets.
type scripted struct {
	mu      sync.Mutex // guards fail, calls and started
	fail    map[string]bool
	calls   map[string]int // probes finished, by address
	started int            // probes begun, of every address
	block   chan struct{}  // if set, checks wait on it
}

func (s *scripted) check(ctx context.Context, t target) error {
	s.mu.Lock()
	s.started++
	s.mu.Unlock()
	if s.block != nil {
		select {
		case <-s.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[t.addr]++
	if s.fail[t.addr] {
		return errors.New("scripted failure")
	}
	return nil
}

func (s *scripted) set(addr string, fail bool) { s.mu.Lock(); s.fail[addr] = fail; s.mu.Unlock() }
func (s *scripted) count(addr string) int      { s.mu.Lock(); defer s.mu.Unlock(); return s.calls[addr] }
func (s *scripted) begun() int                 { s.mu.Lock(); defer s.mu.Unlock(); return s.started }

// passClock is a monitor's clock the test moves, counting its reads: the
// monitor reads it once at each pass over its entries, so a count that
// grew by two means a whole pass ran since.
type passClock struct {
	mu    sync.Mutex // guards now and reads
	now   time.Time
	reads int
}

func (c *passClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	return c.now
}

func (c *passClock) advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }
func (c *passClock) readCount() int          { c.mu.Lock(); defer c.mu.Unlock(); return c.reads }

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func fastTarget(addr string) target {
	return target{addr: addr, startedAt: time.Now(), probe: probe{interval: 20 * time.Millisecond, timeout: time.Second, retries: 2}}
}

func TestMonitorProbesEachTargetAndReportsChanges(t *testing.T) {
	s := &scripted{fail: map[string]bool{}, calls: map[string]int{}}
	var changes atomic.Int32
	m := newMonitor(s.check, 4, time.Now, func() { changes.Add(1) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	a, b := fastTarget("a"), fastTarget("b")
	s.set("b", true)
	m.sync(map[string]target{"ca": a, "cb": b})
	eventually(t, "a healthy", func() bool { return m.result("ca", a).healthy })
	eventually(t, "b unhealthy", func() bool { return m.result("cb", b).unhealthy(b.probe) })
	if m.result("cb", b).healthy {
		t.Fatal("a failing container is healthy")
	}
	if changes.Load() < 2 {
		t.Fatalf("%d change notifications, want one for a turning healthy and one for b turning unhealthy", changes.Load())
	}

	// A restarted container (new start time) starts afresh: still failing,
	// its streak starts again instead of going on from the old one.
	oldStreak := m.result("cb", b).streak
	b2 := b
	b2.startedAt = b.startedAt.Add(time.Second)
	m.track("cb", b2)
	if r := m.result("cb", b2); r.streak > 1 || r.streak >= oldStreak || r.healthy {
		t.Fatalf("a restarted container kept its old result (streak %d before): %+v", oldStreak, r)
	}
	s.set("b", false)
	eventually(t, "b healthy after restart", func() bool { return m.result("cb", b2).healthy })
	if r := m.result("cb", b); r.healthy || r.streak != 0 {
		t.Fatalf("the result of the old incarnation is still served: %+v", r)
	}

	// A container dropped from the targets is probed no more: by the time
	// the one kept was probed twice more, a probe of the dropped one in
	// flight at the sync has finished and no other began.
	m.sync(map[string]target{"cb": b2})
	n, kept := s.count("a"), s.count("b")
	eventually(t, "the kept container probed twice more", func() bool { return s.count("b") >= kept+2 })
	if s.count("a") > n+1 {
		t.Fatalf("a forgotten container was probed %d more times", s.count("a")-n)
	}
}

func TestMonitorNeverRunsTwoProbesOfOneContainerAtOnce(t *testing.T) {
	s := &scripted{fail: map[string]bool{}, calls: map[string]int{}, block: make(chan struct{})}
	clock := &passClock{now: time.Now()}
	m := newMonitor(s.check, 4, clock.Now, func() {})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.run(ctx); close(done) }()
	a := fastTarget("a")
	m.track("ca", a)
	eventually(t, "the first probe began", func() bool { return s.begun() >= 1 })
	// Five intervals on, with the first probe hung, and two passes over the
	// entries since: a monitor that would start a second probe has.
	clock.advance(5 * a.probe.interval)
	reads := clock.readCount()
	eventually(t, "two passes over the entries", func() bool { m.poke(); return clock.readCount() >= reads+2 })
	if n := s.begun(); n != 1 {
		t.Fatalf("%d probes began while the first one hung, want 1", n)
	}
	m.mu.Lock()
	inflight := m.entries["ca"].probing != 0
	m.mu.Unlock()
	close(s.block)
	eventually(t, "the hung probe finished", func() bool { return s.count("a") >= 1 })
	if !inflight {
		t.Fatal("the entry was not marked in flight while its probe hung")
	}
	cancel()
	<-done
	if got := s.count("a"); got > 3 {
		t.Fatalf("%d probes ran, more than the hung one and its successors", got)
	}
}

func TestMonitorRunReturnsWithProbesInFlight(t *testing.T) {
	s := &scripted{fail: map[string]bool{}, calls: map[string]int{}, block: make(chan struct{})}
	m := newMonitor(s.check, 1, time.Now, func() {})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.run(ctx); close(done) }()
	m.sync(map[string]target{"c1": fastTarget("1"), "c2": fastTarget("2")})
	eventually(t, "a probe hung", func() bool { return s.begun() == 1 })
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("run did not return after cancel with probes hung")
	}
}

// A target that changes while its probe hangs (a container restarted during
// a probe) must be probed again once the hung probe returns: the entry may
// not stay busy forever, nor take the stale result.
func TestMonitorProbesANewTargetAfterAStaleProbeReturns(t *testing.T) {
	s := &scripted{fail: map[string]bool{"a": true}, calls: map[string]int{}, block: make(chan struct{})}
	m := newMonitor(s.check, 4, time.Now, func() {})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	old := fastTarget("a")
	m.track("c", old)
	time.Sleep(30 * time.Millisecond) // the probe of old hangs
	restarted := old
	restarted.startedAt = old.startedAt.Add(time.Second)
	m.track("c", restarted)
	s.set("a", false)
	close(s.block)
	eventually(t, "the restarted container probed and healthy", func() bool { return m.result("c", restarted).healthy })

	// Forgotten then tracked again: a fresh entry, not confused with the old.
	m.forget("c")
	again := restarted
	again.startedAt = restarted.startedAt.Add(time.Second)
	m.track("c", again)
	eventually(t, "the re-tracked container healthy", func() bool { return m.result("c", again).healthy })
}

// A paused container accepts TCP connections into its backlog, so a TCP
// probe would pass: its checks fail without being tried, until it is
// unpaused (a new target), when it is probed again.
func TestMonitorFailsAPausedContainerWithoutProbingIt(t *testing.T) {
	s := &scripted{fail: map[string]bool{}, calls: map[string]int{}}
	m := newMonitor(s.check, 4, time.Now, func() {})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	running := fastTarget("a")
	m.sync(map[string]target{"ca": running})
	eventually(t, "a healthy", func() bool { return m.result("ca", running).healthy })
	paused := running
	paused.paused = true
	m.sync(map[string]target{"ca": paused})
	calls := s.count("a")
	eventually(t, "a paused container unhealthy", func() bool { return m.result("ca", paused).unhealthy(paused.probe) })
	if n := s.count("a") - calls; n > 1 { // one probe may have been in flight
		t.Errorf("a paused container was probed %d times", n)
	}
	m.sync(map[string]target{"ca": running})
	eventually(t, "healthy once unpaused", func() bool { return m.result("ca", running).healthy })
}
