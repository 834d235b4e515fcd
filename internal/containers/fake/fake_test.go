package fake

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

var (
	t0  = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ctx = context.Background()
	web = contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: "web", Image: "nginx", Replicas: 2}
)

func newFake() *Fake { return New("h1", t0, DefaultTiming()) }

func list(t *testing.T, f *Fake) []containers.Container {
	t.Helper()
	cs, err := f.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func only(t *testing.T, f *Fake) containers.Container {
	t.Helper()
	cs := list(t, f)
	if len(cs) != 1 {
		t.Fatalf("want one container, got %+v", cs)
	}
	return cs[0]
}

func TestStartGoesThroughBuildingStartingRunningHealthy(t *testing.T) {
	f := newFake()
	req := containers.StartRequest{HostID: "h1", Spec: web, SpecHash: "v1", Slot: 1}
	if err := f.Start(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := f.Start(ctx, req); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		after   time.Duration
		state   contract.ContainerState
		healthy bool
	}{
		{0, contract.StateBuilding, false},
		{2 * time.Second, contract.StateStarting, false}, // built at 2s, boots for 1s
		{time.Second, contract.StateRunning, false},      // running at 3s, healthy 2s after start
		{time.Second, contract.StateRunning, true},
	}
	for _, s := range steps {
		f.Advance(s.after)
		c := only(t, f)
		if c.State != s.state || c.Healthy != s.healthy {
			t.Fatalf("at %v: %s healthy=%v, want %s healthy=%v", f.Now().Sub(t0), c.State, c.Healthy, s.state, s.healthy)
		}
		if c.Slot != 1 || c.SpecHash != "v1" || c.WorkloadID != "default/shop/web" || !containers.Owned(c.Labels, "h1") {
			t.Fatalf("identity: %+v", c)
		}
	}
	if n := len(f.All()); n != 1 {
		t.Errorf("a repeated start created %d containers", n)
	}
}

func TestDrainStopAndRestart(t *testing.T) {
	f := newFake()
	id := f.Add(containers.Container{Labels: containers.Labels("h1", web, 0, "v1"), State: contract.StateRunning, Healthy: true})

	if err := f.Drain(ctx, containers.StopRequest{ID: id}); err != nil {
		t.Fatal(err)
	}
	if c := only(t, f); c.State != contract.StateDraining || c.Healthy {
		t.Errorf("draining container shows %s healthy=%v", c.State, c.Healthy)
	}
	f.Advance(2*time.Second + 999*time.Millisecond)
	if len(list(t, f)) != 1 {
		t.Error("removed before drain and stop time")
	}
	f.Advance(time.Millisecond)
	if len(list(t, f)) != 0 {
		t.Error("still there after drain and stop time")
	}
	if err := f.Stop(ctx, containers.StopRequest{ID: id}); err != nil {
		t.Errorf("stopping a container already gone: %v", err)
	}

	id = f.Add(containers.Container{Labels: containers.Labels("h1", web, 0, "v1"), State: contract.StateCrashed, ExitCode: 2})
	c := only(t, f)
	if c.State != contract.StateCrashed || c.ExitCode != 2 {
		t.Fatalf("added crashed: %+v", c)
	}
	if err := f.Restart(ctx, containers.RestartRequest{ID: id, StartedAt: c.StartedAt}); err != nil {
		t.Fatal(err)
	}
	restarted := only(t, f)
	if restarted.State != contract.StateStarting || !restarted.StartedAt.After(c.StartedAt) || restarted.ExitCode != 0 {
		t.Errorf("an exited container restarts at once: %+v", restarted)
	}
	f.Advance(time.Second)
	// A second restart for the incarnation already restarted does nothing.
	if err := f.Restart(ctx, containers.RestartRequest{ID: id, StartedAt: c.StartedAt}); err != nil {
		t.Fatal(err)
	}
	if got := only(t, f); !got.StartedAt.Equal(restarted.StartedAt) {
		t.Errorf("a stale restart restarted again: %+v", got)
	}

	if err := f.Stop(ctx, containers.StopRequest{ID: id}); err != nil {
		t.Fatal(err)
	}
	f.Advance(time.Second)
	if len(list(t, f)) != 0 {
		t.Error("stop did not remove a running container after its stop time")
	}
}

func TestStartWithReplaceStopsTheOldOnlyOnceTheImageIsReady(t *testing.T) {
	f := newFake()
	old := f.Add(containers.Container{Labels: containers.Labels("h1", web, 0, "v1"), State: contract.StateRunning, Healthy: true})
	if err := f.Start(ctx, containers.StartRequest{HostID: "h1", Spec: web, SpecHash: "v2", Slot: 0, Replace: old}); err != nil {
		t.Fatal(err)
	}
	f.Advance(time.Second) // still building: the old one serves
	cs := list(t, f)
	if len(cs) != 2 || cs[0].ID != old || cs[0].State != contract.StateRunning || !cs[0].Healthy || cs[1].State != contract.StateBuilding {
		t.Fatalf("during the build: %+v", cs)
	}
	f.Advance(2 * time.Second) // built at 2s, old stopped by 3s, new created at 3s
	c := only(t, f)
	if c.SpecHash != "v2" || c.ID == old {
		t.Fatalf("after the replace: %+v", c)
	}
	var kinds []EventKind
	for _, e := range f.Events() {
		kinds = append(kinds, e.Kind)
	}
	want := []EventKind{EventStop, EventRemove, EventCreate}
	if len(kinds) != 3 || kinds[0] != want[0] || kinds[1] != want[1] || kinds[2] != want[2] {
		t.Errorf("events %v, want %v", kinds, want)
	}
}

func TestForeignContainersAreInvisibleAndUntouchable(t *testing.T) {
	f := newFake()
	other := containers.Labels("h2", web, 0, "v1")
	unmanaged := map[string]string{"com.example": "x"}
	ids := []string{
		f.Add(containers.Container{Labels: other, State: contract.StateRunning}),
		f.Add(containers.Container{Labels: unmanaged, State: contract.StateCrashed}),
		f.Add(containers.Container{State: contract.StateRunning}),
	}
	if cs := list(t, f); len(cs) != 0 {
		t.Fatalf("foreign containers listed: %+v", cs)
	}
	for _, id := range ids {
		for _, err := range []error{
			f.Stop(ctx, containers.StopRequest{ID: id}),
			f.Drain(ctx, containers.StopRequest{ID: id}),
			f.Restart(ctx, containers.RestartRequest{ID: id}),
			f.Start(ctx, containers.StartRequest{HostID: "h1", Spec: web, SpecHash: "v", Replace: id}),
		} {
			if !errors.Is(err, containers.ErrNotFound) {
				t.Errorf("a call on foreign %s: %v", id, err)
			}
		}
	}
	f.Advance(time.Hour)
	if len(f.All()) != 3 || len(f.ForeignCalls()) != 12 {
		t.Errorf("foreign containers touched: %d left, calls %v", len(f.All()), f.ForeignCalls())
	}
	if err := f.Start(ctx, containers.StartRequest{HostID: "h2", Spec: web, SpecHash: "v"}); err == nil {
		t.Error("a start for another host was accepted")
	}
}

func TestFaultsCrashesAndFailingHealth(t *testing.T) {
	f := newFake()
	boom := errors.New("boom")
	f.SetFault(func(op Op, target string) error {
		if op == OpStart {
			return boom
		}
		return nil
	})
	if err := f.Start(ctx, containers.StartRequest{HostID: "h1", Spec: web, SpecHash: "v1"}); !errors.Is(err, boom) {
		t.Fatalf("injected error not returned: %v", err)
	}
	if f.Pending() || len(list(t, f)) != 0 {
		t.Fatal("a failed call did some work")
	}
	f.SetFault(nil)

	f.SetBehaviour("bad", Behaviour{CrashAfter: 5 * time.Second, ExitCode: 3})
	if err := f.Start(ctx, containers.StartRequest{HostID: "h1", Spec: web, SpecHash: "bad"}); err != nil {
		t.Fatal(err)
	}
	f.Advance(6 * time.Second) // created at 2s, running and healthy at 4s
	if c := only(t, f); c.State != contract.StateRunning || !c.Healthy {
		t.Fatalf("before the crash: %+v", c)
	}
	f.Advance(time.Second)
	if c := only(t, f); c.State != contract.StateCrashed || c.ExitCode != 3 {
		t.Fatalf("after CrashAfter: %+v", c)
	}

	id := f.Add(containers.Container{Labels: containers.Labels("h1", web, 1, "v1"), State: contract.StateRunning, Healthy: true})
	if err := f.FailHealth(id, true); err != nil {
		t.Fatal(err)
	}
	f.Advance(2 * time.Second)
	c := list(t, f)[1]
	if c.Healthy || c.FailingStreak != 3 || c.State != contract.StateRunning {
		t.Errorf("failing health: %+v", c)
	}
	_ = f.FailHealth(id, false)
	if c := list(t, f)[1]; !c.Healthy || c.FailingStreak != 0 {
		t.Errorf("healed: %+v", c)
	}
	if err := f.Crash(id, 0); err != nil {
		t.Fatal(err)
	}
	if c := list(t, f)[1]; c.State != contract.StateCompleted {
		t.Errorf("exit 0 shows %s", c.State)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := f.List(cancelled); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled context was ignored: %v", err)
	}
}

func TestLogs(t *testing.T) {
	f := newFake()
	id := f.Add(containers.Container{Labels: containers.Labels("h1", web, 0, "v1"), State: contract.StateCrashed})
	f.SetLogs(id, []string{"a", "b", "c"})
	got, err := f.Logs(ctx, id, 2)
	if err != nil || len(got) != 2 || got[0] != "b" || got[1] != "c" {
		t.Errorf("logs: %v %v", got, err)
	}
	if _, err := f.Logs(ctx, "nope", 2); !errors.Is(err, containers.ErrNotFound) {
		t.Errorf("logs of a missing container: %v", err)
	}
}
