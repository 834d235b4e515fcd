package converge

import (
	"errors"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

// A start whose image the registry refused, with the login the workload
// still has, fails the rollout: the diff makes no new attempt while the
// old container serves, and the report carries the registry's words at the
// new spec, though no container of it exists. A new login is a new attempt.
func TestARefusedPullFailsTheRolloutUntilTheLoginChanges(t *testing.T) {
	login := func(handle string) func(*contract.WorkloadSpec) {
		return func(w *contract.WorkloadSpec) {
			w.PullAuth = &contract.RegistryAuth{Registry: "ghcr.io", Username: "ci", Handle: handle, Password: "pw"}
		}
	}
	web := wl("web", 1, login("h1"))
	d := desiredOf(web)
	running := ctr("c1", web, 0, old, contract.StateRunning)
	refused := &containers.ImageError{Image: web.Image, Registry: "ghcr.io", Reason: "unauthorized: authentication required", Login: "h1"}
	startFailed := func(err error, hash string) containers.TaskFailure {
		task := containers.StartTask(containers.StartRequest{HostID: host, Spec: web, SpecHash: hash, Slot: 0, Replace: "c1"}, "n-new", t0)
		return containers.TaskFailure{Task: task, Err: err, At: t0, Count: 1}
	}

	if got := ImageFailures(d, []containers.TaskFailure{startFailed(errors.New("pull: i/o timeout"), up(web))}); len(got) != 0 {
		t.Fatalf("a pull that may work next time is a failed rollout: %+v", got)
	}
	if got := ImageFailures(d, []containers.TaskFailure{startFailed(refused, old)}); len(got) != 0 {
		t.Fatalf("a refusal at a spec no longer desired is a failed rollout: %+v", got)
	}
	failures := ImageFailures(d, []containers.TaskFailure{startFailed(refused, up(web))})
	if len(failures) != 1 || failures[0].WorkloadID != web.ID() || failures[0].SpecHash != up(web) || !failures[0].Image ||
		failures[0].Reason != refused.Error() {
		t.Fatalf("failures %+v, want web's rollout failed with the registry's words", failures)
	}

	h := NewHistory()
	h.Observe(d, []containers.Container{running}, t0)
	for _, f := range failures {
		h.RecordFailure(f, t0)
	}
	if plan := Diff(d, []containers.Container{running}, h, t0.Add(time.Second)); len(plan.Steps) != 0 {
		t.Errorf("after the refusal the diff still plans %v: the old container must keep serving", render(plan))
	}
	st := Status(d, []containers.Container{running}, h, t0)
	var atNew *contract.ContainerStatus
	for i := range st {
		if st[i].SpecHash == up(web) {
			atNew = &st[i]
		}
	}
	if atNew == nil || atNew.ContainerID != "" || atNew.RolloutFailure != refused.Error() || !web.Current(up(web), *atNew) {
		t.Fatalf("status %+v: want an entry at the new spec carrying the registry's refusal", st)
	}

	// The user fixes the login: the same spec, a new password handle.
	fixed := wl("web", 1, login("h2"))
	d2 := desiredOf(fixed)
	if fixed.Current(up(fixed), *atNew) {
		t.Error("a report of the refusal of the old login counts against the new one")
	}
	if ImageFailures(d2, []containers.TaskFailure{startFailed(refused, up(fixed))}) != nil {
		t.Error("a refusal of the old login fails the rollout with the new one")
	}
	h.Observe(d2, []containers.Container{running}, t0.Add(time.Minute))
	if _, failed := h.failed(fixed.ID()); failed {
		t.Error("the failure outlived the login it was made with")
	}
	if plan := Diff(d2, []containers.Container{running}, h, t0.Add(time.Minute)); len(plan.Steps) != 1 || plan.Steps[0].Action != ActionStart {
		t.Errorf("with a new login the diff plans %v, want a new start", render(plan))
	}
}
