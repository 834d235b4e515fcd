package converge

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/containers/fake"
	"github.com/hatchery/hatchery/internal/contract"
)

// sim drives Converge against the fake, one tick at a time.
type sim struct {
	t       *testing.T
	f       *fake.Fake
	h       *History
	desired contract.DesiredState
}

func newSim(t *testing.T, ws ...contract.WorkloadSpec) *sim {
	return &sim{t: t, f: fake.New(host, t0, fake.DefaultTiming()), h: NewHistory(), desired: desiredOf(ws...)}
}

// tick converges once, then lets dt of simulated time pass.
func (s *sim) tick(dt time.Duration) Plan {
	s.t.Helper()
	p, err := Converge(context.Background(), s.f, s.desired, s.h, s.f.Now(), testOptions(s.t))
	if err != nil {
		s.t.Fatalf("converge at %v: %v", s.f.Now().Sub(t0), err)
	}
	s.f.Advance(dt)
	return p
}

// settle ticks until converges have had nothing to do, and no work was in
// progress, for 5 ticks in a row (longer than anything takes to boot).
func (s *sim) settle(maxTicks int, each func()) {
	s.t.Helper()
	quiet := 0
	for range maxTicks {
		p := s.tick(time.Second)
		if each != nil {
			each()
		}
		quiet++
		if len(p.Steps) > 0 || s.f.Pending() {
			quiet = 0
		}
		if quiet == 5 {
			return
		}
	}
	s.t.Fatalf("no fixed point after %d ticks: %v", maxTicks, render(Diff(s.desired, s.list(), s.h, s.f.Now())))
}

func (s *sim) list() []containers.Container {
	s.t.Helper()
	cs, err := s.f.List(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	return cs
}

// serving counts the containers of a slot that are in traffic.
func (s *sim) serving(w contract.WorkloadSpec, slot int) int {
	n := 0
	for _, c := range s.list() {
		if c.WorkloadID == w.ID() && c.Slot == slot && c.State == contract.StateRunning && c.Healthy {
			n++
		}
	}
	return n
}

func (s *sim) only(w contract.WorkloadSpec, slot int) []containers.Container {
	var out []containers.Container
	for _, c := range s.list() {
		if c.WorkloadID == w.ID() && c.Slot == slot {
			out = append(out, c)
		}
	}
	return out
}

func TestConvergeRollsWithoutDowntime(t *testing.T) {
	w := wl("web", 4)
	s := newSim(t, w)
	s.settle(60, nil)
	for i := range 4 {
		if s.serving(w, i) != 1 {
			t.Fatalf("slot %d not serving after the first start", i)
		}
	}

	v2 := wl("web", 4, func(w *contract.WorkloadSpec) { w.Image = "img:web-v3" })
	s.desired = desiredOf(v2)
	maxMidRoll := 0
	s.settle(120, func() {
		mid := 0
		for i := range 4 {
			if s.serving(v2, i) == 0 {
				t.Fatalf("slot %d lost its last serving container at %v", i, s.f.Now().Sub(t0))
			}
			// Mid-roll: a replacement beside a stale container still in service.
			var stale, fresh bool
			for _, c := range s.only(v2, i) {
				stale = stale || (c.SpecHash != up(v2) && c.State != contract.StateDraining)
				fresh = fresh || c.SpecHash == up(v2)
			}
			if stale && fresh {
				mid++
			}
		}
		maxMidRoll = max(maxMidRoll, mid)
	})
	for i := range 4 {
		cs := s.only(v2, i)
		if len(cs) != 1 || cs[0].SpecHash != up(v2) || !cs[0].Healthy {
			t.Errorf("slot %d after the roll: %+v", i, cs)
		}
	}
	if maxMidRoll != 1 {
		t.Errorf("at most %d slots were mid-roll, want exactly max_surge 1", maxMidRoll)
	}
}

func TestConvergeStatefulRollIsStopFirstWithTheImageReady(t *testing.T) {
	s := newSim(t, db)
	s.settle(60, nil)
	oldID := s.only(db, 0)[0].ID
	v2 := wl("db", 1, stateful, func(w *contract.WorkloadSpec) { w.Image = "img:db-v3" })
	s.desired = desiredOf(v2)
	rolledAt := s.f.Now()
	s.settle(60, func() {
		if n := len(s.only(v2, 0)); n > 2 { // a building placeholder beside the old one at most
			t.Fatalf("%d entries in a stateful slot", n)
		}
	})
	var stopAt, removeAt, createAt time.Time
	for _, e := range s.f.Events() {
		switch {
		case e.ID == oldID && e.Kind == fake.EventStop:
			stopAt = e.At
		case e.ID == oldID && e.Kind == fake.EventRemove:
			removeAt = e.At
		case e.ID != oldID && e.Kind == fake.EventCreate && e.At.After(rolledAt):
			createAt = e.At
		}
	}
	build := fake.DefaultTiming().Build
	if stopAt.Sub(rolledAt) < build {
		t.Errorf("the old container was stopped %v after the roll began, before the image was ready (%v)", stopAt.Sub(rolledAt), build)
	}
	if createAt.IsZero() || createAt.Before(removeAt) || createAt.Sub(removeAt) > 0 {
		t.Errorf("new container created at %v, old removed at %v: the gap must be only the start", createAt, removeAt)
	}
}

func TestConvergeCrashLoopBacksOffAndShowsInStatus(t *testing.T) {
	s := newSim(t, web1)
	s.f.SetBehaviour(up(web1), fake.Behaviour{CrashAfter: 100 * time.Millisecond, ExitCode: 2})
	var restarts []time.Time
	for range 200 {
		p := s.tick(100 * time.Millisecond)
		for _, st := range p.Steps {
			if st.Action == ActionRestart {
				restarts = append(restarts, s.f.Now())
			}
		}
	}
	if len(restarts) < 3 {
		t.Fatalf("restarts at %v", restarts)
	}
	// Gaps grow: the crash comes 100ms after each restart, the back-off
	// counts from it, so the gaps are 1.1s, 2.1s... beyond the immediate first.
	for i := 2; i < len(restarts); i++ {
		if restarts[i].Sub(restarts[i-1]) <= restarts[i-1].Sub(restarts[i-2]) {
			t.Errorf("back-off does not grow: restarts at %v", restarts)
		}
	}
	st := Status(s.desired, s.list(), s.h, s.f.Now())
	if len(st) != 1 || st[0].State != contract.StateCrashed || st[0].Restarts != len(restarts) || !st[0].CrashLoopUntil.After(s.f.Now()) {
		t.Errorf("status of a crash-looping container: %+v", st)
	}
}

func TestConvergeUnhealthyIsRestartedInPlace(t *testing.T) {
	s := newSim(t, web1)
	s.settle(60, nil)
	id := s.only(web1, 0)[0].ID
	if err := s.f.FailHealth(id, true); err != nil {
		t.Fatal(err)
	}
	var restarted bool
	for range 10 {
		for _, st := range s.tick(time.Second).Steps {
			restarted = restarted || (st.Action == ActionRestart && st.ContainerID == id)
		}
	}
	if !restarted {
		t.Fatal("an unhealthy container was not restarted")
	}
	if cs := s.only(web1, 0); len(cs) != 1 || cs[0].ID != id || !cs[0].Healthy {
		t.Errorf("after the restart in place: %+v", cs)
	}
}

func TestConvergeFailedRolloutKeepsTheOldServing(t *testing.T) {
	for _, b := range []fake.Behaviour{{NeverHealthy: true}, {CrashAfter: 500 * time.Millisecond, ExitCode: 1}} {
		t.Run(fmt.Sprintf("%+v", b), func(t *testing.T) { testFailedRollout(t, b) })
	}
}

func testFailedRollout(t *testing.T, b fake.Behaviour) {
	s := newSim(t, web1)
	s.settle(60, nil)
	oldID := s.only(web1, 0)[0].ID
	bad := wl("web", 1, func(w *contract.WorkloadSpec) { w.Image = "img:broken" })
	s.f.SetBehaviour(up(bad), b)
	s.desired = desiredOf(bad)
	for range 6*60 + 10 {
		s.tick(time.Second)
		if s.serving(bad, 0) != 1 {
			t.Fatalf("the slot stopped serving at %v", s.f.Now().Sub(t0))
		}
	}
	cs := s.only(bad, 0)
	if len(cs) != 1 || cs[0].ID != oldID {
		t.Fatalf("after the progress deadline: %+v", cs)
	}
	st := Status(s.desired, s.list(), s.h, s.f.Now())
	if !strings.Contains(st[0].RolloutFailure, "progress deadline") {
		t.Errorf("status does not say why: %+v", st)
	}
	// No new attempt for the failed spec...
	for range 30 {
		if p := s.tick(time.Second); len(p.Steps) != 0 {
			t.Fatalf("the failed spec was tried again: %v", render(p))
		}
	}
	// ...until the desired spec changes.
	fixed := wl("web", 1, func(w *contract.WorkloadSpec) { w.Image = "img:fixed" })
	s.desired = desiredOf(fixed)
	s.settle(60, nil)
	if cs := s.only(fixed, 0); len(cs) != 1 || cs[0].SpecHash != up(fixed) {
		t.Errorf("after a new spec: %+v", cs)
	}
	if st := Status(s.desired, s.list(), s.h, s.f.Now()); st[0].RolloutFailure != "" {
		t.Errorf("the old failure still shows: %+v", st)
	}
}
