package desired

import (
	"errors"
	"strings"
	"testing"

	"github.com/cenkalti/backoff/v4"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

func TestReadiness(t *testing.T) {
	e := Egg{namespace: "default", project: "shop", name: "web", in: inputs.Egg{Replicas: 2, Image: "web:1"}}
	w := func(n int, restart contract.RestartPolicy) contract.WorkloadSpec {
		return contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: "web", Image: "web:1", Replicas: n, Restart: restart}
	}
	hash := contract.SpecHash(w(1, ""))
	c := func(slot int, state contract.ContainerState, healthy bool, spec string) contract.ContainerStatus {
		return contract.ContainerStatus{WorkloadID: "default/shop/web", Slot: slot, State: state, Healthy: healthy, SpecHash: spec}
	}
	running := func(slot int) contract.ContainerStatus { return c(slot, contract.StateRunning, true, hash) }
	name := func(id string) string { return "name-" + id }

	for _, tc := range []struct {
		name      string
		entries   map[string]contract.WorkloadSpec
		reports   map[string][]contract.ContainerStatus
		cond      resource.Condition
		ready     bool
		reason    string // a part of it
		permanent string // a part of the permanent error, if any
	}{
		{name: "every replica healthy at the spec, over two hosts", cond: resource.ConditionHealthy, ready: true,
			entries: map[string]contract.WorkloadSpec{"a": w(1, ""), "b": w(1, "")},
			reports: map[string][]contract.ContainerStatus{"a": {running(0)}, "b": {running(0)}}},
		{name: "a host that has not reported yet", cond: resource.ConditionHealthy, reason: "1/2 replicas healthy",
			entries: map[string]contract.WorkloadSpec{"a": w(1, ""), "b": w(1, "")},
			reports: map[string][]contract.ContainerStatus{"a": {running(0)}}},
		{name: "an old container, an unhealthy one and a slot out of range count for nothing", cond: resource.ConditionHealthy,
			reason:  "0/2 replicas healthy",
			entries: map[string]contract.WorkloadSpec{"a": w(2, "")},
			reports: map[string][]contract.ContainerStatus{"a": {c(0, contract.StateRunning, true, "old"),
				c(1, contract.StateRunning, false, hash), c(2, contract.StateRunning, true, hash)}}},
		{name: "two containers of one slot count once", cond: resource.ConditionHealthy, reason: "1/2",
			entries: map[string]contract.WorkloadSpec{"a": w(2, "")},
			reports: map[string][]contract.ContainerStatus{"a": {running(0), running(0)}}},
		{name: "replicas not placed say why", cond: resource.ConditionHealthy, reason: "1/2 replicas placed: host h is down",
			entries: map[string]contract.WorkloadSpec{"a": w(1, "")},
			reports: map[string][]contract.ContainerStatus{"a": {running(0)}}},
		{name: "a failed rollout can never become healthy", cond: resource.ConditionHealthy,
			permanent: "rollout failed on host name-a: not healthy by its deadline",
			entries:   map[string]contract.WorkloadSpec{"a": w(2, "")},
			reports: map[string][]contract.ContainerStatus{"a": {running(0), {WorkloadID: "default/shop/web", Slot: 1,
				State: contract.StateRunning, SpecHash: hash, RolloutFailure: "not healthy by its deadline"}}}},
		{name: "a job completed on every slot", cond: resource.ConditionCompleted, ready: true,
			entries: map[string]contract.WorkloadSpec{"a": w(2, contract.RestartNo)},
			reports: map[string][]contract.ContainerStatus{"a": {c(0, contract.StateCompleted, false, contract.SpecHash(w(2, contract.RestartNo))),
				c(1, contract.StateCompleted, false, contract.SpecHash(w(2, contract.RestartNo)))}}},
		{name: "a job still running", cond: resource.ConditionCompleted, reason: "0/2 replicas completed",
			entries: map[string]contract.WorkloadSpec{"a": w(2, contract.RestartNo)},
			reports: map[string][]contract.ContainerStatus{"a": {c(0, contract.StateRunning, true, contract.SpecHash(w(2, contract.RestartNo)))}}},
		{name: "an on-failure job that exited 0 completed", cond: resource.ConditionCompleted, ready: true,
			entries: map[string]contract.WorkloadSpec{"a": w(1, contract.RestartOnFailure), "b": w(1, contract.RestartOnFailure)},
			reports: map[string][]contract.ContainerStatus{"a": {c(0, contract.StateCompleted, false, contract.SpecHash(w(1, contract.RestartOnFailure)))},
				"b": {c(0, contract.StateCompleted, false, contract.SpecHash(w(1, contract.RestartOnFailure)))}}},
		{name: "a finished on-failure job is ready for a healthy condition too", cond: resource.ConditionHealthy, ready: true,
			entries: map[string]contract.WorkloadSpec{"a": w(1, contract.RestartOnFailure), "b": w(1, contract.RestartOnFailure)},
			reports: map[string][]contract.ContainerStatus{"a": {c(0, contract.StateCompleted, false, contract.SpecHash(w(1, contract.RestartOnFailure)))},
				"b": {c(0, contract.StateCompleted, false, contract.SpecHash(w(1, contract.RestartOnFailure)))}}},
		{name: "an always-restarted egg that exited 0 is not ready: it starts again", cond: resource.ConditionHealthy, reason: "0/2",
			entries: map[string]contract.WorkloadSpec{"a": w(2, "")},
			reports: map[string][]contract.ContainerStatus{"a": {c(0, contract.StateCompleted, false, hash)}}},
		{name: "a one-shot job that crashed failed for good", cond: resource.ConditionCompleted, permanent: "job web failed on host name-a",
			entries: map[string]contract.WorkloadSpec{"a": w(2, contract.RestartNo)},
			reports: map[string][]contract.ContainerStatus{"a": {c(1, contract.StateCrashed, false, contract.SpecHash(w(2, contract.RestartNo)))}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			waiting := ""
			if strings.Contains(tc.reason, "placed") {
				waiting = "host h is down"
			}
			ready, reason, err := readiness(e, tc.entries, tc.reports, tc.cond, waiting, name)
			var perm *backoff.PermanentError
			switch {
			case tc.permanent != "":
				if !errors.As(err, &perm) || !strings.Contains(err.Error(), tc.permanent) {
					t.Fatalf("err %v, want a permanent error with %q", err, tc.permanent)
				}
			case err != nil:
				t.Fatalf("err %v", err)
			case ready != tc.ready || !strings.Contains(reason, tc.reason):
				t.Fatalf("readiness = %v, %q; want %v, %q", ready, reason, tc.ready, tc.reason)
			}
		})
	}
}
