package containers

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/contract"
)

func TestRunLabelsMarkARunOfItsEggsWorkload(t *testing.T) {
	c := FromLabels("id1", "n", RunLabels("h1", spec(), "abc", "r1"))
	if c.RunID != "r1" || c.WorkloadID != "default/shop/web" || c.Slot != 0 || c.SpecHash != "abc" || c.LabelError != "" {
		t.Errorf("run container %+v", c)
	}
	if c.Labels[LabelState] != "" || c.Labels[LabelGeneration] != "" {
		t.Errorf("a run's container carries a state stamp: %v", c.Labels)
	}
	replica := FromLabels("id2", "m", Labels("h1", spec(), 0, "abc"))
	replicas, runs := SplitRuns([]Container{c, replica})
	if len(replicas) != 1 || replicas[0].ID != "id2" || len(runs) != 1 || runs[0].ID != "id1" {
		t.Errorf("split: replicas %+v, runs %+v", replicas, runs)
	}
}

func TestTasksTellRunsApartAndKeepAHaltedRunsContainer(t *testing.T) {
	ts := NewTasks(zaptest.NewLogger(t), func() time.Time { return t0 })
	req := RunRequest{HostID: "h1", RunID: "r1", Spec: spec(), SpecHash: "v1"}
	r1 := StartRunTask(req, t0)
	if r1.Placeholder.Name != contract.RunContainerName("shop", "web", "r1") || r1.Placeholder.RunID != "r1" {
		t.Errorf("placeholder %+v", r1.Placeholder)
	}
	req.RunID = "r2"
	r2 := StartRunTask(req, t0)
	if !ts.Begin(r1) || !ts.Begin(r2) {
		t.Fatal("two runs of one workload and spec could not start side by side")
	}
	if ts.Begin(StartRunTask(RunRequest{HostID: "h1", RunID: "r1", Spec: spec(), SpecHash: "v1"}, t0)) {
		t.Error("a second start of r1 began")
	}
	if !ts.Begin(StartTask(startReq(0, "v1"), "n1", t0)) {
		t.Error("a replica's start was refused while runs of its workload start")
	}
	ts.End(r1, errors.New("pull: manifest unknown"))
	if fs := ts.Failures(); len(fs) != 1 || fs[0].Task.Placeholder.RunID != "r1" {
		t.Fatalf("failures %+v", fs)
	}
	ts.ForgetRun("r1")
	if fs := ts.Failures(); len(fs) != 0 {
		t.Errorf("failures after ForgetRun: %+v", fs)
	}

	c := FromLabels("c1", "run", RunLabels("h1", spec(), "v1", "r3"))
	c.State = contract.StateRunning
	halt := Task{Kind: TaskHalt, Container: "c1"}
	ts.Begin(halt)
	if got := ts.Overlay([]Container{c}); len(got) < 1 || got[0].State != contract.StateDraining {
		t.Errorf("overlay while halting %+v, want c1 draining", got)
	}
	ts.End(halt, nil)
	if got := ts.Overlay([]Container{c}); len(got) < 1 || got[0].ID != "c1" {
		t.Errorf("overlay after the halt %+v: a halt keeps its container", got)
	}
}

func TestACancelledRunStartIsToldUntilItEnds(t *testing.T) {
	ts := NewTasks(zaptest.NewLogger(t), func() time.Time { return t0 })
	ts.CancelRun("r1") // nothing in progress: nothing to cancel
	if ts.RunCancelled("r1") {
		t.Error("a run with no start in progress is cancelled")
	}
	start := StartRunTask(RunRequest{HostID: "h1", RunID: "r1", Spec: spec(), SpecHash: "v1"}, t0)
	ts.Begin(start)
	ts.CancelRun("r1")
	if !ts.RunCancelled("r1") || ts.RunCancelled("r2") {
		t.Error("the cancel of r1's start is not told, or told of r2")
	}
	ts.End(start, nil)
	if ts.RunCancelled("r1") {
		t.Error("the cancel outlived the start")
	}
}
