package fleet

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/store"
)

func TestRolloutEventsFollowTheReports(t *testing.T) {
	web := contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: "web", Image: "web:2", Replicas: 2}
	desired := contract.DesiredState{HostID: "h1", Workloads: []contract.WorkloadSpec{web}}
	hash := contract.SpecHash(web)
	c := func(slot int, spec string, state contract.ContainerState, healthy bool) contract.ContainerStatus {
		return contract.ContainerStatus{WorkloadID: web.ID(), Slot: slot, SpecHash: spec, State: state, Healthy: healthy}
	}
	old0, old1 := c(0, "old", contract.StateRunning, true), c(1, "old", contract.StateRunning, true)
	new0, new1 := c(0, hash, contract.StateRunning, true), c(1, hash, contract.StateRunning, true)
	booting1 := c(1, hash, contract.StateStarting, false)
	failed1 := booting1
	failed1.RolloutFailure = "not healthy within 5m"

	reports := []struct {
		name       string
		containers []contract.ContainerStatus
		want       []store.EventType
	}{
		{"the old spec still runs everywhere", []contract.ContainerStatus{old0, old1}, nil},
		{"a first slot is ready at the new spec", []contract.ContainerStatus{new0, old0, old1}, []store.EventType{store.EventRolloutProgressing}},
		{"nothing moved", []contract.ContainerStatus{new0, old1}, nil},
		{"the second slot boots", []contract.ContainerStatus{new0, booting1, old1}, nil},
		{"both ready, an old one still drains", []contract.ContainerStatus{new0, new1, c(1, "old", contract.StateDraining, false)}, []store.EventType{store.EventRolloutProgressing}},
		{"the old ones are gone", []contract.ContainerStatus{new0, new1, c(0, "old", contract.StateStopped, false)}, []store.EventType{store.EventRolloutDone}},
		{"a crash after the rollout is not a rollout", []contract.ContainerStatus{new0, c(1, hash, contract.StateCrashed, false)}, nil},
		{"and its recovery neither", []contract.ContainerStatus{new0, new1}, nil},
	}
	tr := newRolloutTracker()
	var prev []contract.ContainerStatus
	for _, r := range reports {
		evs := tr.events("h1", desired, prev, r.containers, time.Now())
		if !slices.Equal(types(evs), r.want) {
			t.Fatalf("%s: events %v, want %v", r.name, types(evs), r.want)
		}
		for _, e := range evs {
			if e.Project != "default/shop" || e.Resource != "egg/web" || e.Host != "h1" || e.Message == "" {
				t.Fatalf("%s: event %+v lacks its project, resource, host or message", r.name, e)
			}
		}
		prev = r.containers
	}

	t.Run("a failed rollout is reported once, with its reason", func(t *testing.T) {
		tr := newRolloutTracker()
		first := tr.events("h1", desired, []contract.ContainerStatus{old0, old1}, []contract.ContainerStatus{new0, failed1, old1}, time.Now())
		if !slices.Equal(types(first), []store.EventType{store.EventRolloutFailed}) || !strings.Contains(first[0].Message, "not healthy within 5m") {
			t.Fatalf("events %+v, want one rollout.failed with the reason", first)
		}
		again := tr.events("h1", desired, []contract.ContainerStatus{new0, failed1, old1}, []contract.ContainerStatus{new0, failed1, old1}, time.Now())
		if len(again) != 0 {
			t.Fatalf("the same failure again: %+v", again)
		}
	})

	t.Run("a one-shot job is done when it completed", func(t *testing.T) {
		job := contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: "migrate", Image: "m:1", Replicas: 1, Restart: contract.RestartNo}
		d := contract.DesiredState{HostID: "h1", Workloads: []contract.WorkloadSpec{job}}
		done := contract.ContainerStatus{WorkloadID: job.ID(), Slot: 0, SpecHash: contract.SpecHash(job), State: contract.StateCompleted}
		evs := newRolloutTracker().events("h1", d, nil, []contract.ContainerStatus{done}, time.Now())
		if !slices.Equal(types(evs), []store.EventType{store.EventRolloutDone}) {
			t.Fatalf("events %v, want rollout.done", types(evs))
		}
	})

	// The readiness bug of issue 25: the apply took a finished on-failure
	// job as done while its rollout stayed progressing 0/1 for ever.
	t.Run("an on-failure job that exited 0 is done", func(t *testing.T) {
		job := contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: "report", Image: "r:1", Replicas: 1, Restart: contract.RestartOnFailure}
		d := contract.DesiredState{HostID: "h1", Workloads: []contract.WorkloadSpec{job}}
		done := contract.ContainerStatus{WorkloadID: job.ID(), Slot: 0, SpecHash: contract.SpecHash(job), State: contract.StateCompleted}
		if p := assess(job, contract.SpecHash(job), []contract.ContainerStatus{done}); p.phase != phaseDone || p.ready != 1 {
			t.Fatalf("assess = %s %d/%d, want done 1/1", p.phase, p.ready, p.want)
		}
		evs := newRolloutTracker().events("h1", d, nil, []contract.ContainerStatus{done}, time.Now())
		if !slices.Equal(types(evs), []store.EventType{store.EventRolloutDone}) {
			t.Fatalf("events %v, want rollout.done", types(evs))
		}
	})
}

func types(evs []store.Event) []store.EventType {
	var out []store.EventType
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

func TestRolloutTrackerForgetsRemovedWorkloads(t *testing.T) {
	web := contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: "web", Image: "web:1", Replicas: 1}
	ready := contract.ContainerStatus{WorkloadID: web.ID(), Slot: 0, SpecHash: contract.SpecHash(web), State: contract.StateRunning, Healthy: true}
	tr := newRolloutTracker()
	tr.events("h1", contract.DesiredState{Workloads: []contract.WorkloadSpec{web}}, nil, []contract.ContainerStatus{ready}, time.Now())
	if tr.doneAt["h1"][web.ID()] == "" {
		t.Fatal("a finished rollout was not remembered")
	}
	tr.events("h1", contract.DesiredState{}, nil, nil, time.Now())
	if _, ok := tr.doneAt["h1"][web.ID()]; ok {
		t.Fatal("a workload gone from the desired state is still remembered")
	}
	// Put back, the same spec rolls out again and is reported again.
	evs := tr.events("h1", contract.DesiredState{Workloads: []contract.WorkloadSpec{web}}, nil, []contract.ContainerStatus{ready}, time.Now())
	if !slices.Equal(types(evs), []store.EventType{store.EventRolloutDone}) {
		t.Fatalf("events %v, want rollout.done", types(evs))
	}
}
