package containers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/contract"
)

// TaskKind names a slow operation a Client runs in the background.
type TaskKind string

const (
	TaskStart   TaskKind = "start"
	TaskDrain   TaskKind = "drain"
	TaskStop    TaskKind = "stop"
	TaskRestart TaskKind = "restart"
	// TaskHalt stops a run's container and keeps it (its exit code and
	// output stay for the run's record and `hatch logs --run`).
	TaskHalt TaskKind = "halt"
)

// Task is one slow operation: a container being built and started, drained,
// stopped or restarted.
type Task struct {
	Kind TaskKind
	// Container is the ID of the container the task works on; for a start,
	// the container it replaces (stop-first), if any.
	Container string
	// Placeholder, for a start, is what List shows until a container named
	// Placeholder.Name is listed: its identity and labels, State building.
	Placeholder Container
	// Began is when the task began; a placeholder's Created time.
	Began time.Time
}

// keys returns what the task occupies: its slot and spec hash for a start (a
// second start of the same thing is a no-op), and the container it works on (one
// operation per container at a time: a drain asked for while the container is
// already stopping is a no-op).
func (t Task) keys() []string {
	var keys []string
	if t.Kind == TaskStart {
		p := t.Placeholder
		if p.RunID != "" {
			// Two runs of one egg share its workload, slot and spec hash.
			keys = append(keys, runKey(p.RunID))
		} else {
			keys = append(keys, "slot "+p.WorkloadID+"/"+strconv.Itoa(p.Slot)+"@"+p.SpecHash)
		}
	}
	if t.Container != "" {
		keys = append(keys, "container "+t.Container)
	}
	return keys
}

func runKey(runID string) string { return "run " + runID }

func (t Task) String() string {
	if t.Kind == TaskStart && t.Placeholder.RunID != "" {
		return "start run " + t.Placeholder.RunID
	}
	if t.Kind == TaskStart {
		return fmt.Sprintf("start %s/%d", t.Placeholder.WorkloadID, t.Placeholder.Slot)
	}
	return fmt.Sprintf("%s %s", t.Kind, t.Container)
}

// TaskFailure is the last failure of a task, kept for the status report until
// the same task succeeds.
type TaskFailure struct {
	Task Task
	Err  error
	At   time.Time
	// Count is how many times in a row the task has failed.
	Count int
}

// Start back-off: a start that failed (an image that cannot be pulled, a
// build context that does not build) is not tried again before RetryAt, so a
// broken spec is not rebuilt on every converge.
const (
	startBackoffFirst = time.Second
	startBackoffMax   = 5 * time.Minute
)

// RetryAt is when a failed start may be tried again: 1 s after its first
// failure, doubling with each failure in a row, at most 5 minutes after.
func (f TaskFailure) RetryAt() time.Time {
	wait := startBackoffMax
	if n := f.Count - 1; n < 20 {
		wait = min(startBackoffFirst<<n, startBackoffMax)
	}
	return f.At.Add(wait)
}

// ErrClosed is returned by Tasks.Go after Close.
var ErrClosed = errors.New("containers: tasks closed")

// Tasks is the bookkeeping of a Client's slow operations, written once for the
// real adapter and the fake: it refuses to begin work already in progress
// (which is what makes Client calls idempotent while their work runs), and it
// overlays the work in progress onto what Docker lists, so that the next Diff
// sees a building slot or a draining container instead of planning the same
// work again.
//
// The real adapter runs each task on a goroutine with Go; the fake, which
// simulates time, calls Begin and End itself. Tasks is safe for concurrent use.
type Tasks struct {
	log *zap.Logger
	now func() time.Time

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // running Go goroutines
	onEnd  func()         // set once, before the first Go

	mu       sync.Mutex
	closed   bool                   // guarded by mu
	inflight map[string]Task        // by key; guarded by mu
	failures map[string]TaskFailure // by first key; guarded by mu
	// removed holds the last containers finished tasks stopped and removed
	// (removedOrder, oldest first, bounds it): a List that read Docker just
	// before a removal must not show the container running. Guarded by mu.
	removed      map[string]bool
	removedOrder []string
	// cancelled are the runs whose start in progress is to make no
	// container (see CancelRun). Guarded by mu.
	cancelled map[string]bool
}

// removedMemory is how many removed containers are remembered: far more
// than can be removed while one List runs.
const removedMemory = 1024

// NewTasks returns an empty task tracker logging to log, on the clock now.
// Both are required: a nil one is a wiring mistake, and it panics here
// rather than at the first task.
func NewTasks(log *zap.Logger, now func() time.Time) *Tasks {
	if log == nil || now == nil {
		panic("containers.NewTasks: nil logger or clock")
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Tasks{
		log: log, now: now, ctx: ctx, cancel: cancel,
		inflight:  map[string]Task{},
		failures:  map[string]TaskFailure{},
		removed:   map[string]bool{},
		cancelled: map[string]bool{},
	}
}

// Begin records t as in progress. It returns false, and records nothing, when
// work on the same slot and spec (a start) or on the same container is already
// in progress, or when the same start failed and its RetryAt is after t.Began:
// the caller then does nothing.
func (ts *Tasks) Begin(t Task) bool {
	if t.Began.IsZero() {
		t.Began = ts.now()
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	keys := t.keys()
	for _, k := range keys {
		if _, busy := ts.inflight[k]; busy {
			return false
		}
	}
	if f, failed := ts.failures[keys[0]]; failed && t.Kind == TaskStart && t.Began.Before(f.RetryAt()) {
		return false
	}
	for _, k := range keys {
		ts.inflight[k] = t
	}
	return true
}

// End records that t finished, with err if it failed.
func (ts *Tasks) End(t Task, err error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	keys := t.keys()
	for _, k := range keys {
		delete(ts.inflight, k)
	}
	if t.Kind == TaskStart {
		delete(ts.cancelled, t.Placeholder.RunID)
	}
	if len(keys) == 0 {
		return
	}
	if err != nil {
		ts.failures[keys[0]] = TaskFailure{Task: t, Err: err, At: ts.now(), Count: ts.failures[keys[0]].Count + 1}
		return
	}
	delete(ts.failures, keys[0])
	// A drain or stop removes its container, and so does a stop-first start
	// the one it replaces; a restart and a halt keep theirs.
	if t.Container != "" && t.Kind != TaskRestart && t.Kind != TaskHalt && !ts.removed[t.Container] {
		ts.removed[t.Container] = true
		ts.removedOrder = append(ts.removedOrder, t.Container)
		if len(ts.removedOrder) > removedMemory {
			delete(ts.removed, ts.removedOrder[0])
			ts.removedOrder = ts.removedOrder[1:]
		}
	}
}

// OnEnd sets a function Go calls after each task it ran has ended (and its
// end is recorded), for example to trigger a converge. Set it before the
// first Go.
func (ts *Tasks) OnEnd(fn func()) { ts.onEnd = fn }

// Go begins t and runs fn on a goroutine the Tasks owns, ending t with fn's
// error, then calling the OnEnd function. fn's context is cancelled by Close.
// Work already in progress is not started twice (Go returns nil). A failure
// is logged here, once: the caller has long returned.
func (ts *Tasks) Go(t Task, fn func(ctx context.Context) error) error {
	ts.mu.Lock()
	closed := ts.closed
	if !closed {
		ts.wg.Add(1)
	}
	ts.mu.Unlock()
	if closed {
		return fmt.Errorf("%s: %w", t, ErrClosed)
	}
	if !ts.Begin(t) {
		ts.wg.Done()
		return nil
	}
	go func() {
		defer ts.wg.Done()
		err := fn(ts.ctx)
		if err != nil {
			ts.log.Warn("task failed", zap.Stringer("task", t), zap.Error(err))
		} else {
			ts.log.Debug("task done", zap.Stringer("task", t))
		}
		ts.End(t, err)
		if ts.onEnd != nil {
			ts.onEnd()
		}
	}()
	return nil
}

// Close cancels the running tasks and waits for them to return, or for ctx.
func (ts *Tasks) Close(ctx context.Context) error {
	ts.mu.Lock()
	ts.closed = true
	ts.mu.Unlock()
	ts.cancel()
	done := make(chan struct{})
	go func() { ts.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close tasks: %w", ctx.Err())
	}
}

// ForgetRun drops the failure of a run's start: a run that failed is never
// started again, so its failure would otherwise stay for good. The agent
// calls it once the run has left its desired state.
func (ts *Tasks) ForgetRun(runID string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	delete(ts.failures, runKey(runID))
}

// CancelRun asks the start in progress of a run, if any, to make no
// container: a run stopped while its image is pulled never starts. The
// start checks RunCancelled before it creates the container; once the
// start has ended there is nothing to cancel (a container is stopped).
func (ts *Tasks) CancelRun(runID string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if _, busy := ts.inflight[runKey(runID)]; busy {
		ts.cancelled[runID] = true
	}
}

// RunCancelled reports whether the start in progress of a run was
// cancelled.
func (ts *Tasks) RunCancelled(runID string) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.cancelled[runID]
}

// InFlight returns the tasks in progress, each once.
func (ts *Tasks) InFlight() []Task {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	out := make([]Task, 0, len(ts.inflight))
	for k, t := range ts.inflight {
		if k == t.keys()[0] {
			out = append(out, t)
		}
	}
	return out
}

// Failures returns the last failure of each task that has not succeeded since.
func (ts *Tasks) Failures() []TaskFailure {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	out := make([]TaskFailure, 0, len(ts.failures))
	for _, f := range ts.failures {
		out = append(out, f)
	}
	return out
}

// Overlay returns listed with the work in progress shown on it: a container
// being drained or stopped is draining, one being restarted is starting (none
// of them healthy, as none is in traffic), and a start whose container is not
// listed yet appears as a building placeholder. A container a finished task
// removed is left out: the list was read before the removal. listed is not
// modified.
func (ts *Tasks) Overlay(listed []Container) []Container {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.inflight) == 0 && len(ts.removed) == 0 {
		return listed
	}
	// Starts whose container already exists, by its name.
	starting := make(map[string]bool)
	for k, t := range ts.inflight {
		if t.Kind == TaskStart && k == t.keys()[0] {
			starting[t.Placeholder.Name] = true
		}
	}
	out := make([]Container, 0, len(listed)+len(ts.inflight))
	listedNames := make(map[string]bool, len(listed))
	for _, c := range listed {
		if ts.removed[c.ID] {
			continue // listed just before a task removed it
		}
		listedNames[c.Name] = true
		if t, ok := ts.inflight["container "+c.ID]; ok {
			switch t.Kind {
			case TaskDrain, TaskStop, TaskHalt:
				c.State, c.Healthy = contract.StateDraining, false
			case TaskRestart:
				c.State, c.Healthy = contract.StateStarting, false
			}
		} else if starting[c.Name] && c.State != contract.StateRunning {
			// Created by a start still in progress: not stopped, about to start.
			c.State = contract.StateStarting
		}
		out = append(out, c)
	}
	var placeholders []Container
	for k, t := range ts.inflight {
		if t.Kind != TaskStart || k != t.keys()[0] || listedNames[t.Placeholder.Name] {
			continue
		}
		p := t.Placeholder
		p.ID = ""
		p.State, p.Healthy = contract.StateBuilding, false
		p.Created = t.Began
		placeholders = append(placeholders, p)
	}
	slices.SortFunc(placeholders, func(a, b Container) int { return strings.Compare(a.Name, b.Name) })
	return append(out, placeholders...)
}

// StartTask returns the task that carries out req, its placeholder showing the
// container-to-be under name with the labels it will have.
func StartTask(req StartRequest, name string, began time.Time) Task {
	labels := req.Stamp.AddTo(Labels(req.HostID, req.Spec, req.Slot, req.SpecHash))
	return Task{
		Kind:        TaskStart,
		Container:   req.Replace,
		Placeholder: FromLabels("", name, labels),
		Began:       began,
	}
}

// StartRunTask returns the task that carries out req, its placeholder
// showing the run's container-to-be with the labels it will have.
func StartRunTask(req RunRequest, began time.Time) Task {
	return Task{
		Kind:        TaskStart,
		Placeholder: FromLabels("", req.Name(), RunLabels(req.HostID, req.Spec, req.SpecHash, req.RunID)),
		Began:       began,
	}
}
