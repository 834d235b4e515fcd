package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/containers/fake"
	"github.com/hatchery/hatchery/internal/contract"
)

// runAgent is an agent on a fake host whose clock the test moves, with
// runs in its desired state.
type runAgent struct {
	t   *testing.T
	f   *fake.Fake
	cp  *fakeControlPlane
	dir string
	a   *Agent
}

func newRunAgent(t *testing.T, d contract.DesiredState) *runAgent {
	h := &runAgent{t: t, f: fake.New(testHost, runT0, fake.DefaultTiming()), cp: newFakeControlPlane(), dir: t.TempDir()}
	h.cp.set(d)
	h.start()
	return h
}

func (h *runAgent) start() {
	cfg := testConfig(h.t, h.f, h.cp, h.dir)
	cfg.ConvergeInterval = time.Hour
	cfg.Now = h.f.Now
	h.a = startAgent(h.t, cfg)
	eventually(h.t, "the desired state reached the agent", func() error {
		if _, ok := h.a.Desired(); !ok {
			return errors.New("none yet")
		}
		return nil
	})
}

// restart closes the agent and starts a new one on the same data directory.
func (h *runAgent) restart() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.a.Close(ctx); err != nil {
		h.t.Fatal(err)
	}
	h.start()
}

// set hands out a new desired state and waits for the agent to have it.
func (h *runAgent) set(d contract.DesiredState) {
	h.cp.set(d)
	eventually(h.t, "the new desired state reached the agent", func() error {
		if got, _ := h.a.Desired(); got.Version != d.Version {
			return fmt.Errorf("version %s", got.Version)
		}
		return nil
	})
}

// until ticks the clock a second at a time (at most a minute) until the
// last report's run id is in state s, and returns its status.
func (h *runAgent) until(id string, s contract.RunState) contract.RunStatus {
	h.t.Helper()
	var last []contract.RunStatus
	for range 60 {
		tickAndConverge(h.t, h.f, h.a)
		r, _ := h.a.Status()
		last = r.Runs
		for _, st := range r.Runs {
			if st.ID == id && st.State == s {
				return st
			}
		}
	}
	h.t.Fatalf("run %s never %s within a minute; last %+v", id, s, last)
	return contract.RunStatus{}
}

// runCreates counts the containers created for a run.
func runCreates(f *fake.Fake, id string) int {
	n := 0
	for _, e := range f.Events() {
		if e.Kind == fake.EventCreate && e.RunID == id {
			n++
		}
	}
	return n
}

// neverCreated ticks a few converges on, then fails the test if a container
// was ever created for run id.
func (h *runAgent) neverCreated(id, what string) {
	h.t.Helper()
	for range 5 {
		tickAndConverge(h.t, h.f, h.a)
	}
	if n := runCreates(h.f, id); n != 0 {
		h.t.Errorf("%d containers created for %s, want none", n, what)
	}
}

func runState(w contract.WorkloadSpec, runs ...contract.Run) contract.DesiredState {
	d := contract.DesiredState{HostID: testHost, Workloads: []contract.WorkloadSpec{w}, Runs: runs}
	d.Seal()
	return d
}

func TestARunExitsWithItsCodeBesideItsEggsReplicaAndIsRemovedOnceItLeaves(t *testing.T) {
	w, r := web(1), migrate("r1")
	w.Routes = []contract.Route{{Host: "shop.example"}}
	r.Workload.Routes = w.Routes // the egg's spec, as the control plane copies it
	h := newRunAgent(t, runState(w, r))
	h.f.SetBehaviour(contract.SpecHash(r.Workload), fake.Behaviour{CrashAfter: 8 * time.Second, ExitCode: 3})
	started := h.until("r1", contract.RunRunning)
	// Once the replica serves, it alone is in the ingress: the run, running
	// still, is not.
	router := h.a.cfg.Router.(*fakeRouter)
	backends := func() (ids []string) {
		router.mu.Lock()
		defer router.mu.Unlock()
		for _, egg := range router.table.Eggs {
			for _, b := range egg.Backends {
				ids = append(ids, b.ContainerID)
			}
		}
		return ids
	}
	for i := 0; i < 5 && len(backends()) == 0; i++ {
		tickAndConverge(t, h.f, h.a)
	}
	if ids := backends(); len(ids) != 1 || ids[0] == started.ContainerID {
		t.Errorf("ingress backends %q, want the replica's alone (the run is %s)", ids, started.ContainerID)
	}
	if rep, _ := h.a.Status(); len(rep.Runs) != 1 || rep.Runs[0].State != contract.RunRunning {
		t.Fatalf("runs %+v, want r1 still running", rep.Runs)
	}
	st := h.until("r1", contract.RunExited)
	if st.ExitCode != 3 || st.StartedAt.IsZero() || !st.EndedAt.After(st.StartedAt) || st.ContainerID == "" {
		t.Errorf("status %+v, want exited 3 with its times and container", st)
	}
	rep, _ := h.a.Status()
	for _, c := range rep.Containers {
		if c.ContainerID == st.ContainerID {
			t.Errorf("the run's container is reported as a replica: %+v", c)
		}
	}
	if n := running(h.f.All(), w); n != 1 || len(rep.Containers) != 1 {
		t.Errorf("replicas: %d running, %d reported; want the one", n, len(rep.Containers))
	}
	// Kept, ended, while the run is in the desired state; not restarted.
	for range 3 {
		tickAndConverge(t, h.f, h.a)
	}
	if n := runCreates(h.f, "r1"); n != 1 {
		t.Errorf("%d containers created for r1, want 1", n)
	}
	for _, e := range h.f.Events() {
		if e.ID == st.ContainerID && (e.Kind == fake.EventRestart || e.Kind == fake.EventRemove) {
			t.Errorf("the ended run's container got %s while its run is desired", e.Kind)
		}
	}

	h.set(runState(w))
	eventually(t, "the run's container removed", func() error {
		tickAndConverge(t, h.f, h.a)
		for _, c := range h.f.All() {
			if c.RunID != "" {
				return fmt.Errorf("%s still there", c.Name)
			}
		}
		return nil
	})
	if rep, _ := h.a.Status(); len(rep.Runs) != 0 || running(h.f.All(), w) != 1 {
		t.Errorf("runs %+v, replicas running %d", rep.Runs, running(h.f.All(), w))
	}
}

func TestARunStartsAtMostOnceAcrossAnAgentRestart(t *testing.T) {
	w, r := web(1), migrate("r1")
	h := newRunAgent(t, runState(w, r))
	h.until("r1", contract.RunRunning)
	h.restart()
	st := h.until("r1", contract.RunRunning)
	if err := h.f.Crash(st.ContainerID, 0); err != nil {
		t.Fatal(err)
	}
	h.until("r1", contract.RunExited)
	h.restart()
	if st := h.until("r1", contract.RunExited); st.ExitCode != 0 {
		t.Errorf("after a restart: %+v", st)
	}
	if n := runCreates(h.f, "r1"); n != 1 {
		t.Errorf("%d containers created for r1, want 1", n)
	}
	for _, e := range h.f.Events() {
		if e.Kind == fake.EventRestart {
			t.Errorf("a container restarted: %+v", e)
		}
	}
}

func TestAFailedRunStartIsNotRetriedAcrossARestart(t *testing.T) {
	w, r := web(1), migrate("r1")
	f := fake.New(testHost, runT0, fake.DefaultTiming())
	f.SetBehaviour(contract.SpecHash(r.Workload), fake.Behaviour{StartErr: errors.New("pull web:1: manifest unknown")})
	h := &runAgent{t: t, f: f, cp: newFakeControlPlane(), dir: t.TempDir()}
	h.cp.set(runState(w, r))
	h.start()
	st := h.until("r1", contract.RunFailed)
	if st.Error == "" || !strings.Contains(st.Error, "manifest unknown") {
		t.Errorf("status %+v, want the pull's error", st)
	}
	if rep, _ := h.a.Status(); len(rep.Errors) != 0 {
		t.Errorf("report errors %q: the run's failure belongs in its status only", rep.Errors)
	}
	f.SetBehaviour(contract.SpecHash(r.Workload), fake.Behaviour{})
	h.restart()
	h.until("r1", contract.RunFailed)
	h.neverCreated("r1", "the failed run")
}

func TestARunIsKilledPastItsTimeoutAndStoppedWhenAsked(t *testing.T) {
	w, slow, stopped := web(1), migrate("slow"), migrate("stopped")
	slow.Timeout = 5 * time.Second
	stopped.Workload.Command = []string{"serve-forever"}
	h := newRunAgent(t, runState(w, slow, stopped))
	started := h.until("stopped", contract.RunRunning)

	st := h.until("slow", contract.RunTimedOut)
	if st.EndedAt.Sub(st.StartedAt) < slow.Timeout || st.EndedAt.Sub(st.StartedAt) > slow.Timeout+3*time.Second {
		t.Errorf("timed out after %v, want %v and its stop", st.EndedAt.Sub(st.StartedAt), slow.Timeout)
	}

	stopped.Stop = true
	h.set(runState(w, slow, stopped))
	st = h.until("stopped", contract.RunStopped)
	if st.ContainerID != started.ContainerID || st.EndedAt.IsZero() {
		t.Errorf("status %+v, want its container stopped and kept", st)
	}
	if running(h.f.All(), w) != 1 {
		t.Error("the replica was touched")
	}
}

func TestARunOnAStatefulEggsVolumeStartsOnlyOnceItsReplicaIsGone(t *testing.T) {
	db := statefulDB()
	h := newRunAgent(t, runState(db))
	for range 10 {
		tickAndConverge(t, h.f, h.a)
	}
	if running(h.f.All(), db) != 1 {
		t.Fatal("the replica does not run")
	}
	// `hatch run --stop`: the replica leaves the desired state as the run
	// comes in, in one state.
	r := contract.Run{ID: "r1", Workload: db}
	d := contract.DesiredState{HostID: testHost, Runs: []contract.Run{r}}
	d.Seal()
	h.set(d)
	h.until("r1", contract.RunRunning)
	var replicaGone, runCreated time.Time
	for _, e := range h.f.Events() {
		switch {
		case e.Kind == fake.EventRemove && e.RunID == "":
			replicaGone = e.At
		case e.Kind == fake.EventCreate && e.RunID == "r1":
			runCreated = e.At
		}
	}
	if replicaGone.IsZero() || runCreated.Before(replicaGone) {
		t.Errorf("replica gone at %v, run created at %v: they overlapped", replicaGone, runCreated)
	}
}

func TestARunStoppedWhileItsImageIsPulledNeverStarts(t *testing.T) {
	w, r := web(1), migrate("r1")
	h := newRunAgent(t, runState(w, r)) // the fake's builds take 2s
	eventually(t, "the run pending", func() error {
		if rep, _ := h.a.Status(); len(rep.Runs) != 1 || rep.Runs[0].State != contract.RunPending {
			return fmt.Errorf("runs %+v", rep.Runs)
		}
		return nil
	})
	r.Stop = true
	h.set(runState(w, r))
	h.a.Notify()
	h.until("r1", contract.RunStopped)
	h.neverCreated("r1", "the run stopped before it started")
}

func TestAStatefulEggsReplicaWaitsForARunOnItsVolumeToEnd(t *testing.T) {
	db := statefulDB()
	r := contract.Run{ID: "r1", Workload: db}
	d := contract.DesiredState{HostID: testHost, Runs: []contract.Run{r}}
	d.Seal()
	h := newRunAgent(t, d)
	h.f.SetBehaviour(contract.SpecHash(db), fake.Behaviour{CrashAfter: 5 * time.Second})
	h.until("r1", contract.RunRunning)
	// The replica comes back while the run still runs (a control plane
	// that did not wait for the run's end): it waits.
	d = contract.DesiredState{HostID: testHost, Workloads: []contract.WorkloadSpec{db}, Runs: []contract.Run{r}}
	d.Seal()
	h.set(d)
	h.until("r1", contract.RunExited)
	for i := 0; i < 10 && running(h.f.All(), db) == 0; i++ {
		tickAndConverge(t, h.f, h.a)
	}
	var runEnded, replicaCreated time.Time
	for _, e := range h.f.Events() {
		switch {
		case e.Kind == fake.EventExit && e.RunID == "r1":
			runEnded = e.At
		case e.Kind == fake.EventCreate && e.RunID == "" && e.WorkloadID == db.ID():
			replicaCreated = e.At
		}
	}
	if replicaCreated.IsZero() || replicaCreated.Before(runEnded) {
		t.Errorf("replica created at %v, the run ended at %v: want the replica after the run", replicaCreated, runEnded)
	}
}
