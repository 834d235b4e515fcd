package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
)

// Probe timings used when a workload leaves them zero.
const (
	defaultProbeInterval = 2 * time.Second
	defaultProbeTimeout  = 2 * time.Second
	// startInterval is how often a container is probed before its first
	// passing check: a healthy start is seen within a fraction of a second
	// instead of an interval. (Docker 25 has start_interval for this; API
	// 1.41 does not, so the agent's own probes do it.) Each slot of a roll
	// waits for this detection, so it is short: a probe of a local container
	// costs well under a millisecond, and it stops at the first pass.
	startInterval = 50 * time.Millisecond
)

// probe is how the agent checks one workload's containers itself: an HTTP GET
// or a TCP connect to the container's address.
type probe struct {
	http        string // the path for an HTTP probe; "" for TCP
	port        int
	interval    time.Duration
	timeout     time.Duration
	startPeriod time.Duration
	retries     int
}

// agentProbe returns the workload's own HTTP or TCP probe, the first rung of
// the health precedence (spec probe > Docker HEALTHCHECK > tcp on port >
// running).
func agentProbe(w contract.WorkloadSpec) (probe, bool) {
	switch {
	case w.Health.HTTP != "":
		p := baseProbe(w)
		p.http = w.Health.HTTP
		if !strings.HasPrefix(p.http, "/") {
			p.http = "/" + p.http
		}
		return p, true
	case w.Health.TCP:
		return baseProbe(w), true
	}
	return probe{}, false
}

// tcpOnPort is the third rung: a TCP connect to the workload's port.
func tcpOnPort(w contract.WorkloadSpec) probe { return baseProbe(w) }

func baseProbe(w contract.WorkloadSpec) probe {
	p := probe{
		port:        w.Port,
		interval:    w.Health.Interval,
		timeout:     w.Health.Timeout,
		startPeriod: w.Health.StartPeriod,
		retries:     w.HealthRetries(),
	}
	if p.interval <= 0 {
		p.interval = defaultProbeInterval
	}
	if p.timeout <= 0 {
		p.timeout = min(defaultProbeTimeout, p.interval)
	}
	return p
}

// target is one running container to probe.
type target struct {
	probe     probe
	addr      string    // the container's IP
	startedAt time.Time // when its process started: the start period counts from here
	// paused: the container is frozen; each check fails without being tried
	// (its kernel still accepts TCP connections, which would pass).
	paused bool
}

// errPaused is the failure of a check of a paused container.
var errPaused = errors.New("the container is paused")

// result is the latest health of one container.
type result struct {
	healthy bool
	// streak counts consecutive failures that count: not those in the start
	// period, and before the first pass at most one per interval.
	streak int
	// passed tells whether a check has passed since the start; until then
	// the container is probed every startInterval.
	passed      bool
	lastCounted time.Time // when the last counted failure was
}

// next returns the result after one more check at time at. It is the whole
// of the health rules, without I/O:
//   - a pass makes the container healthy and resets the streak;
//   - a failure makes it not healthy (a rolling update waits for a pass);
//   - a failure in the start period, before any pass, does not count (as
//     Docker does: a pass ends the start period);
//   - before the first pass, probes come every startInterval but failures
//     count at most once per interval, so `retries` keeps its meaning of
//     "this many intervals of failure".
func (r result) next(passed bool, at time.Time, t target) result {
	if passed {
		return result{healthy: true, passed: true}
	}
	r.healthy = false
	if !r.passed {
		if at.Before(t.startedAt.Add(t.probe.startPeriod)) {
			return r
		}
		// Half a start interval of slack absorbs scheduling jitter.
		if !r.lastCounted.IsZero() && at.Sub(r.lastCounted) < t.probe.interval-startInterval/2 {
			return r
		}
	}
	r.streak++
	r.lastCounted = at
	return r
}

// unhealthy reports whether the result counts as unhealthy for its probe.
func (r result) unhealthy(p probe) bool { return r.streak >= p.retries }

// monitor probes the running containers of agent-probed workloads
// concurrently, each on its own schedule, and keeps the latest result per
// container. List reads the results and never waits for a probe.
type monitor struct {
	check    func(ctx context.Context, t target) error
	sem      chan struct{} // bounds the probes in flight
	now      func() time.Time
	onChange func()
	wake     chan struct{} // one slot: "the targets changed"

	mu      sync.Mutex        // guards entries and gens
	entries map[string]*entry // by container ID
	gens    int               // the last gen given out
}

type entry struct {
	target target
	res    result
	due    time.Time
	// gen identifies the target (unique in the monitor), so that the late
	// result of a probe of an earlier target, or of a forgotten entry, is
	// dropped; probing is the gen of the probe in flight, 0 for none.
	gen, probing int
}

func newMonitor(check func(context.Context, target) error, concurrency int, now func() time.Time, onChange func()) *monitor {
	return &monitor{
		check: check, sem: make(chan struct{}, concurrency), now: now, onChange: onChange,
		wake: make(chan struct{}, 1), entries: map[string]*entry{},
	}
}

// sync makes the monitor probe exactly targets: new ones at once, changed
// ones (restarted, moved, probe changed) afresh, missing ones no more.
func (m *monitor) sync(targets map[string]target) {
	m.mu.Lock()
	for id := range m.entries {
		if _, ok := targets[id]; !ok {
			delete(m.entries, id)
		}
	}
	for id, t := range targets {
		m.setLocked(id, t)
	}
	m.mu.Unlock()
	m.poke()
}

// track adds or refreshes one target (a container the Engine just started).
func (m *monitor) track(id string, t target) {
	m.mu.Lock()
	m.setLocked(id, t)
	m.mu.Unlock()
	m.poke()
}

// forget stops probing a container.
func (m *monitor) forget(id string) {
	m.mu.Lock()
	delete(m.entries, id)
	m.mu.Unlock()
}

func (m *monitor) setLocked(id string, t target) {
	m.gens++
	if e, ok := m.entries[id]; ok {
		if e.target == t {
			return
		}
		// A probe of the old target may still be in flight: it keeps the
		// entry busy until it returns, and its result is dropped.
		e.target, e.res, e.due, e.gen = t, result{}, m.now(), m.gens
		return
	}
	m.entries[id] = &entry{target: t, due: m.now(), gen: m.gens}
}

func (m *monitor) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// result returns the latest result for the container, if it is still
// probing target t; a fresh result (not healthy, no failure) otherwise.
func (m *monitor) result(id string, t target) result {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.entries[id]; ok && e.target == t {
		return e.res
	}
	return result{}
}

// run probes until ctx is done.
func (m *monitor) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		next := m.launchDue(ctx, &wg)
		timer.Reset(min(time.Until(next), time.Second))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-m.wake:
		}
	}
}

// launchDue starts the probes that are due and returns when the next one is.
func (m *monitor) launchDue(ctx context.Context, wg *sync.WaitGroup) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	next := now.Add(time.Second)
	for id, e := range m.entries {
		if e.probing != 0 {
			continue
		}
		if e.due.After(now) {
			if e.due.Before(next) {
				next = e.due
			}
			continue
		}
		e.probing = e.gen
		wg.Add(1)
		go func(id string, t target, gen int) {
			defer wg.Done()
			select {
			case m.sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			err := errPaused
			if !t.paused {
				cctx, cancel := context.WithTimeout(ctx, t.probe.timeout)
				err = m.check(cctx, t)
				cancel()
			}
			<-m.sem
			if ctx.Err() != nil {
				return
			}
			m.record(id, gen, err == nil)
		}(id, e.target, e.gen)
	}
	return next
}

// record stores one check's outcome and schedules the next check.
func (m *monitor) record(id string, gen int, passed bool) {
	m.mu.Lock()
	e, ok := m.entries[id]
	if ok && e.probing == gen {
		e.probing = 0
	}
	if !ok || e.gen != gen {
		m.mu.Unlock()
		m.poke() // the new target, if any, is due
		return   // forgotten or changed meanwhile: the result is stale
	}
	now := m.now()
	before := e.res
	e.res = e.res.next(passed, now, e.target)
	interval := e.target.probe.interval
	if !e.res.passed {
		interval = min(interval, startInterval)
	}
	e.due = now.Add(interval)
	changed := before.healthy != e.res.healthy ||
		before.unhealthy(e.target.probe) != e.res.unhealthy(e.target.probe)
	m.mu.Unlock()
	m.poke()
	if changed {
		m.onChange()
	}
}

// probeClient is shared by the HTTP probes. No keep-alive: a probe's
// connection would only pin a container that may be going away.
var probeClient = &http.Client{
	Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
	// A redirect is an answer: 3xx passes, as for the test app's -check.
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// probeHTTPOrTCP runs one agent-side check against the container's address:
// an HTTP GET passing on 2xx and 3xx, or a TCP connect.
func probeHTTPOrTCP(ctx context.Context, t target) error {
	if t.addr == "" {
		return errors.New("the container has no address")
	}
	if t.probe.port <= 0 {
		return errors.New("the workload has no port to probe")
	}
	hostport := net.JoinHostPort(t.addr, strconv.Itoa(t.probe.port))
	if t.probe.http == "" {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", hostport)
		if err != nil {
			return err
		}
		return conn.Close()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+hostport+t.probe.http, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "hatchery-agent-probe")
	resp, err := probeClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("GET %s: %s", t.probe.http, resp.Status)
	}
	return nil
}
