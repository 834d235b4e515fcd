package fleet

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/store"
)

func stored(t *testing.T, host string, ws ...contract.WorkloadSpec) store.DesiredState {
	t.Helper()
	doc, err := json.Marshal(contract.DesiredState{HostID: host, Workloads: ws})
	if err != nil {
		t.Fatal(err)
	}
	return store.DesiredState{HostID: host, Version: "v1", Doc: doc}
}

func shopEgg(egg string) contract.WorkloadSpec {
	return contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: egg, Image: egg, Replicas: 1}
}

func container(workload string, slot int, state contract.ContainerState) contract.ContainerStatus {
	return contract.ContainerStatus{WorkloadID: workload, Slot: slot, State: state}
}

func TestOnlyContainersOfPlacedWorkloadsAreActedOn(t *testing.T) {
	got := placedOnly([]contract.WorkloadSpec{shopEgg("web")}, []contract.ContainerStatus{
		container("default/shop/web", 0, contract.StateRunning),
		container("default/shop/db", 0, contract.StateRunning),
		container("default/shop/web/", 1, contract.StateRunning),
	})
	if len(got) != 1 || got[0].WorkloadID != "default/shop/web" {
		t.Fatalf("placed containers %+v, want web's only", got)
	}
}

func TestAClaimOfAnUnplacedContainerIsAProblemOnceTheAgentConvergedToItsState(t *testing.T) {
	desired := stored(t, "h1", shopEgg("web"))
	report := contract.StatusReport{HostID: "h1", Version: "v1", Containers: []contract.ContainerStatus{
		container("default/shop/web", 0, contract.StateRunning),
		container("default/shop/db", 0, contract.StateRunning),
		container("default/shop/old", 0, contract.StateDraining),
		container("default/shop/gone", 0, contract.StateStopped),
		container("default/shop/\x1b[2J", 0, contract.StateStarting),
	}}
	p, err := unplacedProblem(desired, "v1", report)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p, "2 containers") || !strings.Contains(p, `"default/shop/db" slot 0`) ||
		strings.Contains(p, "old") || strings.Contains(p, "gone") || strings.ContainsRune(p, 0x1b) {
		t.Fatalf("problem %q, want db and the escaped name only (draining and stopped ones are on their way out)", p)
	}
	// An agent not yet at the current state may still be stopping a
	// replica moved away: no problem yet.
	if p, err := unplacedProblem(desired, "v2", report); err != nil || p != "" {
		t.Fatalf("a report of an older version: %q, %v; want none", p, err)
	}
	// Thousands of claims name five.
	var many []contract.ContainerStatus
	for i := range 1000 {
		many = append(many, container("default/shop/db", i, contract.StateRunning))
	}
	p, err = unplacedProblem(desired, "v1", contract.StatusReport{HostID: "h1", Version: "v1", Containers: many})
	if err != nil || !strings.Contains(p, "1000 containers") || strings.Count(p, "slot") != maxUnplacedNamed || !strings.Contains(p, "and 995 more") {
		t.Fatalf("problem %q (%v), want 1000 counted and 5 named", p, err)
	}
}

func TestARunsLogsAreReadOnlyOnTheHostWhoseDesiredStateHoldsIt(t *testing.T) {
	doc, err := json.Marshal(contract.DesiredState{HostID: "h1", Workloads: []contract.WorkloadSpec{shopEgg("web")},
		Runs: []contract.Run{{ID: "r1", Workload: shopEgg("migrate")}, {ID: "r9", Workload: contract.WorkloadSpec{Namespace: "default", Project: "blog", Egg: "migrate"}}}})
	if err != nil {
		t.Fatal(err)
	}
	ws, runs, err := projectWorkloads(store.DesiredState{HostID: "h1", Doc: doc}, "default", "shop")
	if err != nil {
		t.Fatal(err)
	}
	h := statusHost{ID: "h1", Workloads: ws, Runs: runs}
	for _, c := range []struct {
		name, egg, run string
		want           []string
	}{
		{"the run of its desired state", "migrate", "r1", []string{"migrate"}},
		{"a run it was not given", "migrate", "r2", nil},
		{"its run named under another egg", "web", "r1", nil},
		{"another project's run", "migrate", "r9", nil},
		{"the egg's replicas without a run", "web", "", []string{"web"}},
		{"no replicas of a run's egg", "migrate", "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := logTarget(h, c.egg, c.run).Eggs; !slices.Equal(got, c.want) {
				t.Fatalf("eggs %v, want %v", got, c.want)
			}
		})
	}
}
