package converge

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"pgregory.net/rapid"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/containers/fake"
	"github.com/hatchery/hatchery/internal/contract"
)

// scenario is a random desired state, a change to it, and a random host.
type scenario struct {
	desired, changed contract.DesiredState
	actual           []containers.Container
}

var eggNames = []string{"a", "b", "c", "d"}

func genWorkload(t *rapid.T, egg string) contract.WorkloadSpec {
	w := wl(egg, 0)
	switch rapid.IntRange(0, 3).Draw(t, egg+"-kind") {
	case 0: // stateful: one writer on its volume
		stateful(&w)
		w.Replicas = rapid.IntRange(0, 1).Draw(t, egg+"-replicas")
	case 1: // stop-first without a volume
		w.Rollout.Order = contract.StopFirst
		w.Replicas = rapid.IntRange(0, 3).Draw(t, egg+"-replicas")
	default:
		w.Replicas = rapid.IntRange(0, 5).Draw(t, egg+"-replicas")
		w.Rollout.MaxSurge = rapid.IntRange(0, 2).Draw(t, egg+"-surge")
	}
	w.Restart = rapid.SampledFrom([]contract.RestartPolicy{"", contract.RestartAlways, contract.RestartOnFailure, contract.RestartNo}).Draw(t, egg+"-restart")
	w.Revision = rapid.IntRange(0, 1).Draw(t, egg+"-revision")
	return w
}

func genScenario(t *rapid.T) scenario {
	var s scenario
	s.desired.HostID = host
	for _, egg := range eggNames {
		if rapid.Bool().Draw(t, egg+"-desired") {
			s.desired.Workloads = append(s.desired.Workloads, genWorkload(t, egg))
		}
	}
	// The change: another revision or replica count for some workloads.
	s.changed = contract.DesiredState{HostID: host}
	for i, w := range s.desired.Workloads {
		w.Env = nil
		switch rapid.IntRange(0, 2).Draw(t, "change-"+strconv.Itoa(i)) {
		case 1:
			w.Revision += 10
		case 2:
			if !w.Stateful() || len(w.Volumes) == 0 {
				w.Replicas = rapid.IntRange(0, 4).Draw(t, "rescale-"+strconv.Itoa(i))
			}
		}
		s.changed.Workloads = append(s.changed.Workloads, w)
	}

	n := rapid.IntRange(0, 12).Draw(t, "containers")
	for i := range n {
		egg := rapid.SampledFrom(append(slices.Clone(eggNames), "gone")).Draw(t, "egg")
		w, ok := s.desired.Workload("default/shop/" + egg)
		if !ok {
			w = wl(egg, 1)
		}
		slot := rapid.IntRange(0, 5).Draw(t, "slot")
		hash := old
		if rapid.Bool().Draw(t, "up-to-date") {
			hash = up(w)
		}
		state := rapid.SampledFrom([]contract.ContainerState{contract.StateRunning, contract.StateStarting,
			contract.StateCrashed, contract.StateCompleted, contract.StateStopped, contract.StateUnknown}).Draw(t, "state")
		c := ctr("x"+strconv.Itoa(i), w, slot, hash, state)
		c.Healthy = state == contract.StateRunning && rapid.Bool().Draw(t, "healthy")
		switch rapid.IntRange(0, 9).Draw(t, "labels") {
		case 0:
			c.Labels = containers.Labels("other-host", w, slot, hash)
		case 1:
			c.Labels = map[string]string{"com.example.app": "db"}
		case 2:
			c.Labels[containers.LabelSlot] = "not-a-slot"
			c = retag(c)
		case 3:
			delete(c.Labels, containers.LabelSpec)
			c = retag(c)
		}
		s.actual = append(s.actual, c)
	}
	return s
}

// retag re-reads a container's identity after its labels were edited.
func retag(c containers.Container) containers.Container {
	r := containers.FromLabels(c.ID, c.Name, c.Labels)
	r.State, r.Healthy, r.Created, r.StartedAt, r.FinishedAt, r.ExitCode = c.State, c.Healthy, c.Created, c.StartedAt, c.FinishedAt, c.ExitCode
	return r
}

// guard wraps the fake and checks, before every stop and drain the engine
// asks for, that it does not take away the last serving container of a
// stateless slot that is still desired.
type guard struct {
	*fake.Fake
	mu         sync.Mutex
	desired    contract.DesiredState // guarded by mu
	violations []string              // guarded by mu
}

func (g *guard) setDesired(d contract.DesiredState) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.desired = d
}

func (g *guard) check(action, id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	snap := g.Snapshot()
	serving := func(c containers.Container) bool { return c.State == contract.StateRunning && c.Healthy }
	i := slices.IndexFunc(snap, func(c containers.Container) bool { return c.ID == id })
	if i < 0 || !serving(snap[i]) {
		return
	}
	c := snap[i]
	w, ok := g.desired.Workload(c.WorkloadID)
	if !ok || w.Stateful() || c.Slot >= w.Replicas {
		return
	}
	for _, o := range snap {
		if o.ID == id || o.WorkloadID != c.WorkloadID || o.Slot != c.Slot {
			continue
		}
		// A job's run completed at the desired spec supersedes the old
		// container as well as a serving one does.
		done := o.State == contract.StateCompleted && o.SpecHash == contract.SpecHash(w) &&
			w.RestartPolicy() != contract.RestartAlways
		if serving(o) || done {
			return
		}
	}
	g.violations = append(g.violations, fmt.Sprintf("%s of %s, the last serving container of %s/%d", action, id, c.WorkloadID, c.Slot))
}

func (g *guard) Drain(ctx context.Context, r containers.StopRequest) error {
	g.check("drain", r.ID)
	return g.Fake.Drain(ctx, r)
}

func (g *guard) Stop(ctx context.Context, r containers.StopRequest) error {
	g.check("stop", r.ID)
	return g.Fake.Stop(ctx, r)
}

func (g *guard) Start(ctx context.Context, r containers.StartRequest) error {
	if r.Replace != "" && !r.Spec.Stateful() {
		g.check("replace", r.Replace)
	}
	return g.Fake.Start(ctx, r)
}

// host builds a fake holding the scenario's containers, and returns the IDs of
// the foreign ones.
func buildHost(s scenario) (*guard, []string) {
	f := fake.New(host, t0, fake.DefaultTiming())
	var foreign []string
	for _, c := range s.actual {
		id := f.Add(c)
		if !containers.Owned(c.Labels, host) {
			foreign = append(foreign, id)
		}
	}
	return &guard{Fake: f, desired: s.desired}, foreign
}

// converge runs one tick of Converge, then lets a second pass.
func converge(t *rapid.T, ctx context.Context, client containers.Client, f *fake.Fake, d contract.DesiredState, h *History) Plan {
	// Thousands of cases: no logs.
	p, err := Converge(ctx, client, d, h, f.Now(), Options{Concurrency: 1, Logger: zap.NewNop()})
	_ = err // faults make errors expected; the properties are about state
	f.Advance(time.Second)
	return p
}

// quietTicks is how long, in one-second ticks, the engine must have had
// nothing to do for a state to count as a fixed point: longer than the
// progress deadline and the longest crash-loop back-off, after which a state
// that is merely waiting would change.
const quietTicks = 330

// settle ticks without faults until the engine has had nothing to do, and no
// work was in progress, for quietTicks; it fails if that takes more than
// maxTicks.
func settle(t *rapid.T, g *guard, d contract.DesiredState, h *History, maxTicks int) {
	quiet := 0
	for range maxTicks {
		p := converge(t, context.Background(), g, g.Fake, d, h)
		quiet++
		if len(p.Steps) > 0 || g.Pending() {
			quiet = 0
		}
		if quiet == quietTicks {
			return
		}
	}
	t.Fatalf("no fixed point within %d ticks; plan: %v", maxTicks,
		render(Diff(d, g.Snapshot(), h, g.Now())))
}

// checkEndState asserts what a fixed point must look like.
func checkEndState(t *rapid.T, g *guard, d contract.DesiredState, h *History, foreign []string) {
	all := g.All()
	for _, id := range foreign {
		if !slices.ContainsFunc(all, func(c containers.Container) bool { return c.ID == id }) {
			t.Fatalf("foreign container %s was removed", id)
		}
	}
	if calls := g.ForeignCalls(); len(calls) > 0 {
		t.Fatalf("calls aimed at foreign containers: %v", calls)
	}
	own := g.Snapshot()
	for _, c := range own {
		w, ok := d.Workload(c.WorkloadID)
		if !ok {
			t.Fatalf("a container of an undesired workload is left: %+v", c)
		}
		if c.Slot >= w.Replicas {
			t.Fatalf("a container above the replica count is left: %+v", c)
		}
	}
	for _, w := range d.Workloads {
		f, failed := h.FailedRollouts[w.ID()]
		failed = failed && f.SpecHash == up(w)
		for slot := range w.Replicas {
			var fresh, stale []containers.Container
			for _, c := range own {
				if c.WorkloadID == w.ID() && c.Slot == slot {
					if c.SpecHash == up(w) && c.LabelError == "" {
						fresh = append(fresh, c)
					} else {
						stale = append(stale, c)
					}
				}
			}
			if w.RestartPolicy() == contract.RestartAlways && !failed {
				if len(fresh) != 1 || len(stale) != 0 || !fresh[0].Healthy || fresh[0].State != contract.StateRunning {
					t.Fatalf("%s/%d at the fixed point: fresh %+v stale %+v", w.ID(), slot, fresh, stale)
				}
			} else if len(fresh) > 1 || len(stale) > 1 || len(fresh)+len(stale) == 0 {
				t.Fatalf("%s/%d at the fixed point: fresh %+v stale %+v", w.ID(), slot, fresh, stale)
			}
		}
	}
}

// checkStatefulCreates replays the events: a container is never created in a
// stateful slot that still holds one.
func checkStatefulCreates(t *rapid.T, g *guard, initial []containers.Container, ds ...contract.DesiredState) {
	statefulIDs := map[string]bool{}
	for _, d := range ds {
		for _, w := range d.Workloads {
			if w.Stateful() {
				statefulIDs[w.ID()] = true
			}
		}
	}
	type slotKey struct {
		w string
		s int
	}
	held := map[slotKey]map[string]bool{}
	add := func(k slotKey, id string) {
		if held[k] == nil {
			held[k] = map[string]bool{}
		}
		held[k][id] = true
	}
	for _, c := range initial {
		if containers.Owned(c.Labels, host) {
			add(slotKey{c.WorkloadID, c.Slot}, c.ID)
		}
	}
	for _, e := range g.Events() {
		k := slotKey{e.WorkloadID, e.Slot}
		switch e.Kind {
		case fake.EventCreate:
			if statefulIDs[e.WorkloadID] && len(held[k]) > 0 {
				t.Fatalf("at %v a second container %s was created in stateful slot %s/%d beside %v",
					e.At.Sub(t0), e.ID, e.WorkloadID, e.Slot, held[k])
			}
			add(k, e.ID)
		case fake.EventRemove:
			delete(held[k], e.ID)
		}
	}
}

// faults injects random call errors, crashes and failing health checks.
type faults struct {
	rng       *rand.Rand
	errRate   float64
	crashRate float64
}

func (fl *faults) install(f *fake.Fake) {
	f.SetFault(func(op fake.Op, target string) error {
		if fl.rng.Float64() < fl.errRate {
			return errors.New("injected")
		}
		return nil
	})
}

func (fl *faults) disturb(f *fake.Fake) {
	for _, c := range f.Snapshot() {
		if c.Placeholder() {
			continue
		}
		if fl.rng.Float64() < fl.crashRate {
			_ = f.Crash(c.ID, 1+fl.rng.IntN(3))
		}
		if fl.rng.Float64() < fl.crashRate {
			_ = f.FailHealth(c.ID, true)
		}
	}
}

func heal(f *fake.Fake) {
	f.SetFault(nil)
	for _, c := range f.All() {
		_ = f.FailHealth(c.ID, false)
	}
}

// TestPropertyConvergeUnderFaults runs random scenarios through ticks of
// Converge with faults injected, a change of the desired state, then no more
// faults: a fixed point is reached, and the invariants held all along.
func TestPropertyConvergeUnderFaults(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genScenario(t)
		g, foreign := buildHost(s)
		initial := g.All()
		fl := &faults{
			rng:       rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 1)),
			errRate:   rapid.Float64Range(0, 0.5).Draw(t, "error-rate"),
			crashRate: rapid.Float64Range(0, 0.1).Draw(t, "crash-rate"),
		}
		h := NewHistory()
		fl.install(g.Fake)
		for range rapid.IntRange(0, 20).Draw(t, "faulty-ticks") {
			fl.disturb(g.Fake)
			converge(t, context.Background(), g, g.Fake, s.desired, h)
		}
		g.setDesired(s.changed)
		for range rapid.IntRange(0, 20).Draw(t, "faulty-ticks-after-change") {
			fl.disturb(g.Fake)
			converge(t, context.Background(), g, g.Fake, s.changed, h)
		}
		heal(g.Fake)
		settle(t, g, s.changed, h, 2000)

		if len(g.violations) > 0 {
			t.Fatalf("the engine took away a slot's last serving container: %v", g.violations)
		}
		if p := Diff(s.changed, g.Snapshot(), h, g.Now()); len(p.Steps) > 0 {
			t.Fatalf("Diff is not empty at the fixed point: %v", render(p))
		}
		checkEndState(t, g, s.changed, h, foreign)
		checkStatefulCreates(t, g, initial, s.desired, s.changed)
	})
}

// aborter cancels the converge's context once the engine has made n calls.
type aborter struct {
	containers.Client
	mu     sync.Mutex
	n      int // calls left before the abort; guarded by mu
	cancel context.CancelFunc
}

func (a *aborter) spend(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n == 0 {
		a.cancel()
		return context.Canceled
	}
	a.n--
	return ctx.Err()
}

func (a *aborter) Start(ctx context.Context, r containers.StartRequest) error {
	if err := a.spend(ctx); err != nil {
		return err
	}
	return a.Client.Start(ctx, r)
}

func (a *aborter) Drain(ctx context.Context, r containers.StopRequest) error {
	if err := a.spend(ctx); err != nil {
		return err
	}
	return a.Client.Drain(ctx, r)
}

func (a *aborter) Stop(ctx context.Context, r containers.StopRequest) error {
	if err := a.spend(ctx); err != nil {
		return err
	}
	return a.Client.Stop(ctx, r)
}

func (a *aborter) Restart(ctx context.Context, r containers.RestartRequest) error {
	if err := a.spend(ctx); err != nil {
		return err
	}
	return a.Client.Restart(ctx, r)
}

// summary is a host's state without container IDs, comparable across runs.
func summary(g *guard) []string {
	var out []string
	for _, c := range g.All() {
		id := ""
		if !containers.Owned(c.Labels, host) {
			id = c.ID // foreign ones keep theirs
		}
		out = append(out, fmt.Sprintf("%s %s/%d %s %s healthy=%v %s", id, c.WorkloadID, c.Slot, c.SpecHash, c.State, c.Healthy, c.LabelError))
	}
	slices.Sort(out)
	return out
}

// TestPropertyAbortedConvergeReachesTheSameEndState compares an undisturbed
// run with one whose converges are aborted after a random number of steps, or
// whose calls fail at random: once that stops, both reach the same end state.
func TestPropertyAbortedConvergeReachesTheSameEndState(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genScenario(t)

		calm, _ := buildHost(s)
		calmHistory := NewHistory()
		settle(t, calm, s.desired, calmHistory, 2000)

		rough, _ := buildHost(s)
		roughHistory := NewHistory()
		rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 2))
		errRate := rapid.Float64Range(0, 0.5).Draw(t, "error-rate")
		rough.SetFault(func(fake.Op, string) error {
			if rng.Float64() < errRate {
				return errors.New("injected")
			}
			return nil
		})
		for range rapid.IntRange(1, 30).Draw(t, "rough-ticks") {
			ctx, cancel := context.WithCancel(context.Background())
			a := &aborter{Client: rough, n: rapid.IntRange(0, 6).Draw(t, "steps-before-abort"), cancel: cancel}
			converge(t, ctx, a, rough.Fake, s.desired, roughHistory)
			cancel()
		}
		rough.SetFault(nil)
		settle(t, rough, s.desired, roughHistory, 2000)

		if a, b := summary(calm), summary(rough); !slices.Equal(a, b) {
			onlyA := slices.DeleteFunc(slices.Clone(a), func(x string) bool { return slices.Contains(b, x) })
			onlyB := slices.DeleteFunc(slices.Clone(b), func(x string) bool { return slices.Contains(a, x) })
			t.Fatalf("end states differ:\n only undisturbed %q\n only aborted     %q", onlyA, onlyB)
		}
		if len(calm.violations)+len(rough.violations) > 0 {
			t.Fatalf("violations: %v %v", calm.violations, rough.violations)
		}
	})
}

// TestPropertyDiffStaysInScope feeds Diff everything a host may hold, foreign
// containers included, with a random history and time: no step ever targets a
// container that is not this host's, no start is for an undesired workload or
// outside its slots, and Diff is pure (same answer twice, input untouched).
func TestPropertyDiffStaysInScope(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genScenario(t)
		for i := range s.actual {
			s.actual[i].ID = "x" + strconv.Itoa(i)
		}
		h := NewHistory()
		for _, c := range s.actual {
			if rapid.Bool().Draw(t, "has-history") {
				h.Containers[c.ID] = ContainerHistory{
					Restarts:     rapid.IntRange(0, 12).Draw(t, "restarts"),
					LastRestart:  t0.Add(-time.Duration(rapid.IntRange(0, 600).Draw(t, "since-restart")) * time.Second),
					HealthyStart: c.StartedAt,
				}
			}
		}
		now := t0.Add(time.Duration(rapid.IntRange(0, 3600).Draw(t, "now")) * time.Second)
		before := slices.Clone(s.actual)
		p := Diff(s.desired, s.actual, h, now)
		if q := Diff(s.desired, s.actual, h, now); !slices.Equal(render(p), render(q)) {
			t.Fatalf("Diff is not deterministic: %v then %v", render(p), render(q))
		}
		for i := range before {
			if before[i].ID != s.actual[i].ID || before[i].State != s.actual[i].State || before[i].Slot != s.actual[i].Slot {
				t.Fatal("Diff modified its input")
			}
		}
		byID := map[string]containers.Container{}
		for _, c := range s.actual {
			byID[c.ID] = c
		}
		targeted := map[string]bool{}
		for _, st := range p.Steps {
			if st.ContainerID != "" {
				c, ok := byID[st.ContainerID]
				if !ok || !containers.Owned(c.Labels, host) {
					t.Fatalf("step %v targets a container that is not this host's: %+v", st, c)
				}
				if targeted[st.ContainerID] {
					t.Fatalf("two steps target %s: %v", st.ContainerID, render(p))
				}
				targeted[st.ContainerID] = true
			}
			if st.Action == ActionStart || st.Action == ActionReplace {
				w, ok := s.desired.Workload(st.WorkloadID)
				if !ok || st.ReplicaIndex >= w.Replicas || st.SpecHash != up(w) {
					t.Fatalf("start %v is not for a desired slot at its spec", st)
				}
			}
		}
	})
}
