package provider

import (
	"encoding/json"
	"maps"
	"testing"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/placement"
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
