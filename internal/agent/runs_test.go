package agent

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

var runT0 = time.Date(2026, 5, 1, 3, 0, 0, 0, time.UTC)

// migrate is a run of the web egg's workload with a command of its own.
func migrate(id string) contract.Run {
	w := web(1)
	w.Command = []string{"migrate"}
	return contract.Run{ID: id, Workload: w}
}

// runContainer is the listed container of run r, in state s, started at
// started (zero: never started).
func runContainer(r contract.Run, s contract.ContainerState, started time.Time) containers.Container {
	c := containers.FromLabels("ctr-"+r.ID, contract.RunContainerName(r.Workload.Project, r.Workload.Egg, r.ID),
		containers.RunLabels(testHost, r.Workload, contract.SpecHash(r.Workload), r.ID))
	c.State, c.StartedAt = s, started
	return c
}

// statefulDB is an egg with a volume: a run of it and its replica must
// never share the volume.
func statefulDB() contract.WorkloadSpec {
	return contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: "db", Image: "db:1", Replicas: 1,
		Volumes: []contract.VolumeMount{{Name: "data", DockerName: "hatch-default-shop-data", Target: "/data"}}}
}

func runIn(runs []contract.Run, actual ...containers.Container) runInput {
	return runInput{hostID: testHost, runs: runs, actual: actual, records: map[string]runRecord{}, failures: map[string]string{}, now: runT0}
}

func onlyStatus(t *testing.T, p runPlan) contract.RunStatus {
	t.Helper()
	if len(p.statuses) != 1 {
		t.Fatalf("statuses %+v, want one", p.statuses)
	}
	return p.statuses[0]
}

func TestARunWithoutAContainerIsStartedOnceAndPending(t *testing.T) {
	r := migrate("r1")
	p := planRuns(runIn([]contract.Run{r, r})) // a duplicate entry counts once
	if len(p.starts) != 1 {
		t.Fatalf("starts %+v, want one", p.starts)
	}
	s := p.starts[0]
	if s.RunID != "r1" || s.HostID != testHost || s.SpecHash != contract.SpecHash(r.Workload) || !slices.Equal(s.Spec.Command, []string{"migrate"}) {
		t.Errorf("start %+v", s)
	}
	if st := onlyStatus(t, p); st.State != contract.RunPending {
		t.Errorf("status %+v, want pending", st)
	}

	// Its start in progress shows as a building placeholder: not again.
	building := containers.Container{Name: s.Name(), RunID: "r1", State: contract.StateBuilding,
		Labels: containers.RunLabels(testHost, r.Workload, s.SpecHash, "r1")}
	p = planRuns(runIn([]contract.Run{r}, building))
	if len(p.starts) != 0 || len(p.cancels) != 0 || onlyStatus(t, p).State != contract.RunPending {
		t.Errorf("with its start in progress: starts %+v, cancels %v, status %+v", p.starts, p.cancels, p.statuses)
	}
	// Stopped while its start is in progress: the start makes no container.
	r.Stop = true
	if p := planRuns(runIn([]contract.Run{r}, building)); !slices.Equal(p.cancels, []string{"r1"}) {
		t.Errorf("stopped while starting: cancels %v, want r1", p.cancels)
	}
}

func TestARunsStateIsReadOffItsContainer(t *testing.T) {
	r := migrate("r1")
	started := runT0.Add(-time.Minute)
	ended := runContainer(r, contract.StateCrashed, started)
	ended.ExitCode, ended.FinishedAt = 3, runT0.Add(-time.Second)
	p := planRuns(runIn([]contract.Run{r}, ended))
	want := contract.RunStatus{ID: "r1", ContainerID: ended.ID, State: contract.RunExited, ExitCode: 3, StartedAt: started, EndedAt: ended.FinishedAt}
	if st := onlyStatus(t, p); st != want {
		t.Errorf("status %+v, want %+v", st, want)
	}
	if len(p.starts)+len(p.halts)+len(p.removals) != 0 {
		t.Errorf("an ended run in the desired state is left alone: %+v", p)
	}
	if rec := p.records["r1"]; rec.Last == nil || *rec.Last != want {
		t.Errorf("record %+v: want the status kept", rec)
	}

	running := runContainer(r, contract.StateRunning, started)
	if st := onlyStatus(t, planRuns(runIn([]contract.Run{r}, running))); st.State != contract.RunRunning || !st.StartedAt.Equal(started) {
		t.Errorf("running: %+v", st)
	}
}

func TestARunPastItsTimeoutIsStoppedAndReportedTimedOut(t *testing.T) {
	r := migrate("r1")
	r.Timeout = 30 * time.Second
	r.Workload.StopTimeout = 7 * time.Second
	c := runContainer(r, contract.StateRunning, runT0.Add(-10*time.Second))
	p := planRuns(runIn([]contract.Run{r}, c))
	if len(p.halts) != 0 || !p.wakeAt.Equal(runT0.Add(20*time.Second)) {
		t.Fatalf("before its timeout: halts %+v, wake %v; want none, and a wake-up at the timeout", p.halts, p.wakeAt)
	}

	in := runIn([]contract.Run{r}, c)
	in.now = runT0.Add(20 * time.Second)
	p = planRuns(in)
	if len(p.halts) != 1 || p.halts[0].req.ID != c.ID || p.halts[0].req.StopTimeout != 7*time.Second {
		t.Fatalf("halts %+v, want one of %s with the workload's stop timeout", p.halts, c.ID)
	}
	if p.records["r1"].Halted != contract.RunTimedOut {
		t.Errorf("record %+v, want halted timed_out", p.records["r1"])
	}

	// Once it exited (SIGTERM's 143), it is timed out, also for a restarted
	// agent that kept the record.
	c.State, c.ExitCode, c.FinishedAt = contract.StateCrashed, 143, in.now.Add(time.Second)
	in = runIn([]contract.Run{r}, c)
	in.records = p.records
	if st := onlyStatus(t, planRuns(in)); st.State != contract.RunTimedOut || st.ExitCode != 143 {
		t.Errorf("status %+v, want timed_out 143", st)
	}
}

func TestAStoppedRunIsStoppedOrNeverStarted(t *testing.T) {
	r := migrate("r1")
	r.Stop = true
	p := planRuns(runIn([]contract.Run{r}))
	if len(p.starts) != 0 || onlyStatus(t, p).State != contract.RunStopped || p.records["r1"].Halted != contract.RunStopped {
		t.Fatalf("not started yet: starts %+v, statuses %+v, record %+v", p.starts, p.statuses, p.records["r1"])
	}
	// Stopped before it started: never started later, Stop or not.
	r.Stop = false
	in := runIn([]contract.Run{r})
	in.records = p.records
	if p := planRuns(in); len(p.starts) != 0 || onlyStatus(t, p).State != contract.RunStopped {
		t.Errorf("stop lifted: starts %+v, statuses %+v", p.starts, p.statuses)
	}

	r.Stop = true
	c := runContainer(r, contract.StateRunning, runT0.Add(-time.Second))
	p = planRuns(runIn([]contract.Run{r}, c))
	if len(p.halts) != 1 || p.halts[0].req.ID != c.ID {
		t.Fatalf("running: halts %+v", p.halts)
	}
	c.State = contract.StateDraining // the halt in progress: not asked twice
	if p := planRuns(runIn([]contract.Run{r}, c)); len(p.halts) != 0 || onlyStatus(t, p).State != contract.RunRunning {
		t.Errorf("draining: halts %+v, statuses %+v", p.halts, p.statuses)
	}
	// Created, its start in progress: stopped once it has started.
	c.State, c.StartedAt = contract.StateStarting, time.Time{}
	if p := planRuns(runIn([]contract.Run{r}, c)); len(p.halts) != 0 || onlyStatus(t, p).State != contract.RunPending {
		t.Errorf("starting: halts %+v, statuses %+v", p.halts, p.statuses)
	}
}

func TestAFailedStartIsReportedAndNeverTriedAgain(t *testing.T) {
	r := migrate("r1")
	in := runIn([]contract.Run{r})
	in.failures["r1"] = "pull web:1: manifest unknown"
	p := planRuns(in)
	if st := onlyStatus(t, p); len(p.starts) != 0 || st.State != contract.RunFailed || st.Error != "pull web:1: manifest unknown" {
		t.Fatalf("starts %+v, status %+v", p.starts, st)
	}
	// The client forgot the failure (a restarted agent): the record holds it.
	in = runIn([]contract.Run{r})
	in.records = p.records
	if p := planRuns(in); len(p.starts) != 0 || onlyStatus(t, p).State != contract.RunFailed {
		t.Errorf("after a restart: starts %+v, statuses %+v", p.starts, p.statuses)
	}
	// Once the run left the desired state, the client may forget it, and so
	// does the agent.
	in = runIn(nil)
	in.records, in.failures = p.records, map[string]string{"r1": "x"}
	if p := planRuns(in); !slices.Equal(p.forget, []string{"r1"}) || len(p.records) != 0 {
		t.Errorf("left: forget %v, records %+v", p.forget, p.records)
	}
}

func TestARunWhoseContainerVanishedIsNotStartedAgain(t *testing.T) {
	r := migrate("r1")
	p := planRuns(runIn([]contract.Run{r}, runContainer(r, contract.StateRunning, runT0)))
	in := runIn([]contract.Run{r})
	in.records = p.records
	p = planRuns(in)
	if st := onlyStatus(t, p); len(p.starts) != 0 || st.State != contract.RunFailed || !strings.Contains(st.Error, "removed outside Hatchery") {
		t.Errorf("starts %+v, status %+v", p.starts, st)
	}
}

func TestARunCreatedButNeverStartedIsNotStarted(t *testing.T) {
	r := migrate("r1")
	p := planRuns(runIn([]contract.Run{r}, runContainer(r, contract.StateStopped, time.Time{})))
	if st := onlyStatus(t, p); len(p.starts)+len(p.halts) != 0 || st.State != contract.RunFailed || !strings.Contains(st.Error, "never started") {
		t.Errorf("plan %+v, status %+v", p, st)
	}
}

func TestATerminalsRunWaitsCreatedForItsAttach(t *testing.T) {
	r := migrate("r1")
	r.TTY = true
	p := planRuns(runIn([]contract.Run{r}))
	if len(p.starts) != 1 || !p.starts[0].TTY {
		t.Fatalf("starts %+v, want one with a terminal", p.starts)
	}
	// Made, not started: its attach session starts it.
	created := runContainer(r, contract.StateStopped, time.Time{})
	p = planRuns(runIn([]contract.Run{r}, created))
	if st := onlyStatus(t, p); len(p.starts)+len(p.halts) != 0 || st.State != contract.RunPending || !strings.Contains(st.Error, "terminal") {
		t.Errorf("plan %+v, status %+v; want pending for its terminal", p, st)
	}
	// Stopped (Ctrl-C before the attach, its operator gone): never started.
	r.Stop = true
	p = planRuns(runIn([]contract.Run{r}, created))
	if st := onlyStatus(t, p); len(p.starts)+len(p.halts) != 0 || st.State != contract.RunStopped {
		t.Errorf("plan %+v, status %+v; want stopped", p, st)
	}
}

func TestARunOnAStatefulEggsVolumeWaitsForItsReplica(t *testing.T) {
	db := statefulDB()
	r := contract.Run{ID: "r1", Workload: db}
	replica := containers.FromLabels("db0", "hatch-default-shop-db-0", containers.Labels(testHost, db, 0, contract.SpecHash(db)))
	other := containers.FromLabels("web0", "hatch-default-shop-web-0", containers.Labels(testHost, web(1), 0, "h"))
	other.State = contract.StateRunning
	for _, s := range []contract.ContainerState{contract.StateRunning, contract.StateDraining, contract.StateBuilding} {
		replica.State = s
		p := planRuns(runIn([]contract.Run{r}, replica, other))
		if st := onlyStatus(t, p); len(p.starts) != 0 || st.State != contract.RunPending || !strings.Contains(st.Error, replica.Name) {
			t.Errorf("replica %s: starts %+v, status %+v; want pending, waiting for %s", s, p.starts, st, replica.Name)
		}
	}
	replica.State = contract.StateCrashed
	if p := planRuns(runIn([]contract.Run{r}, replica, other)); len(p.starts) != 1 {
		t.Errorf("replica exited: starts %+v, want the run started", p.starts)
	}
	if p := planRuns(runIn([]contract.Run{r}, other)); len(p.starts) != 1 {
		t.Errorf("replica gone: starts %+v, want the run started", p.starts)
	}
}

func TestRunContainersLeavingTheDesiredStateAreRemoved(t *testing.T) {
	kept, gone := migrate("r1"), migrate("r2")
	cKept := runContainer(kept, contract.StateCompleted, runT0)
	cGone := runContainer(gone, contract.StateRunning, runT0)
	foreign := runContainer(gone, contract.StateCompleted, runT0)
	foreign.ID, foreign.Labels = "foreign", map[string]string{containers.LabelRun: "r3"}
	foreign.RunID = "r3"
	p := planRuns(runIn([]contract.Run{kept}, cKept, cGone, foreign))
	if len(p.removals) != 1 || p.removals[0].ID != cGone.ID {
		t.Errorf("removals %+v, want %s only", p.removals, cGone.ID)
	}
	in := runIn([]contract.Run{kept}, cKept, cGone)
	in.hold = true
	in.records = map[string]runRecord{"r2": {Failed: "x"}}
	if p := planRuns(in); len(p.removals) != 0 || p.records["r2"].Failed != "x" {
		t.Errorf("held: removals %+v, records %+v; want none removed and the record kept", p.removals, p.records)
	}
}

func TestRunsAreNotStartedWhileHeldNorOnANoExecHostNorWithUnsafeNames(t *testing.T) {
	r := migrate("r1")
	in := runIn([]contract.Run{r})
	in.hold = true
	if p := planRuns(in); len(p.starts) != 0 || onlyStatus(t, p).State != contract.RunPending {
		t.Errorf("held: %+v", p)
	}
	in = runIn([]contract.Run{r})
	in.noExec = true
	if p := planRuns(in); len(p.starts) != 0 || onlyStatus(t, p).State != contract.RunFailed {
		t.Errorf("no-exec: %+v", p)
	}
	bad := migrate("../x")
	p := planRuns(runIn([]contract.Run{bad}))
	if len(p.starts) != 0 || onlyStatus(t, p).State != contract.RunFailed || len(p.errors) != 1 {
		t.Errorf("unsafe ID: %+v", p)
	}
}

func TestRunHoldsAStatefulEggsReplicaWhileARunOfTheEggHasNotEnded(t *testing.T) {
	db := statefulDB()
	w := web(1)
	d := contract.DesiredState{HostID: testHost, Workloads: []contract.WorkloadSpec{db, w}}
	dbRun, webRun := contract.Run{ID: "r1", Workload: db}, migrate("r2")
	for _, s := range []contract.ContainerState{contract.StateRunning, contract.StateBuilding, contract.StateStarting} {
		held := runHolds(d, []containers.Container{runContainer(dbRun, s, runT0), runContainer(webRun, contract.StateRunning, runT0)})
		if _, ok := held[db.ID()]; !ok || len(held) != 1 {
			t.Errorf("db's run %s: held %v, want db alone (web has no volume)", s, held)
		}
	}
	if held := runHolds(d, []containers.Container{runContainer(dbRun, contract.StateCrashed, runT0)}); len(held) != 0 {
		t.Errorf("db's run ended: held %v", held)
	}
}

func TestARunNeverEndsBeforeItStarted(t *testing.T) {
	r := migrate("r1")
	c := runContainer(r, contract.StateCompleted, runT0)
	c.FinishedAt = runT0.Add(-time.Millisecond) // as Docker dates a process that ends at once
	if st := onlyStatus(t, planRuns(runIn([]contract.Run{r}, c))); !st.EndedAt.Equal(runT0) {
		t.Errorf("ended at %v, want its start %v", st.EndedAt, runT0)
	}
}
