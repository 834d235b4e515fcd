package converge

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/containers/fake"
	"github.com/hatchery/hatchery/internal/contract"
)

// gate is a containers.Client whose mutating calls block until released, and
// which records how many ran at once.
type gate struct {
	release chan struct{}
	mu      sync.Mutex
	active  int // guarded by mu
	peak    int // guarded by mu
	calls   []string
}

func (g *gate) call(what string) error {
	g.mu.Lock()
	g.active++
	g.peak = max(g.peak, g.active)
	g.calls = append(g.calls, what)
	g.mu.Unlock()
	<-g.release
	g.mu.Lock()
	g.active--
	g.mu.Unlock()
	return nil
}

func (g *gate) List(context.Context) ([]containers.Container, error) { return nil, nil }
func (g *gate) Start(_ context.Context, r containers.StartRequest) error {
	return g.call("start " + r.Spec.Egg)
}
func (g *gate) Drain(_ context.Context, r containers.StopRequest) error {
	return g.call("drain " + r.ID)
}
func (g *gate) Stop(_ context.Context, r containers.StopRequest) error { return g.call("stop " + r.ID) }
func (g *gate) Restart(_ context.Context, r containers.RestartRequest) error {
	return g.call("restart " + r.ID)
}

func stopPlan(n int) Plan {
	var p Plan
	for i := range n {
		p.Steps = append(p.Steps, Step{Action: ActionStop, WorkloadID: "default/shop/web", ContainerID: "c" + strconv.Itoa(i), ReplicaIndex: i})
	}
	return p
}

func TestApplyRunsStepsConcurrentlyWithinTheBound(t *testing.T) {
	for _, tt := range []struct {
		name  string
		limit int
		want  int
	}{{"default bound", 0, DefaultConcurrency}, {"bound of 3", 3, 3}, {"bound of 1", 1, 1}} {
		t.Run(tt.name, func(t *testing.T) {
			g := &gate{release: make(chan struct{})}
			done := make(chan error)
			go func() {
				done <- Apply(context.Background(), g, desiredOf(web), stopPlan(10), Options{Concurrency: tt.limit, Logger: zaptest.NewLogger(t)})
			}()
			deadline := time.Now().Add(5 * time.Second)
			for {
				g.mu.Lock()
				active := g.active
				g.mu.Unlock()
				if active >= tt.want || time.Now().After(deadline) {
					break
				}
				time.Sleep(time.Millisecond)
			}
			time.Sleep(20 * time.Millisecond) // room for a step beyond the bound to show
			close(g.release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if g.peak != tt.want || len(g.calls) != 10 {
				t.Errorf("peak concurrency %d over %d calls, want %d over 10", g.peak, len(g.calls), tt.want)
			}
		})
	}
}

func TestApplyCarriesOnPastFailuresAndJoinsThem(t *testing.T) {
	f := fake.New(host, t0, fake.DefaultTiming())
	var ids []string
	for i := range 3 {
		ids = append(ids, f.Add(ctr("", web, i, old, contract.StateCrashed)))
	}
	boom := errors.New("engine said no")
	f.SetFault(func(op fake.Op, target string) error {
		if target == ids[1] || op == fake.OpStart {
			return boom
		}
		return nil
	})
	plan := Plan{Steps: []Step{
		{Action: ActionStop, WorkloadID: web.ID(), ContainerID: ids[0], ReplicaIndex: 0},
		{Action: ActionStop, WorkloadID: web.ID(), ContainerID: ids[1], ReplicaIndex: 1},
		{Action: ActionStart, WorkloadID: web.ID(), ReplicaIndex: 3, SpecHash: up(web)},
		{Action: ActionStop, WorkloadID: web.ID(), ContainerID: ids[2], ReplicaIndex: 2},
	}}
	var seen []Step
	var mu sync.Mutex
	err := Apply(context.Background(), f, desiredOf(web), plan, Options{Logger: zaptest.NewLogger(t), OnStep: func(s Step, err error) {
		mu.Lock()
		seen = append(seen, s)
		mu.Unlock()
	}})
	if !errors.Is(err, boom) {
		t.Fatalf("error %v does not wrap the client's", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "stop default/shop/web/1") || !strings.Contains(msg, "start default/shop/web/3") || strings.Count(msg, "\n") != 1 {
		t.Errorf("errors do not name each failed step's workload and slot: %q", msg)
	}
	left := f.All()
	if len(left) != 1 || left[0].ID != ids[1] {
		t.Errorf("the steps after a failure did not run: %+v", left)
	}
	if len(seen) != 4 {
		t.Errorf("OnStep saw %d steps, want 4", len(seen))
	}
}

func TestApplyIsIdempotent(t *testing.T) {
	f := fake.New(host, t0, fake.DefaultTiming())
	s0 := f.Add(ctr("", web, 0, old, contract.StateRunning))
	plan := Plan{Steps: []Step{
		{Action: ActionStart, WorkloadID: web.ID(), ReplicaIndex: 0, SpecHash: up(web)},
		{Action: ActionDrain, WorkloadID: web.ID(), ContainerID: s0, ReplicaIndex: 0},
	}}
	for range 3 {
		if err := Apply(context.Background(), f, desiredOf(web), plan, testOptions(t)); err != nil {
			t.Fatal(err)
		}
	}
	f.Advance(time.Minute)
	if err := Apply(context.Background(), f, desiredOf(web), plan, testOptions(t)); err != nil {
		t.Fatalf("re-applying steps whose effect is there: %v", err)
	}
	var creates, drains int
	for _, e := range f.Events() {
		switch e.Kind {
		case fake.EventCreate:
			creates++
		case fake.EventDrain:
			drains++
		}
	}
	if creates != 1 || drains != 1 {
		t.Errorf("re-applied plan did the work again: %d creates, %d drains", creates, drains)
	}
}

func TestApplyStopsStartingStepsWhenCancelled(t *testing.T) {
	g := &gate{release: make(chan struct{})}
	close(g.release)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Apply(ctx, g, desiredOf(web), stopPlan(5), testOptions(t))
	if !errors.Is(err, context.Canceled) || len(g.calls) != 0 {
		t.Errorf("cancelled Apply: %v, %d calls", err, len(g.calls))
	}
}

func TestApplyRefusesToStartAWorkloadThatIsNotDesired(t *testing.T) {
	g := &gate{release: make(chan struct{})}
	close(g.release)
	err := Apply(context.Background(), g, desiredOf(), Plan{Steps: []Step{{Action: ActionStart, WorkloadID: "x/y/z"}}}, testOptions(t))
	if err == nil || len(g.calls) != 0 {
		t.Errorf("start of an undesired workload: %v, calls %v", err, g.calls)
	}
}

// recorder is a containers.Client that keeps the requests it gets.
type recorder struct {
	mu       sync.Mutex
	starts   []containers.StartRequest
	stops    []containers.StopRequest
	drains   []containers.StopRequest
	restarts []containers.RestartRequest
}

func (r *recorder) List(context.Context) ([]containers.Container, error) { return nil, nil }
func (r *recorder) Start(_ context.Context, q containers.StartRequest) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.starts = append(r.starts, q)
	return nil
}
func (r *recorder) Drain(_ context.Context, q containers.StopRequest) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drains = append(r.drains, q)
	return nil
}
func (r *recorder) Stop(_ context.Context, q containers.StopRequest) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stops = append(r.stops, q)
	return nil
}
func (r *recorder) Restart(_ context.Context, q containers.RestartRequest) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.restarts = append(r.restarts, q)
	return nil
}

func TestApplyPassesEachStepsSettings(t *testing.T) {
	w := wl("web", 2, func(w *contract.WorkloadSpec) {
		w.StopTimeout = 7 * time.Second
		w.Rollout.DrainTimeout = 3 * time.Second
	})
	started := t0.Add(-time.Minute)
	plan := Plan{Steps: []Step{
		{Action: ActionStart, WorkloadID: w.ID(), ReplicaIndex: 1, SpecHash: up(w)},
		{Action: ActionReplace, WorkloadID: w.ID(), ReplicaIndex: 0, SpecHash: up(w), ContainerID: "old"},
		{Action: ActionRoll, WorkloadID: w.ID(), ReplicaIndex: 1, ContainerID: "r"},
		{Action: ActionDrain, WorkloadID: "default/shop/gone", ReplicaIndex: 4, ContainerID: "g"},
		{Action: ActionStop, WorkloadID: w.ID(), ReplicaIndex: 0, ContainerID: "s"},
		{Action: ActionRestart, WorkloadID: w.ID(), ReplicaIndex: 0, ContainerID: "c", StartedAt: started},
	}}
	r := &recorder{}
	if err := Apply(context.Background(), r, desiredOf(w), plan, Options{Concurrency: 1, Logger: zaptest.NewLogger(t)}); err != nil {
		t.Fatal(err)
	}
	if len(r.starts) != 2 || r.starts[0].HostID != host || r.starts[0].Slot != 1 || r.starts[0].SpecHash != up(w) ||
		r.starts[0].Spec.ID() != w.ID() || r.starts[0].Replace != "" || r.starts[1].Replace != "old" {
		t.Errorf("starts: %+v", r.starts)
	}
	if len(r.drains) != 2 || r.drains[0].DrainTimeout != 3*time.Second || r.drains[0].StopTimeout != 7*time.Second {
		t.Errorf("a drain did not get its workload's timeouts: %+v", r.drains)
	}
	if d := r.drains[1]; d.ID != "g" || d.DrainTimeout != contract.DefaultDrainTimeout || d.StopTimeout != contract.DefaultStopTimeout || d.Slot != 4 {
		t.Errorf("a drain of an undesired workload did not get the defaults: %+v", d)
	}
	if len(r.stops) != 1 || r.stops[0].ID != "s" || r.stops[0].StopTimeout != 7*time.Second {
		t.Errorf("stops: %+v", r.stops)
	}
	if len(r.restarts) != 1 || !r.restarts[0].StartedAt.Equal(started) || r.restarts[0].StopTimeout != 7*time.Second {
		t.Errorf("restarts: %+v", r.restarts)
	}
}

func TestConvergeCountsOnlyRestartsThatLanded(t *testing.T) {
	f := fake.New(host, t0, fake.DefaultTiming())
	id := f.Add(ctr("", web1, 0, up(web1), contract.StateCrashed))
	f.SetFault(func(op fake.Op, _ string) error {
		if op == fake.OpRestart {
			return errors.New("engine busy")
		}
		return nil
	})
	h := NewHistory()
	if _, err := Converge(context.Background(), f, desiredOf(web1), h, f.Now(), testOptions(t)); err == nil {
		t.Fatal("the failed restart was not reported")
	}
	if h.Containers[id].Restarts != 0 {
		t.Errorf("a failed restart counted towards the back-off: %+v", h.Containers[id])
	}
	f.SetFault(nil)
	p, err := Converge(context.Background(), f, desiredOf(web1), h, f.Now(), testOptions(t))
	if err != nil || len(p.Steps) != 1 || p.Steps[0].Action != ActionRestart {
		t.Fatalf("retry: %v %v", render(p), err)
	}
	if h.Containers[id].Restarts != 1 || !h.Containers[id].LastRestart.Equal(f.Now()) {
		t.Errorf("a landed restart was not counted: %+v", h.Containers[id])
	}
}

func TestConvergeReportsAListFailure(t *testing.T) {
	f := fake.New(host, t0, fake.DefaultTiming())
	f.SetFault(func(op fake.Op, _ string) error { return errors.New("socket gone") })
	if _, err := Converge(context.Background(), f, desiredOf(web1), NewHistory(), f.Now(), testOptions(t)); err == nil ||
		!strings.Contains(err.Error(), "list containers") {
		t.Errorf("a list failure: %v", err)
	}
}

func TestApplyAndConvergeRefuseAMissingLoggerOrHistory(t *testing.T) {
	f := fake.New(host, t0, fake.DefaultTiming())
	plan := Plan{Steps: []Step{{Action: ActionStart, WorkloadID: web1.ID(), SpecHash: contract.SpecHash(web1)}}}
	if err := Apply(context.Background(), f, desiredOf(web1), plan, Options{}); err == nil || !strings.Contains(err.Error(), "no logger") {
		t.Errorf("Apply without a logger: %v", err)
	}
	if _, err := Converge(context.Background(), f, desiredOf(web1), NewHistory(), f.Now(), Options{}); err == nil || !strings.Contains(err.Error(), "no logger") {
		t.Errorf("Converge without a logger: %v", err)
	}
	if _, err := Converge(context.Background(), f, desiredOf(web1), nil, f.Now(), testOptions(t)); err == nil || !strings.Contains(err.Error(), "no history") {
		t.Errorf("Converge without a history: %v", err)
	}
	if evs := f.Events(); len(evs) != 0 {
		t.Errorf("refused calls changed the host: %v", evs)
	}
}
