package converge

import (
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

func TestDiffMinReady(t *testing.T) {
	w := wl("web", 1, func(w *contract.WorkloadSpec) { w.Rollout.MinReady = 10 * time.Second })
	actual := []containers.Container{ctr("s0", w, 0, old, contract.StateRunning), ctr("u0", w, 0, up(w), contract.StateRunning)}
	runDiffCases(t, []diffCase{
		{name: "healthy for less than min_ready: the stale one keeps serving",
			desired: desiredOf(w), actual: actual, history: healthySince(5*time.Second, "u0"), want: nil},
		{name: "healthy for min_ready: roll",
			desired: desiredOf(w), actual: actual, history: healthySince(10*time.Second, "u0"), want: []string{"roll web/0 s0"}},
		{name: "just seen healthy, no history: wait",
			desired: desiredOf(w), actual: actual, want: nil},
	})
}

func TestDiffHealthThreshold(t *testing.T) {
	w := wl("web", 1, func(w *contract.WorkloadSpec) { w.Health.StartPeriod = 2 * time.Minute })
	plain := wl("web", 1)
	wasHealthy := healthySince(time.Hour, "u0")
	runDiffCases(t, []diffCase{
		{name: "fewer failed checks than retries: still healthy, nothing happens",
			desired: desiredOf(plain), history: wasHealthy,
			actual: []containers.Container{ctr("u0", plain, 0, up(plain), contract.StateRunning, unhealthy(2))}},
		{name: "a failing check does not make the replacement ready, the stale one stays",
			desired: desiredOf(plain), history: wasHealthy,
			actual: []containers.Container{ctr("s0", plain, 0, old, contract.StateRunning),
				ctr("u0", plain, 0, up(plain), contract.StateRunning, unhealthy(1))}},
		{name: "retries consecutive failures after being healthy: restart in place",
			desired: desiredOf(plain), history: wasHealthy,
			actual: []containers.Container{ctr("u0", plain, 0, up(plain), contract.StateRunning, unhealthy(3))},
			want:   []string{"restart web/0 u0"}},
		{name: "an unhealthy replacement is restarted, the stale one keeps serving",
			desired: desiredOf(plain), history: wasHealthy,
			actual: []containers.Container{ctr("s0", plain, 0, old, contract.StateRunning),
				ctr("u0", plain, 0, up(plain), contract.StateRunning, unhealthy(3))},
			want: []string{"restart web/0 u0"}},
		{name: "failures during the start period do not count",
			desired: desiredOf(w), history: wasHealthy,
			actual: []containers.Container{ctr("u0", w, 0, up(w), contract.StateRunning, unhealthy(9))}},
		{name: "never healthy: still booting, not unhealthy",
			desired: desiredOf(plain),
			actual:  []containers.Container{ctr("u0", plain, 0, up(plain), contract.StateRunning, unhealthy(9))}},
		{name: "healthy in an earlier incarnation only: booting again",
			desired: desiredOf(plain), history: wasHealthy,
			actual: []containers.Container{ctr("u0", plain, 0, up(plain), contract.StateRunning, unhealthy(9), created(30*time.Second))}},
		{name: "a custom retries count",
			desired: desiredOf(wl("web", 1, func(w *contract.WorkloadSpec) { w.Health.Retries = 1 })), history: wasHealthy,
			actual: []containers.Container{ctr("u0", plain, 0, up(plain), contract.StateRunning, unhealthy(1))},
			want:   []string{"restart web/0 u0"}},
	})
}

func TestDiffCrashLoopBackoff(t *testing.T) {
	crashed := []containers.Container{ctr("u0", web1, 0, up(web1), contract.StateCrashed,
		func(c *containers.Container) { c.FinishedAt = t0.Add(-time.Hour) })}
	restarted := func(n int, ago time.Duration) *History {
		h := NewHistory()
		h.Containers["u0"] = ContainerHistory{Restarts: n, LastRestart: t0.Add(-ago)}
		return h
	}
	crashedJustNow := []containers.Container{ctr("u0", web1, 0, up(web1), contract.StateCrashed,
		func(c *containers.Container) { c.FinishedAt = t0.Add(-500 * time.Millisecond) })}
	runDiffCases(t, []diffCase{
		{name: "first crash: restart at once",
			desired: desiredOf(web1), actual: crashed, want: []string{"restart web/0 u0"}},
		{name: "after one restart: wait 1s",
			desired: desiredOf(web1), actual: crashed, history: restarted(1, 999*time.Millisecond)},
		{name: "after one restart, 1s later: restart",
			desired: desiredOf(web1), actual: crashed, history: restarted(1, time.Second), want: []string{"restart web/0 u0"}},
		{name: "after four restarts: wait 8s",
			desired: desiredOf(web1), actual: crashed, history: restarted(4, 7*time.Second)},
		{name: "after four restarts, 8s later: restart",
			desired: desiredOf(web1), actual: crashed, history: restarted(4, 8*time.Second), want: []string{"restart web/0 u0"}},
		{name: "the back-off counts from the last exit when it is later",
			desired: desiredOf(web1), actual: crashedJustNow, history: restarted(1, time.Hour)},
		{name: "capped at 5 minutes",
			desired: desiredOf(web1), actual: crashed, history: restarted(40, 5*time.Minute), want: []string{"restart web/0 u0"}},
		{name: "not before 5 minutes",
			desired: desiredOf(web1), actual: crashed, history: restarted(40, 5*time.Minute-time.Second)},
	})
}

func TestBackoffSequence(t *testing.T) {
	want := []time.Duration{0, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
	for n, w := range want {
		if got := backoff(n); got != w {
			t.Errorf("backoff(%d) = %v, want %v", n, got, w)
		}
	}
	for _, n := range []int{10, 11, 64, 1 << 30} {
		if got := backoff(n); got != BackoffMax {
			t.Errorf("backoff(%d) = %v, want the cap %v", n, got, BackoffMax)
		}
	}
	if backoff(8) != 128*time.Second {
		t.Errorf("backoff(8) = %v", backoff(8))
	}
}

func TestDiffProgressDeadline(t *testing.T) {
	late := created(5*time.Minute + time.Second)
	hash := up(web1)
	failedBefore := func() *History {
		h := NewHistory()
		h.FailedRollouts[web1.ID()] = FailedRollout{SpecHash: hash, Reason: "earlier"}
		return h
	}
	runDiffCases(t, []diffCase{
		{name: "a replacement not healthy by the deadline is stopped, the stale one keeps serving",
			desired: desiredOf(web1),
			actual: []containers.Container{ctr("s0", web1, 0, old, contract.StateRunning),
				ctr("u0", web1, 0, hash, contract.StateRunning, unhealthy(100), late)},
			want: []string{"stop web/0 u0"}, fails: []string{"default/shop/web: not healthy within the progress deadline (5m0s)"}},
		{name: "before the deadline: wait",
			desired: desiredOf(web1),
			actual: []containers.Container{ctr("s0", web1, 0, old, contract.StateRunning),
				ctr("u0", web1, 0, hash, contract.StateRunning, unhealthy(100), created(4*time.Minute))}},
		{name: "a crash-looping replacement past the deadline is stopped too",
			desired: desiredOf(web1),
			actual: []containers.Container{ctr("s0", web1, 0, old, contract.StateRunning),
				ctr("u0", web1, 0, hash, contract.StateCrashed, late)},
			want: []string{"stop web/0 u0"}, fails: []string{"progress deadline"}},
		{name: "after a failure, no new attempt for that spec in a serving slot",
			desired: desiredOf(web1), history: failedBefore(),
			actual: []containers.Container{ctr("s0", web1, 0, old, contract.StateRunning)}},
		{name: "after a failure, another replacement of that spec is stopped",
			desired: desiredOf(web1), history: failedBefore(),
			actual: []containers.Container{ctr("s0", web1, 0, old, contract.StateRunning),
				ctr("u0", web1, 0, hash, contract.StateRunning, unhealthy(1))},
			want: []string{"stop web/0 u0"}},
		{name: "after a failure, the fallback is restarted if it crashes",
			desired: desiredOf(web1), history: failedBefore(),
			actual: []containers.Container{ctr("s0", web1, 0, old, contract.StateCrashed)},
			want:   []string{"restart web/0 s0"}},
		{name: "after a failure, an empty slot is still filled",
			desired: desiredOf(web), history: failedBefore(),
			actual: []containers.Container{ctr("s0", web, 0, old, contract.StateRunning)},
			want:   []string{"start web/1"}},
		{name: "a failure of another spec does not hold this one back",
			desired: desiredOf(wl("web", 1, func(w *contract.WorkloadSpec) { w.Revision = 9 })), history: failedBefore(),
			actual: []containers.Container{ctr("s0", web1, 0, old, contract.StateRunning)},
			want:   []string{"start web/0"}},
		{name: "no stale one to fall back on: kept, restarted under back-off, reported",
			desired: desiredOf(web1),
			actual:  []containers.Container{ctr("u0", web1, 0, hash, contract.StateRunning, unhealthy(100), late)},
			want:    []string{"restart web/0 u0"}, fails: []string{"progress deadline"}},
		{name: "an already reported failure is not reported again",
			desired: desiredOf(web1), history: failedBefore(),
			actual: []containers.Container{ctr("u0", web1, 0, hash, contract.StateRunning, unhealthy(100), late)},
			want:   []string{"restart web/0 u0"}},
		{name: "past the deadline, but no check has failed yet (an agent started without its memory): wait for one",
			desired: desiredOf(web1),
			actual:  []containers.Container{ctr("u0", web1, 0, hash, contract.StateRunning, unhealthy(0), late)}},
		{name: "past the deadline, no check failed yet, a stale one beside: wait for one",
			desired: desiredOf(web1),
			actual: []containers.Container{ctr("s0", web1, 0, old, contract.StateRunning),
				ctr("u0", web1, 0, hash, contract.StateRunning, unhealthy(0), late)}},
		{name: "a stateful slot past the deadline, no check failed yet: wait for one",
			desired: desiredOf(wl("web", 1, stateful)),
			actual:  []containers.Container{ctr("u0", wl("web", 1, stateful), 0, up(wl("web", 1, stateful)), contract.StateRunning, unhealthy(0), late)}},
		{name: "a stateful slot past the deadline, a check failed: restarted, reported",
			desired: desiredOf(wl("web", 1, stateful)),
			actual:  []containers.Container{ctr("u0", wl("web", 1, stateful), 0, up(wl("web", 1, stateful)), contract.StateRunning, unhealthy(1), late)},
			want:    []string{"restart web/0 u0"}, fails: []string{"progress deadline"}},
		{name: "a custom deadline",
			desired: desiredOf(wl("web", 1, func(w *contract.WorkloadSpec) { w.Rollout.ProgressDeadline = time.Minute })),
			actual: []containers.Container{ctr("s0", web1, 0, old, contract.StateRunning),
				ctr("u0", web1, 0, hash, contract.StateRunning, unhealthy(100), created(time.Minute))},
			want: []string{"stop web/0 u0"}, fails: []string{"(1m0s)"}},
	})
}

func TestDiffRestartPolicy(t *testing.T) {
	job := func(p contract.RestartPolicy) contract.WorkloadSpec {
		return wl("job", 1, func(w *contract.WorkloadSpec) { w.Restart = p })
	}
	one := func(p contract.RestartPolicy, state contract.ContainerState) []containers.Container {
		return []containers.Container{ctr("j0", job(p), 0, up(job(p)), state)}
	}
	runDiffCases(t, []diffCase{
		{name: "no: a completed run is left alone, kept for its logs",
			desired: desiredOf(job(contract.RestartNo)), actual: one(contract.RestartNo, contract.StateCompleted)},
		{name: "no: a failed run is not retried",
			desired: desiredOf(job(contract.RestartNo)), actual: one(contract.RestartNo, contract.StateCrashed)},
		{name: "on-failure: a failed run is retried",
			desired: desiredOf(job(contract.RestartOnFailure)), actual: one(contract.RestartOnFailure, contract.StateCrashed),
			want: []string{"restart job/0 j0"}},
		{name: "on-failure: a completed run is left alone",
			desired: desiredOf(job(contract.RestartOnFailure)), actual: one(contract.RestartOnFailure, contract.StateCompleted)},
		{name: "always: even a completed run is restarted",
			desired: desiredOf(job(contract.RestartAlways)), actual: one(contract.RestartAlways, contract.StateCompleted),
			want: []string{"restart job/0 j0"}},
		{name: "any policy: a container that never ran to an exit is started",
			desired: desiredOf(job(contract.RestartNo)), actual: one(contract.RestartNo, contract.StateStopped),
			want: []string{"restart job/0 j0"}},
		{name: "no: a new spec runs once again, the old run is removed",
			desired: desiredOf(job(contract.RestartNo)),
			actual:  []containers.Container{ctr("j0", job(contract.RestartNo), 0, old, contract.StateCompleted)},
			want:    []string{"stop job/0 j0", "start job/0"}},
		{name: "no: once the new run completed, a still-running old one goes",
			desired: desiredOf(job(contract.RestartNo)),
			actual: []containers.Container{ctr("j0", job(contract.RestartNo), 0, old, contract.StateRunning),
				ctr("j1", job(contract.RestartNo), 0, up(job(contract.RestartNo)), contract.StateCompleted)},
			want: []string{"roll job/0 j0"}},
	})
}

func TestDiffStateful(t *testing.T) {
	hash := up(db)
	stopFirst := wl("q", 2, func(w *contract.WorkloadSpec) { w.Rollout.Order = contract.StopFirst })
	runDiffCases(t, []diffCase{
		{name: "empty: start",
			desired: desiredOf(db), want: []string{"start db/0"}},
		{name: "stale: one replace, stopping the old only once the new image is ready",
			desired: desiredOf(db), actual: []containers.Container{ctr("s0", db, 0, old, contract.StateRunning)},
			want: []string{"replace db/0 s0"}},
		{name: "a replace in progress: wait",
			desired: desiredOf(db), actual: []containers.Container{ctr("s0", db, 0, old, contract.StateRunning),
				ctr("", db, 0, hash, contract.StateBuilding)}},
		{name: "a container still being stopped holds the volume: wait",
			desired: desiredOf(db), actual: []containers.Container{ctr("s0", db, 0, old, contract.StateDraining)}},
		{name: "two containers on the volume: keep the up-to-date healthy one, stop the other",
			desired: desiredOf(db), actual: []containers.Container{ctr("s0", db, 0, old, contract.StateRunning),
				ctr("u0", db, 0, hash, contract.StateRunning)},
			want: []string{"stop db/0 s0"}},
		{name: "up to date and crashed: restart",
			desired: desiredOf(db), actual: []containers.Container{ctr("u0", db, 0, hash, contract.StateCrashed)},
			want: []string{"restart db/0 u0"}},
		{name: "stop-first without a volume: replace within the surge limit",
			desired: desiredOf(stopFirst), actual: []containers.Container{ctr("s0", stopFirst, 0, old, contract.StateRunning),
				ctr("s1", stopFirst, 1, old, contract.StateRunning)},
			want: []string{"replace q/0 s0"}},
		{name: "stop-first: the next slot waits until the replaced one is ready",
			desired: desiredOf(stopFirst), actual: []containers.Container{ctr("u0", stopFirst, 0, up(stopFirst), contract.StateStarting),
				ctr("s1", stopFirst, 1, old, contract.StateRunning)}},
		{name: "stop-first: then it rolls",
			desired: desiredOf(stopFirst), actual: []containers.Container{ctr("u0", stopFirst, 0, up(stopFirst), contract.StateRunning),
				ctr("s1", stopFirst, 1, old, contract.StateRunning)},
			want: []string{"replace q/1 s1"}},
		{name: "cold: a serving stateful container is drained",
			desired: desiredOf(wl("db", 0, stateful)), actual: []containers.Container{ctr("u0", db, 0, hash, contract.StateRunning)},
			want: []string{"drain db/0 u0"}},
	})
}

// TestDiffHealthRestartsAreLimitedToMaxSurge: a prober starved on a busy host
// fails every replica at once; restarting them all would take the whole egg
// out of traffic. Health restarts go max_surge at a time, counting replicas
// still booting; crashed ones (already out) are not held back.
func TestDiffHealthRestartsAreLimitedToMaxSurge(t *testing.T) {
	surge1 := wl("web", 4, func(w *contract.WorkloadSpec) { w.Rollout.MaxSurge = 1 })
	surge2 := wl("web", 4, func(w *contract.WorkloadSpec) { w.Rollout.MaxSurge = 2 })
	sick := func(w contract.WorkloadSpec, slots ...int) []containers.Container {
		var cs []containers.Container
		for _, i := range slots {
			id := "u" + string(rune('0'+i))
			cs = append(cs, ctr(id, w, i, up(w), contract.StateRunning, unhealthy(3)))
		}
		return cs
	}
	wasHealthy := healthySince(time.Hour, "u0", "u1", "u2", "u3")
	booting := func(w contract.WorkloadSpec) containers.Container {
		return ctr("u3", w, 3, up(w), contract.StateRunning, unhealthy(0), created(5*time.Second))
	}
	runDiffCases(t, []diffCase{
		{name: "max_surge 1: one of four unhealthy replicas at a time, lowest slot first",
			desired: desiredOf(surge1), history: wasHealthy, actual: sick(surge1, 0, 1, 2, 3),
			want: []string{"restart web/0 u0"}},
		{name: "max_surge 2: two at a time",
			desired: desiredOf(surge2), history: wasHealthy, actual: sick(surge2, 0, 1, 2, 3),
			want: []string{"restart web/0 u0", "restart web/1 u1"}},
		{name: "a replica still booting from its restart uses the budget",
			desired: desiredOf(surge1), history: wasHealthy, actual: append(sick(surge1, 0, 1, 2), booting(surge1)),
			want: nil},
		{name: "crashed replicas are restarted beside a health restart",
			desired: desiredOf(surge1), history: wasHealthy,
			actual: append(sick(surge1, 0, 1), ctr("u2", surge1, 2, up(surge1), contract.StateCrashed),
				ctr("u3", surge1, 3, up(surge1), contract.StateCrashed)),
			want: []string{"restart web/0 u0", "restart web/2 u2", "restart web/3 u3"}},
	})
}
