package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

// Runs (contract.Run) are one-off containers of an egg: `hatch run` and the
// ticks of a schedule. The agent starts each run of its desired state at
// most once: its container is named by the run ID, a container that exists
// is the truth (never started again, whatever its state), and what the
// agent learnt of a run that left no container (its start failed, it was
// never started because it was stopped first) is kept in its memory, so a
// restarted agent does not try again. A run's container is kept while its
// run is in the desired state, ended or not, and removed once it leaves it.

// runner is the Docker client's side of runs (the real adapter and the fake
// both have it).
type runner interface {
	// StartRun begins making and starting a run's container, once.
	StartRun(ctx context.Context, req containers.RunRequest) error
	// StopRun begins stopping a run's container, keeping it.
	StopRun(ctx context.Context, req containers.StopRequest) error
	// Failures tells the starts that failed (among the other tasks).
	Failures() []containers.TaskFailure
	// ForgetRun drops the failure of a run that left the desired state.
	ForgetRun(runID string)
	// CancelRun makes a run's start in progress make no container.
	CancelRun(runID string)
}

// runRecord is what the agent remembers of a run between converges and
// across restarts, beyond what its container shows.
type runRecord struct {
	// Failed says why the run could not start; it is never tried again.
	Failed string `json:"failed,omitempty"`
	// Halted is why the agent stopped the run (RunTimedOut or
	// RunStopped); a run stopped before it started has no container.
	Halted contract.RunState `json:"halted,omitempty"`
	// Last is the run's status when its container was last seen: a
	// container removed behind the agent's back leaves this.
	Last *contract.RunStatus `json:"last,omitempty"`
}

// runInput is what planRuns decides from.
type runInput struct {
	hostID string
	runs   []contract.Run
	// actual is every container listed: the runs' and the replicas'.
	actual []containers.Container
	// records is the memory of runs, by ID; planRuns does not change it.
	records map[string]runRecord
	// failures are the runs' failed starts, by run ID.
	failures map[string]string
	// noExec refuses every run (hatch agent --no-exec).
	noExec bool
	// hold starts and removes nothing: the desired state is the cache's, and
	// the control plane may have moved on since it was written.
	hold bool
	now  time.Time
}

// haltStep stops a run's container, keeping it.
type haltStep struct {
	runID string
	req   containers.StopRequest
}

// runPlan is what planRuns decides: the calls to make, the report's
// statuses, and the memory to keep.
type runPlan struct {
	starts []containers.RunRequest
	halts  []haltStep
	// cancels are the runs stopped while their start is in progress: they
	// get no container.
	cancels  []string
	removals []containers.StopRequest
	statuses []contract.RunStatus
	records  map[string]runRecord
	// forget are the runs no longer in the desired state whose failures the
	// Docker client may drop.
	forget []string
	// errors are the runs refused, and other problems worth reporting.
	errors []string
	// wakeAt is the earliest timeout: the agent converges again then.
	wakeAt time.Time
}

// planRuns decides, for each run of the desired state, what to do and how
// it stands, from the listed containers and the agent's memory. Pure.
func planRuns(in runInput) runPlan {
	p := runPlan{records: map[string]runRecord{}}
	byRun := map[string]containers.Container{}
	for _, c := range in.actual {
		if c.RunID != "" && containers.Owned(c.Labels, in.hostID) {
			if _, dup := byRun[c.RunID]; !dup || c.Placeholder() {
				byRun[c.RunID] = c // a start in progress wins over a listing that raced it
			}
		}
	}
	wanted := map[string]bool{}
	for _, r := range in.runs {
		if wanted[r.ID] {
			continue // a duplicate entry: the first one wins
		}
		wanted[r.ID] = true
		rec := in.records[r.ID]
		if reason, ok := in.failures[r.ID]; ok && rec.Failed == "" {
			rec.Failed = reason
		}
		c, ok := byRun[r.ID]
		var st contract.RunStatus
		switch {
		case !ok:
			st = p.noContainer(in, r, &rec)
		case c.Placeholder():
			st = contract.RunStatus{ID: r.ID, State: contract.RunPending}
			if r.Stop {
				p.cancels = append(p.cancels, r.ID)
			}
		default:
			st = p.withContainer(in, r, c, &rec)
		}
		p.records[r.ID] = rec
		p.statuses = append(p.statuses, st)
	}
	for _, c := range in.actual {
		if c.RunID != "" && !c.Placeholder() && !wanted[c.RunID] && !in.hold && containers.Owned(c.Labels, in.hostID) {
			// StopTimeout 0: the container's own, set from its spec.
			p.removals = append(p.removals, containers.StopRequest{ID: c.ID, WorkloadID: c.WorkloadID})
		}
	}
	for id, rec := range in.records {
		if !wanted[id] && in.hold {
			// The cache may be older than the control plane's state, which
			// may still hold the run: what is known of it stays.
			p.records[id] = rec
		}
	}
	for id := range in.failures {
		if !wanted[id] {
			p.forget = append(p.forget, id)
		}
	}
	slices.Sort(p.forget)
	return p
}

// noContainer decides for a run without a container: never started, or one
// whose container is gone.
func (p *runPlan) noContainer(in runInput, r contract.Run, rec *runRecord) contract.RunStatus {
	st := contract.RunStatus{ID: r.ID}
	switch {
	case rec.Last != nil:
		// Seen before, gone now: not started again.
		st = *rec.Last
		if !st.State.Ended() {
			st.State, st.Error = contract.RunFailed, "its container was removed outside Hatchery while it ran"
			st.ContainerID = ""
		}
	case rec.Halted != "":
		st.State = rec.Halted
	case rec.Failed != "":
		st.State, st.Error = contract.RunFailed, rec.Failed
	case r.Stop:
		rec.Halted, st.State = contract.RunStopped, contract.RunStopped
	case in.noExec:
		rec.Failed = "this host's agent runs with --no-exec, which refuses runs"
		st.State, st.Error = contract.RunFailed, rec.Failed
	default:
		if err := runProblem(r); err != nil {
			rec.Failed = err.Error()
			st.State, st.Error = contract.RunFailed, rec.Failed
			p.errors = append(p.errors, fmt.Sprintf("run %s refused: %v", r.ID, err))
			break
		}
		st.State = contract.RunPending
		if holder := volumeHolder(in, r); holder != "" {
			st.Error = "waiting for container " + holder + " of its egg to be gone: it mounts the same volume"
			break
		}
		if in.hold {
			st.Error = "waiting for the control plane to confirm the desired state"
			break
		}
		p.starts = append(p.starts, containers.RunRequest{HostID: in.hostID, RunID: r.ID, Spec: r.Workload,
			SpecHash: contract.SpecHash(r.Workload), TTY: r.TTY})
	}
	return st
}

// withContainer reads a run's state off its container, and stops it if its
// timeout passed or the desired state asks.
func (p *runPlan) withContainer(in runInput, r contract.Run, c containers.Container, rec *runRecord) contract.RunStatus {
	st := contract.RunStatus{ID: r.ID, ContainerID: c.ID, StartedAt: c.StartedAt}
	switch c.State {
	case contract.StateRunning, contract.StateStarting, contract.StateDraining, contract.StateUnknown:
		st.State = contract.RunRunning
		if c.StartedAt.IsZero() {
			st.State = contract.RunPending // created, its start in progress
		}
		halt := rec.Halted
		if halt == "" && r.Stop {
			halt = contract.RunStopped
		}
		if deadline := c.StartedAt.Add(r.Timeout); halt == "" && r.Timeout > 0 && !c.StartedAt.IsZero() {
			if in.now.Before(deadline) {
				p.wakeAt = earliest(p.wakeAt, deadline)
			} else {
				halt = contract.RunTimedOut
			}
		}
		if halt != "" && c.State != contract.StateDraining && !c.StartedAt.IsZero() {
			// Asked again while it runs: the client does not stop it twice,
			// and a stop that failed (or a restarted agent) is retried.
			p.halts = append(p.halts, haltStep{runID: r.ID, req: containers.StopRequest{ID: c.ID, WorkloadID: c.WorkloadID,
				StopTimeout: r.Workload.EffectiveStopTimeout()}})
		}
		rec.Halted = halt
	case contract.StateStopped, contract.StateCompleted, contract.StateCrashed:
		if c.StartedAt.IsZero() {
			// Created, never started, and no start in progress: the agent
			// stopped in between. Not started now, so it never runs twice.
			// A terminal's run waits for its attach session to start it.
			st.State, st.Error = contract.RunFailed, "its container was created but never started (the agent stopped in between)"
			switch {
			case rec.Halted != "" || r.Stop:
				st.State, st.Error = contract.RunStopped, ""
			case r.TTY:
				st.State, st.Error = contract.RunPending, "waiting for its operator's terminal (hatch run -it) to attach"
			}
			break
		}
		st.State = cmp.Or(rec.Halted, contract.RunExited)
		// Docker can date a process ending at once a millisecond before its
		// start: a duration is never negative.
		st.ExitCode, st.EndedAt = c.ExitCode, latest(c.FinishedAt, c.StartedAt)
	default: // building: a placeholder, handled by the caller
		st.State = contract.RunPending
	}
	last := st
	rec.Last = &last
	return st
}

// latest returns the later of two times.
func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// runProblem says why the agent refuses a run: its ID and its workload's
// names go into a container name and paths, so they must be plain names.
func runProblem(r contract.Run) error {
	w := r.Workload
	if !contract.ValidNamePart(r.ID) {
		return errors.New("its ID must be letters, digits, '_', '.' or '-', not starting with '.' or '-'")
	}
	if !contract.ValidNamePart(w.Namespace) || !contract.ValidNamePart(w.Project) || !contract.ValidNamePart(w.Egg) {
		return fmt.Errorf("workload %q: its namespace, project and egg must each be letters, digits, '_', '.' or '-', not starting with '.' or '-'", w.ID())
	}
	return nil
}

// volumeHolder returns a container of the run's egg that may hold its
// volume: a replica that has not exited (a start in progress included). A
// stateful egg's volume is never shared between a run and a replica; the
// control plane takes the replica out of the desired state for the run,
// and the run waits until its container is gone.
func volumeHolder(in runInput, r contract.Run) string {
	if len(r.Workload.Volumes) == 0 {
		return ""
	}
	w := r.Workload
	for _, c := range in.actual {
		if c.RunID != "" || !containers.Owned(c.Labels, in.hostID) {
			continue
		}
		if c.Labels[containers.LabelNamespace] != w.Namespace || c.Labels[containers.LabelProject] != w.Project ||
			c.Labels[containers.LabelEgg] != w.Egg {
			continue
		}
		switch c.State {
		case contract.StateCompleted, contract.StateCrashed, contract.StateStopped:
		default:
			return cmp.Or(c.Name, c.ID)
		}
	}
	return ""
}

// runHolds returns the desired workloads with volumes whose replicas may
// not start now, with the reason: a run of the same egg (made from its
// spec, so on its volumes) has a container that has not ended, or a start
// in progress. The other half of volumeHolder: a stateful egg's replica
// and a run never share the volume, whichever came first. Pure.
func runHolds(desired contract.DesiredState, listed []containers.Container) map[string]string {
	held := map[string]string{}
	for _, w := range desired.Workloads {
		if len(w.Volumes) == 0 {
			continue
		}
		for _, c := range listed {
			if c.RunID == "" || !containers.Owned(c.Labels, desired.HostID) || c.Labels[containers.LabelNamespace] != w.Namespace ||
				c.Labels[containers.LabelProject] != w.Project || c.Labels[containers.LabelEgg] != w.Egg {
				continue
			}
			switch c.State {
			case contract.StateCompleted, contract.StateCrashed, contract.StateStopped:
			default:
				held[w.ID()] = "run " + c.RunID + " of the egg uses its volume until it ends"
			}
		}
	}
	return held
}

// runFailures returns the failed run starts among the Docker client's
// failed tasks, by run ID.
func runFailures(fs []containers.TaskFailure) map[string]string {
	out := map[string]string{}
	for _, f := range fs {
		if f.Task.Kind == containers.TaskStart && f.Task.Placeholder.RunID != "" {
			out[f.Task.Placeholder.RunID] = f.Err.Error()
		}
	}
	return out
}

// withoutRunTasks leaves out the failed starts of runs: the report's Runs
// say why each failed.
func withoutRunTasks(fs []containers.TaskFailure) []containers.TaskFailure {
	return slices.DeleteFunc(fs, func(f containers.TaskFailure) bool {
		return f.Task.Kind == containers.TaskStart && f.Task.Placeholder.RunID != ""
	})
}

// handleRuns plans and carries out the runs of the desired state against
// the listed containers: starts, stops, removals of the containers of runs
// no longer wanted. It returns the runs' statuses, the errors to report,
// and when a timeout falls due.
func (a *Agent) handleRuns(ctx context.Context, desired contract.DesiredState, actual []containers.Container, hold bool, now time.Time) ([]contract.RunStatus, []error, time.Time) {
	rn, ok := a.cfg.Docker.(runner)
	if !ok {
		var statuses []contract.RunStatus
		for _, r := range desired.Runs {
			statuses = append(statuses, contract.RunStatus{ID: r.ID, State: contract.RunFailed, Error: "this agent's Docker client cannot run jobs"})
		}
		return statuses, nil, time.Time{}
	}
	p := planRuns(runInput{hostID: desired.HostID, runs: desired.Runs, actual: actual, records: a.mem.Runs,
		failures: runFailures(rn.Failures()), noExec: a.cfg.NoExec, hold: hold, now: now})
	var errs []error
	for _, e := range p.errors {
		errs = append(errs, errors.New(e))
	}
	for id, rec := range p.records {
		if old, ok := a.mem.Runs[id]; ok && rec.Failed != "" && old.Failed == "" {
			a.log.Warn("run failed to start; it is not tried again", zap.String("run", id), zap.String("reason", rec.Failed))
		}
	}
	a.mem.Runs = p.records
	for _, s := range p.starts {
		a.log.Info("starting run", zap.String("run", s.RunID), zap.String("workload", s.Spec.ID()))
		if err := rn.StartRun(ctx, s); err != nil {
			errs = append(errs, fmt.Errorf("run %s: %w", s.RunID, err))
		}
	}
	for _, id := range p.cancels {
		rn.CancelRun(id)
	}
	for _, h := range p.halts {
		if err := rn.StopRun(ctx, h.req); err != nil {
			errs = append(errs, fmt.Errorf("stop run %s: %w", h.runID, err))
		}
	}
	for _, r := range p.removals {
		a.log.Info("removing the container of a run no longer in the desired state", zap.String("container", r.ID), zap.String("workload", r.WorkloadID))
		if err := a.cfg.Docker.Stop(ctx, r); err != nil {
			errs = append(errs, fmt.Errorf("remove run container: %w", err))
		}
	}
	for _, id := range p.forget {
		rn.ForgetRun(id)
	}
	return p.statuses, errs, p.wakeAt
}

// runNetworks returns the networks the runs use, which housekeeping keeps.
func runNetworks(runs []contract.Run) []string {
	var out []string
	for _, r := range runs {
		out = append(out, r.Workload.Networks...)
	}
	return out
}
