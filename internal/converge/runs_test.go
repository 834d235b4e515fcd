package converge

import (
	"testing"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/containers/fake"
	"github.com/hatchery/hatchery/internal/contract"
)

// runOf returns the container of run id of w, labelled as the agent makes
// it: w's workload label, slot 0 and spec hash, and the run's label.
func runOf(id string, w contract.WorkloadSpec, state contract.ContainerState) containers.Container {
	c := ctr("run-"+id, w, 0, contract.SpecHash(w), state)
	c.Labels = containers.RunLabels(host, w, contract.SpecHash(w), id)
	c.RunID = id
	return c
}

// A run's container shares its egg's workload label, but it is no replica:
// it neither fills the egg's slot, nor is removed, rolled or restarted as
// a replica, nor reported as one.
func TestRunContainersAreNoReplicas(t *testing.T) {
	w := wl("web", 1)
	tests := []struct {
		name   string
		d      contract.DesiredState
		actual []containers.Container
		want   []string
	}{
		{"a running run does not fill the slot", desiredOf(w),
			[]containers.Container{runOf("r1", w, contract.StateRunning)}, []string{"start default/shop/web/0 (missing)"}},
		{"a crashed run is not restarted", desiredOf(w),
			[]containers.Container{ctr("c1", w, 0, contract.SpecHash(w), contract.StateRunning), runOf("r1", w, contract.StateCrashed)}, nil},
		{"a stale-looking run is not rolled", desiredOf(wl("web", 1, func(s *contract.WorkloadSpec) { s.Image = "img:v3" })),
			[]containers.Container{runOf("r1", w, contract.StateRunning)}, []string{"start default/shop/web/0 (missing)"}},
		{"a run of an egg no longer desired is not removed", desiredOf(),
			[]containers.Container{runOf("r1", w, contract.StateRunning)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Diff(tt.d, tt.actual, nil, t0)
			var got []string
			for _, s := range p.Steps {
				got = append(got, s.String())
			}
			if len(got) != len(tt.want) || (len(got) > 0 && got[0] != tt.want[0]) {
				t.Errorf("steps %q, want %q", got, tt.want)
			}
			for _, c := range Status(tt.d, tt.actual, NewHistory(), t0) {
				if c.ContainerID == "run-r1" {
					t.Errorf("the run's container is in the status: %+v", c)
				}
			}
		})
	}
}

func TestWithoutStartsHoldsOnlyTheStartsOfTheHeldWorkloads(t *testing.T) {
	db, web := wl("db", 2, stateful), wl("web", 1)
	d := desiredOf(db, web)
	actual := []containers.Container{ctr("d0", db, 0, old, contract.StateRunning)}
	plan := Diff(d, actual, nil, t0)
	got, left := WithoutStarts(plan, map[string]string{db.ID(): "a run"})
	for _, s := range got.Steps {
		if s.WorkloadID == db.ID() && (s.Action == ActionStart || s.Action == ActionReplace) {
			t.Errorf("held workload's step left in: %v", s)
		}
	}
	if len(left) != 2 || len(got.Steps) != len(plan.Steps)-2 {
		t.Errorf("left %v of %v: want db's replace of slot 0 and start of slot 1", left, plan.Steps)
	}
	if len(got.Steps) != 1 || got.Steps[0].WorkloadID != web.ID() {
		t.Errorf("steps %v, want web's start alone", got.Steps)
	}
}

// A crashed (exited) container of a held workload is not restarted either:
// a restart starts it again (the fenced egg's container after a reboot).
func TestWithoutStartsHoldsTheRestartOfACrashedContainer(t *testing.T) {
	db := wl("db", 1, stateful)
	plan := Diff(desiredOf(db), []containers.Container{ctr("d0", db, 0, up(db), contract.StateCrashed)}, nil, t0)
	if len(plan.Steps) != 1 || plan.Steps[0].Action != ActionRestart {
		t.Fatalf("plan %v, want the crashed container's restart", plan.Steps)
	}
	got, left := WithoutStarts(plan, map[string]string{db.ID(): "fenced"})
	if len(got.Steps) != 0 || len(left) != 1 {
		t.Errorf("steps %v, held %v: want the restart held", got.Steps, left)
	}
}

func TestConvergeAsksWhichStartsToHoldWithTheRunsListed(t *testing.T) {
	db := wl("db", 1, stateful)
	f := fake.New(host, t0, fake.DefaultTiming())
	runID := f.Add(runOf("r1", db, contract.StateRunning))
	var asked []containers.Container
	opts := testOptions(t)
	opts.HoldStarts = func(listed []containers.Container) map[string]string {
		asked = listed
		return map[string]string{db.ID(): "a run"}
	}
	plan, err := Converge(t.Context(), f, desiredOf(db), NewHistory(), t0, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Steps) != 0 || len(asked) != 1 || asked[0].ID != runID {
		t.Errorf("steps %v, asked with %+v: want no start, and the run's container listed", plan.Steps, asked)
	}
}
