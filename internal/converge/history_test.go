package converge

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

func TestObserveTracksHealthStreaks(t *testing.T) {
	h := NewHistory()
	c := ctr("u0", web1, 0, up(web1), contract.StateRunning)
	d := desiredOf(web1)

	h.Observe(d, []containers.Container{c}, t0)
	got := h.Containers["u0"]
	if !got.HealthySince.Equal(t0) || !got.HealthyStart.Equal(c.StartedAt) {
		t.Fatalf("first healthy sighting: %+v", got)
	}
	h.Observe(d, []containers.Container{c}, t0.Add(time.Minute))
	if got := h.Containers["u0"]; !got.HealthySince.Equal(t0) {
		t.Errorf("a continuing streak restarted: %+v", got)
	}
	// Two failed checks of three: still healthy, the streak goes on.
	c.Healthy, c.FailingStreak = false, 2
	h.Observe(d, []containers.Container{c}, t0.Add(2*time.Minute))
	if got := h.Containers["u0"]; !got.HealthySince.Equal(t0) {
		t.Errorf("a failure below the threshold broke the streak: %+v", got)
	}
	c.FailingStreak = 3
	h.Observe(d, []containers.Container{c}, t0.Add(3*time.Minute))
	if got := h.Containers["u0"]; !got.HealthySince.IsZero() || !got.HealthyStart.Equal(c.StartedAt) {
		t.Errorf("unhealthy: %+v", got)
	}
}

func TestObserveResetsTheBackoffAfterTenMinutesHealthy(t *testing.T) {
	h := NewHistory()
	h.Containers["u0"] = ContainerHistory{Restarts: 6, LastRestart: t0.Add(-time.Hour)}
	c := ctr("u0", web1, 0, up(web1), contract.StateRunning)
	d := desiredOf(web1)
	h.Observe(d, []containers.Container{c}, t0)
	h.Observe(d, []containers.Container{c}, t0.Add(BackoffReset-time.Second))
	if h.Containers["u0"].Restarts != 6 {
		t.Fatal("reset before ten minutes healthy")
	}
	h.Observe(d, []containers.Container{c}, t0.Add(BackoffReset))
	if got := h.Containers["u0"]; got.Restarts != 0 || !got.LastRestart.IsZero() {
		t.Errorf("not reset after ten minutes healthy: %+v", got)
	}
}

func TestObserveForgetsWhatIsGone(t *testing.T) {
	h := NewHistory()
	h.Containers["gone"] = ContainerHistory{Restarts: 2}
	h.FailedRollouts[web1.ID()] = FailedRollout{SpecHash: "an older spec"}
	h.FailedRollouts["default/shop/api"] = FailedRollout{SpecHash: "x"}
	h.FailedRollouts["default/shop/db"] = FailedRollout{SpecHash: up(db)}
	foreign := ctr("f", web1, 0, old, contract.StateRunning, func(c *containers.Container) { c.Labels = nil })
	h.Observe(desiredOf(web1, db), []containers.Container{foreign}, t0)
	if len(h.Containers) != 0 {
		t.Errorf("kept history of gone or foreign containers: %+v", h.Containers)
	}
	if _, ok := h.FailedRollouts["default/shop/db"]; !ok || len(h.FailedRollouts) != 1 {
		t.Errorf("failed rollouts kept: %+v", h.FailedRollouts)
	}
}

func TestRecordCountsRestartsAndFirstFailures(t *testing.T) {
	var h History // the zero value works
	h.Record(Step{Action: ActionRestart, ContainerID: "u0"}, t0)
	h.Record(Step{Action: ActionStop, ContainerID: "u0"}, t0)
	h.Record(Step{Action: ActionRestart, ContainerID: "u0"}, t0.Add(time.Second))
	if got := h.Containers["u0"]; got.Restarts != 2 || !got.LastRestart.Equal(t0.Add(time.Second)) {
		t.Errorf("restarts: %+v", got)
	}
	h.RecordFailure(Failure{WorkloadID: "w", SpecHash: "a", Reason: "first"}, t0)
	h.RecordFailure(Failure{WorkloadID: "w", SpecHash: "a", Reason: "again"}, t0.Add(time.Hour))
	if f := h.FailedRollouts["w"]; f.Reason != "first" || !f.At.Equal(t0) {
		t.Errorf("a repeated failure overwrote the first: %+v", f)
	}
	h.RecordFailure(Failure{WorkloadID: "w", SpecHash: "b", Reason: "new spec"}, t0)
	if f := h.FailedRollouts["w"]; f.SpecHash != "b" {
		t.Errorf("a failure of a new spec was not recorded: %+v", f)
	}
}

func TestHistorySurvivesJSON(t *testing.T) {
	h := NewHistory()
	h.Containers["u0"] = ContainerHistory{Restarts: 3, LastRestart: t0, HealthyStart: t0}
	h.FailedRollouts["w"] = FailedRollout{SpecHash: "a", Reason: "r", At: t0}
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var got History
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Containers["u0"].Restarts != 3 || !got.Containers["u0"].LastRestart.Equal(t0) || got.FailedRollouts["w"].Reason != "r" {
		t.Errorf("round trip: %+v", got)
	}
}

func TestStatus(t *testing.T) {
	h := NewHistory()
	h.Containers["u0"] = ContainerHistory{Restarts: 3, LastRestart: t0.Add(-time.Second)}
	h.FailedRollouts[web.ID()] = FailedRollout{SpecHash: up(web), Reason: "not healthy within the progress deadline (5m0s)"}
	actual := []containers.Container{
		ctr("u0", web, 0, up(web), contract.StateCrashed, func(c *containers.Container) { c.FinishedAt = t0.Add(-2 * time.Second) }),
		ctr("s1", web, 1, old, contract.StateRunning),
		ctr("f", web, 1, old, contract.StateRunning, func(c *containers.Container) { c.Labels = nil }),
	}
	st := Status(desiredOf(web), actual, h, t0)
	if len(st) != 2 {
		t.Fatalf("status: %+v", st)
	}
	crash := st[0]
	if crash.Restarts != 3 || !crash.CrashLoopUntil.Equal(t0.Add(3*time.Second)) || crash.Healthy || crash.State != contract.StateCrashed {
		t.Errorf("crash-looping: %+v", crash)
	}
	if crash.RolloutFailure == "" || st[1].RolloutFailure == "" {
		t.Errorf("the failed rollout does not show on the workload's containers: %+v", st)
	}
	if !st[1].Healthy || !st[1].CrashLoopUntil.IsZero() || st[1].Slot != 1 {
		t.Errorf("serving: %+v", st[1])
	}
}

// Issue 26: an agent killed between Docker's create and start leaves a
// container that never ran. Starting it is its first start, not a restart
// after a crash: no restart is counted (the status said RESTARTS 1), no
// back-off follows, and the reason says what happened.
func TestAContainerThatNeverStartedIsStartedNotCountedAsACrash(t *testing.T) {
	w := wl("web", 1)
	c := ctr("n", w, 0, up(w), contract.StateStopped, func(c *containers.Container) { c.StartedAt, c.FinishedAt = time.Time{}, time.Time{} })
	h := NewHistory()
	plan := Diff(desiredOf(w), []containers.Container{c}, h, t0)
	equalSteps(t, plan, []string{"restart web/0 n"})
	if s := plan.Steps[0]; s.Reason != "never started" || !s.NeverStarted {
		t.Errorf("step %+v: want reason \"never started\", marked so", s)
	}
	h.Record(plan.Steps[0], t0)
	if n := h.Containers["n"].Restarts; n != 0 {
		t.Errorf("restarts = %d, want 0: it never ran, so it never crashed", n)
	}

	// One that ran and stopped is restarted, and counted, as before.
	ran := ctr("r", w, 0, up(w), contract.StateCrashed)
	plan = Diff(desiredOf(w), []containers.Container{ran}, h, t0)
	equalSteps(t, plan, []string{"restart web/0 r"})
	h.Record(plan.Steps[0], t0)
	if s, n := plan.Steps[0], h.Containers["r"].Restarts; s.Reason != "crashed" || n != 1 {
		t.Errorf("a crash: reason %q, restarts %d; want crashed, 1", s.Reason, n)
	}
}
