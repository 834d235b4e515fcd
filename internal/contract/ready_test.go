package contract

import "testing"

func TestReplicaReadiness(t *testing.T) {
	w := func(restart RestartPolicy) WorkloadSpec {
		return WorkloadSpec{Namespace: "default", Project: "shop", Egg: "job", Image: "j:1", Replicas: 2, Restart: restart}
	}
	c := func(state ContainerState, healthy bool) ContainerStatus {
		return ContainerStatus{WorkloadID: "default/shop/job", State: state, Healthy: healthy}
	}
	for _, tc := range []struct {
		name                    string
		w                       WorkloadSpec
		c                       ContainerStatus
		ready, finished, failed bool
	}{
		{"running and healthy", w(""), c(StateRunning, true), true, false, false},
		{"running, not yet healthy", w(""), c(StateRunning, false), false, false, false},
		{"starting", w(""), c(StateStarting, false), false, false, false},
		{"draining", w(""), c(StateDraining, true), false, false, false},
		{"exited 0 under always: it starts again", w(RestartAlways), c(StateCompleted, false), false, false, false},
		{"exited 0 under on-failure: a finished job", w(RestartOnFailure), c(StateCompleted, false), true, true, false},
		{"exited 0 under no: a finished job", w(RestartNo), c(StateCompleted, false), true, true, false},
		{"crashed under no: failed for good", w(RestartNo), c(StateCrashed, false), false, false, true},
		{"crashed under on-failure: it starts again", w(RestartOnFailure), c(StateCrashed, false), false, false, false},
		{"stopped under no: not finished", w(RestartNo), c(StateStopped, false), false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.w.ReplicaReady(tc.c); got != tc.ready {
				t.Errorf("ReplicaReady = %v, want %v", got, tc.ready)
			}
			if got := tc.w.Finished(tc.c); got != tc.finished {
				t.Errorf("Finished = %v, want %v", got, tc.finished)
			}
			if got := tc.w.Failed(tc.c); got != tc.failed {
				t.Errorf("Failed = %v, want %v", got, tc.failed)
			}
		})
	}
}

func TestCurrentIsTheWorkloadAtItsSpecInASlotBelowTheReplicas(t *testing.T) {
	w := WorkloadSpec{Namespace: "default", Project: "shop", Egg: "web", Image: "web:1", Replicas: 2}
	hash := SpecHash(w)
	for _, tc := range []struct {
		name string
		c    ContainerStatus
		want bool
	}{
		{"at the spec, slot 1", ContainerStatus{WorkloadID: w.ID(), Slot: 1, SpecHash: hash}, true},
		{"an older spec", ContainerStatus{WorkloadID: w.ID(), Slot: 0, SpecHash: "old"}, false},
		{"a slot beyond the replicas", ContainerStatus{WorkloadID: w.ID(), Slot: 2, SpecHash: hash}, false},
		{"another workload at the same hash", ContainerStatus{WorkloadID: "default/shop/db", Slot: 0, SpecHash: hash}, false},
	} {
		if got := w.Current(hash, tc.c); got != tc.want {
			t.Errorf("%s: Current = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A refused pull's entry is of the workload's spec while the workload has
// the login the pull used, and of no other.
func TestAFailedPullIsCurrentWithItsLoginOnly(t *testing.T) {
	w := WorkloadSpec{Namespace: "default", Project: "shop", Egg: "web", Image: "ghcr.io/a/web:1", Replicas: 1}
	hash := SpecHash(w)
	failed := ContainerStatus{WorkloadID: w.ID(), SpecHash: hash, State: StateUnknown, RolloutFailure: "refused", FailedPull: NoPullLogin}
	if !w.Current(hash, failed) {
		t.Error("a pull refused without a login is not current for a workload without one")
	}
	w.PullAuth = &RegistryAuth{Registry: "ghcr.io", Username: "ci", Handle: "h1"}
	if w.Current(hash, failed) {
		t.Error("a pull refused without a login counts against a workload that has one now")
	}
	failed.FailedPull = "h1"
	if !w.Current(hash, failed) || w.PullLogin() != "h1" {
		t.Error("a pull refused with the workload's login is not current")
	}
	w.PullAuth.Handle = "h2"
	if w.Current(hash, failed) {
		t.Error("a pull refused with the old login counts against the new one")
	}
}
