package provider

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/placement"
	"github.com/hatchery/hatchery/internal/resource"
)

// upWith makes a host report with a capacity.
func (e *env) upWith(host string, c *contract.HostCapacity) {
	e.t.Helper()
	rep, _ := json.Marshal(contract.StatusReport{HostID: host, Time: e.clock.Now(), Capacity: c})
	if _, err := e.st.PutStatus(e.t.Context(), host, rep, e.clock.Now()); err != nil {
		e.t.Fatal(err)
	}
}

func TestReportedCapacityLimitsPlacement(t *testing.T) {
	e := newEnv(t)
	e.upWith("small", &contract.HostCapacity{MemoryBytes: 1 << 30, MilliCPU: 2000})
	e.upWith("large", &contract.HostCapacity{MemoryBytes: 8 << 30, MilliCPU: 8000})
	e.upWith("silent", &contract.HostCapacity{}) // reported nothing usable
	hosts, err := e.set.Hosts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	caps := map[string]placement.Resources{}
	for _, h := range hosts {
		caps[h.ID] = h.Capacity
	}
	want := map[string]placement.Resources{"small": {Memory: 1 << 30, MilliCPU: 2000}, "large": {Memory: 8 << 30, MilliCPU: 8000},
		// Silence must not draw replicas: as small as the smallest host.
		"silent": {Memory: 1 << 30, MilliCPU: 2000}}
	if !maps.Equal(caps, want) {
		t.Fatalf("capacities %v, want %v", caps, want)
	}
	e.apply("default/shop", "project: shop\neggs:\n  w: {image: w:1, replicas: 7, placement: {hosts: [small, large]}, resources: {memory: 512Mi}}\n", nil)
	if got := e.slots("default/shop/w", "small", "large", "silent"); !maps.Equal(got, map[string]int{"small": 2, "large": 5}) {
		t.Fatalf("slots %v, want small full at 2 and the rest on large", got)
	}
}

// A host up whose Docker Engine does not answer gets no new replica, keeps
// those it has, and none of them is ready for the apply.
func TestAHostWhoseEngineDoesNotAnswerGetsNoNewReplicaAndNoneOfItsIsReady(t *testing.T) {
	e := newEnv(t)
	e.up("a")
	e.up("b")
	e.apply("default/shop", "project: shop\neggs:\n  w: {image: w:1, replicas: 2}\n", nil)
	if got := e.slots("default/shop/w", "a", "b"); !maps.Equal(got, map[string]int{"a": 1, "b": 1}) {
		t.Fatalf("slots %v, want one on each host", got)
	}
	w, ok := e.state("b").Workload("default/shop/w")
	if !ok {
		t.Fatal("b has no workload w")
	}
	healthy := contract.ContainerStatus{WorkloadID: w.ID(), Slot: 0, SpecHash: contract.SpecHash(w), State: contract.StateRunning, Healthy: true}
	rep, _ := json.Marshal(contract.StatusReport{HostID: "b", Time: e.clock.Now(), Containers: []contract.ContainerStatus{healthy},
		Engine: &contract.EngineProblem{Since: e.clock.Now(), Reason: "context deadline exceeded"}})
	if _, err := e.st.PutStatus(t.Context(), "b", rep, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	wa, _ := e.state("a").Workload("default/shop/w")
	e.up("a", contract.ContainerStatus{WorkloadID: wa.ID(), Slot: 0, SpecHash: contract.SpecHash(wa), State: contract.StateRunning, Healthy: true})
	ready, reason, err := (eggProvider{e.set}).Ready(t.Context(), "default/shop", e.record("default/shop", "egg/w"), resource.ConditionHealthy)
	if err != nil || ready || !strings.Contains(reason, "1/2") {
		t.Fatalf("ready = %v %q %v; want not ready, 1/2: b's containers are not to be believed", ready, reason, err)
	}
	e.apply("default/shop", "project: shop\neggs:\n  w: {image: w:1, replicas: 4}\n", nil)
	if got := e.slots("default/shop/w", "a", "b"); !maps.Equal(got, map[string]int{"a": 3, "b": 1}) {
		t.Fatalf("slots %v, want b to keep its one and get none more", got)
	}
}
