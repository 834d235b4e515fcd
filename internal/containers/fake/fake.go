// Package fake is an in-memory containers.Client for the pure tests of the converge
// engine and the agent. Time is simulated: nothing happens until the test moves
// the fake's clock with Advance, so every run is deterministic.
//
// Like the real adapter, the fake only starts work in its Client calls (a
// start takes Timing.Build before its container exists, a drain Timing.Drain
// plus Timing.Stop before it is gone...), tracks it with containers.Tasks, and lists
// only the containers labelled for its host. It also holds foreign containers
// (added with Add), records every lifecycle event for invariant checks, and
// injects faults: errors from any call, crashes, failing health checks.
package fake

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

// Timing is how long simulated operations take.
type Timing struct {
	// Build is the image pull or build before a container is created.
	Build time.Duration
	// Boot is from (re)start to running.
	Boot time.Duration
	// Healthy is from (re)start to the first passing health check.
	Healthy time.Duration
	// Drain is the wait for in-flight requests before a drain stops.
	Drain time.Duration
	// Stop is from the stop signal to removal (or, for a restart, to the
	// new start).
	Stop time.Duration
	// CheckInterval is the health check period: a failing container's
	// FailingStreak grows by one per interval.
	CheckInterval time.Duration
}

// DefaultTiming returns a few seconds for each operation.
func DefaultTiming() Timing {
	return Timing{Build: 2 * time.Second, Boot: time.Second, Healthy: 2 * time.Second,
		Drain: 2 * time.Second, Stop: time.Second, CheckInterval: time.Second}
}

// Behaviour is how containers of one spec hash behave, to simulate a bad image.
type Behaviour struct {
	// NeverHealthy makes every health check fail.
	NeverHealthy bool
	// CrashAfter, if set, makes the process exit this long after each start,
	// with ExitCode.
	CrashAfter time.Duration
	ExitCode   int
	// StartErr, if set, makes a start fail after Timing.Build (an image
	// that cannot be pulled): the task ends with it, no container is made.
	StartErr error
}

// Op names a Client call, for fault injection.
type Op string

const (
	OpList    Op = "list"
	OpStart   Op = "start"
	OpDrain   Op = "drain"
	OpStop    Op = "stop"
	OpRestart Op = "restart"
	OpLogs    Op = "logs"
	// OpStartRun and OpStopRun are StartRun and StopRun; their target is
	// the run ID, and the container ID.
	OpStartRun Op = "start-run"
	OpStopRun  Op = "stop-run"
)

// EventKind names a lifecycle event.
type EventKind string

const (
	EventCreate  EventKind = "create"  // a container now exists
	EventRestart EventKind = "restart" // restarted in place
	EventExit    EventKind = "exit"    // its process exited (crash, completion)
	EventRemove  EventKind = "remove"  // it no longer exists
	EventDrain   EventKind = "drain"   // a drain began: out of traffic
	EventStop    EventKind = "stop"    // a stop began
)

// Event is one lifecycle event, in the order they happened.
type Event struct {
	At         time.Time
	Kind       EventKind
	ID         string
	WorkloadID string
	Slot       int
	SpecHash   string
	// RunID is the run of a run's container (containers.LabelRun).
	RunID string
	// Healthy tells whether the container was passing its health checks
	// just before the event.
	Healthy bool
}

// Fake is an in-memory Docker host. It is safe for concurrent use.
type Fake struct {
	host  string
	tasks *containers.Tasks

	mu  sync.Mutex
	now time.Time // guarded by mu
	// clock is now, readable without mu: the tasks' clock, which Tasks.End
	// reads while the fake holds mu (a start that fails).
	clock      atomic.Int64
	timing     Timing               // guarded by mu
	behaviour  map[string]Behaviour // by spec hash; guarded by mu
	containers map[string]*ctr      // by ID, foreign ones included; guarded by mu
	pending    []scheduled          // future work, in time order; guarded by mu
	events     []Event              // guarded by mu
	foreign    []string             // calls aimed at foreign containers; guarded by mu
	fault      func(Op, string) error
	seq        int // IDs and ordering; guarded by mu
}

var (
	_ containers.Client    = (*Fake)(nil)
	_ containers.LogReader = (*Fake)(nil)
)

// ctr is one container. Its state at any time follows from these fields.
type ctr struct {
	id, name string
	labels   map[string]string
	seq      int

	created, startedAt, finishedAt time.Time
	// incarnation counts starts, so that a crash scheduled for one start does
	// not hit the next.
	incarnation int
	exited      bool
	stoppedOut  bool // exited because stopped, not by itself
	exitCode    int
	unknown     bool
	// healthyAt is when health checks start passing; zero for never.
	healthyAt time.Time
	// failingSince, if set, is when health checks started failing.
	failingSince time.Time
	logs         []string
}

type scheduled struct {
	at  time.Time
	seq int
	run func()
}

// New returns an empty Docker host for hostID whose clock reads start.
func New(hostID string, start time.Time, timing Timing) *Fake {
	f := &Fake{
		host: hostID, now: start, timing: timing,
		behaviour:  map[string]Behaviour{},
		containers: map[string]*ctr{},
	}
	f.clock.Store(start.UnixNano())
	// A fake's task failures show in its Failures, not in logs.
	f.tasks = containers.NewTasks(zap.NewNop(), func() time.Time { return time.Unix(0, f.clock.Load()).In(start.Location()) })
	return f
}

// Now returns the fake's clock.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the clock by d, carrying out the work that falls due, in order.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	target := f.now.Add(d)
	for len(f.pending) > 0 && !f.pending[0].at.After(target) {
		next := f.pending[0]
		f.pending = f.pending[1:]
		f.setNow(next.at)
		next.run()
	}
	f.setNow(target)
}

func (f *Fake) setNow(t time.Time) {
	f.now = t
	f.clock.Store(t.UnixNano())
}

// SetTiming changes how long operations begun from now on take.
func (f *Fake) SetTiming(t Timing) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.timing = t
}

// SetBehaviour makes containers of a spec hash behave as b from their next
// (re)start on.
func (f *Fake) SetBehaviour(specHash string, b Behaviour) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.behaviour[specHash] = b
}

// SetFault makes every Client call ask fn first: a non-nil error is returned
// from the call, which then does nothing. target is the container ID, or
// "workload/slot" for a start, or "" for a list. nil removes the fault. fn is
// called with the fake locked and must not call it back.
func (f *Fake) SetFault(fn func(op Op, target string) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fault = fn
}

// Add puts an existing container on the host as it is described: any labels
// (foreign ones too), and State running (Healthy or not), starting, crashed,
// completed, stopped or unknown. A container added unhealthy stays so until it
// is restarted. It returns the container's ID (c.ID, or a new one).
func (f *Fake) Add(c containers.Container) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := f.newCtr(c.ID, c.Name, maps.Clone(c.Labels))
	k.created = cmp.Or(c.Created, f.now)
	k.startedAt = cmp.Or(c.StartedAt, k.created)
	switch c.State {
	case contract.StateCrashed, contract.StateCompleted, contract.StateStopped:
		k.exited, k.exitCode = true, c.ExitCode
		if c.State == contract.StateCrashed && c.ExitCode == 0 {
			k.exitCode = 1
		}
		if c.State == contract.StateCompleted {
			k.exitCode = 0
		}
		k.stoppedOut = c.State == contract.StateStopped
		k.finishedAt = cmp.Or(c.FinishedAt, f.now)
	case contract.StateStarting:
		k.startedAt = f.now
		k.healthyAt = f.now.Add(f.timing.Healthy)
	case contract.StateUnknown:
		k.unknown = true
	default: // running
		k.startedAt = f.now.Add(-f.timing.Boot)
		if c.Healthy {
			k.healthyAt = k.startedAt
		}
	}
	return k.id
}

// Crash makes a container's process exit now with code (0: it completed).
func (f *Fake) Crash(id string, code int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	k, ok := f.containers[id]
	if !ok {
		return fmt.Errorf("crash %s: %w", id, containers.ErrNotFound)
	}
	f.exit(k, code)
	return nil
}

// FailHealth makes a container's health checks fail from now on (failing
// true) or pass again (false).
func (f *Fake) FailHealth(id string, failing bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	k, ok := f.containers[id]
	if !ok {
		return fmt.Errorf("fail health %s: %w", id, containers.ErrNotFound)
	}
	if !failing {
		k.failingSince = time.Time{}
	} else if k.failingSince.IsZero() {
		k.failingSince = f.now
	}
	return nil
}

// SetLogs sets what Logs returns for a container.
func (f *Fake) SetLogs(id string, lines []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if k, ok := f.containers[id]; ok {
		k.logs = slices.Clone(lines)
	}
}

// All returns every container on the host, foreign ones included, without
// the overlay of work in progress, in creation order.
func (f *Fake) All() []containers.Container {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.snapshot(func(*ctr) bool { return true })
}

// Snapshot returns what List would return, without faults or a context: for
// tests that check invariants while the engine runs.
func (f *Fake) Snapshot() []containers.Container {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tasks.Overlay(f.snapshot(func(k *ctr) bool { return containers.Owned(k.labels, f.host) }))
}

// Events returns the lifecycle events so far.
func (f *Fake) Events() []Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.events)
}

// ForeignCalls returns the calls aimed at containers that are not this
// host's (refused with containers.ErrNotFound), as "op id".
func (f *Fake) ForeignCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.foreign)
}

// Pending reports whether any simulated work is still to happen.
func (f *Fake) Pending() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pending) > 0
}

// List returns this host's containers with the work in progress overlaid.
func (f *Fake) List(ctx context.Context) ([]containers.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(ctx, OpList, ""); err != nil {
		return nil, err
	}
	own := f.snapshot(func(k *ctr) bool { return containers.Owned(k.labels, f.host) })
	return f.tasks.Overlay(own), nil
}

// Start begins building and starting a container for a slot: after
// Timing.Build it exists and starts; with req.Replace, the replaced container
// is stopped first (Timing.Stop) and the new one created after it is gone.
func (f *Fake) Start(ctx context.Context, req containers.StartRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(ctx, OpStart, req.Spec.ID()+"/"+strconv.Itoa(req.Slot)); err != nil {
		return err
	}
	if req.HostID != f.host {
		return fmt.Errorf("start %s/%d: host %q is not this host (%q)", req.Spec.ID(), req.Slot, req.HostID, f.host)
	}
	if req.Replace != "" && !f.owned(req.Replace) {
		f.foreign = append(f.foreign, "start-replace "+req.Replace)
		return fmt.Errorf("start %s/%d: replace %s: %w", req.Spec.ID(), req.Slot, req.Replace, containers.ErrNotFound)
	}
	f.seq++
	name := contract.ContainerName(req.Spec.Namespace, req.Spec.Project, req.Spec.Egg, req.Slot, f.host, fmt.Sprintf("%06x", f.seq))
	task := containers.StartTask(req, name, f.now)
	if !f.tasks.Begin(task) {
		return nil
	}
	create := func() {
		if err := f.behaviour[req.SpecHash].StartErr; err != nil {
			f.tasks.End(task, fmt.Errorf("start %s/%d: %w", req.Spec.ID(), req.Slot, err))
			return
		}
		k := f.newCtr("", name, req.Stamp.AddTo(containers.Labels(req.HostID, req.Spec, req.Slot, req.SpecHash)))
		k.created = f.now
		f.start(k)
		f.record(EventCreate, k)
		f.tasks.End(task, nil)
	}
	if old, ok := f.containers[req.Replace]; ok && req.Replace != "" {
		f.after(f.timing.Build, func() {
			f.record(EventStop, old)
			f.after(f.stopTime(old), func() {
				f.remove(old)
				create()
			})
		})
		return nil
	}
	f.after(f.timing.Build, create)
	return nil
}

// StartRun begins a run's container: after Timing.Build it exists and
// starts, unless a container of its name exists by then (it is left alone,
// as Docker's name conflict leaves it), the start was cancelled
// (CancelRun), or its spec hash's StartErr fails the task.
func (f *Fake) StartRun(ctx context.Context, req containers.RunRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(ctx, OpStartRun, req.RunID); err != nil {
		return err
	}
	if req.HostID != f.host {
		return fmt.Errorf("start run %s: host %q is not this host (%q)", req.RunID, req.HostID, f.host)
	}
	task := containers.StartRunTask(req, f.now)
	if !f.tasks.Begin(task) {
		return nil
	}
	f.after(f.timing.Build, func() {
		if err := f.behaviour[req.SpecHash].StartErr; err != nil {
			f.tasks.End(task, fmt.Errorf("start run %s: %w", req.RunID, err))
			return
		}
		if !f.named(req.Name()) && !f.tasks.RunCancelled(req.RunID) {
			k := f.newCtr("", req.Name(), containers.RunLabels(req.HostID, req.Spec, req.SpecHash, req.RunID))
			k.created = f.now
			f.start(k)
			f.record(EventCreate, k)
		}
		f.tasks.End(task, nil)
	})
	return nil
}

// StopRun begins stopping a run's container and keeps it: after
// Timing.Stop it has exited, stopped, with code 143 (SIGTERM's).
func (f *Fake) StopRun(ctx context.Context, req containers.StopRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(ctx, OpStopRun, req.ID); err != nil {
		return err
	}
	k, err := f.mine(OpStopRun, req.ID)
	if k == nil {
		return err
	}
	task := containers.Task{Kind: containers.TaskHalt, Container: k.id, Began: f.now}
	if !f.tasks.Begin(task) {
		return nil
	}
	f.record(EventStop, k)
	f.after(f.stopTime(k), func() {
		if !k.exited {
			f.exit(k, 143)
			k.stoppedOut = true
		}
		f.tasks.End(task, nil)
	})
	return nil
}

// Failures returns the last failure of each task that has not succeeded
// since (a start that failed with its Behaviour's StartErr).
func (f *Fake) Failures() []containers.TaskFailure { return f.tasks.Failures() }

// CancelRun makes a run's start in progress make no container.
func (f *Fake) CancelRun(runID string) { f.tasks.CancelRun(runID) }

// ForgetRun drops the failure of a run's start.
func (f *Fake) ForgetRun(runID string) { f.tasks.ForgetRun(runID) }

// named reports whether a container of that name exists.
func (f *Fake) named(name string) bool {
	for _, k := range f.containers {
		if k.name == name {
			return true
		}
	}
	return false
}

// Drain begins draining a container: out of traffic now, then after
// Timing.Drain it is stopped and, Timing.Stop later, removed.
func (f *Fake) Drain(ctx context.Context, req containers.StopRequest) error {
	return f.takeDown(ctx, OpDrain, req)
}

// Stop begins stopping a container: removed after Timing.Stop, or at once if
// it is not running.
func (f *Fake) Stop(ctx context.Context, req containers.StopRequest) error {
	return f.takeDown(ctx, OpStop, req)
}

func (f *Fake) takeDown(ctx context.Context, op Op, req containers.StopRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(ctx, op, req.ID); err != nil {
		return err
	}
	k, err := f.mine(op, req.ID)
	if k == nil {
		return err
	}
	kind, event := containers.TaskStop, EventStop
	if op == OpDrain {
		kind, event = containers.TaskDrain, EventDrain
	}
	task := containers.Task{Kind: kind, Container: k.id, Began: f.now}
	if !f.tasks.Begin(task) {
		return nil
	}
	f.record(event, k)
	delay := f.stopTime(k)
	if op == OpDrain && !k.exited {
		delay += f.timing.Drain
	}
	f.after(delay, func() {
		f.remove(k)
		f.tasks.End(task, nil)
	})
	return nil
}

// Restart begins restarting a container in place, unless it was started after
// req.StartedAt: a running one after Timing.Stop, an exited one at once.
func (f *Fake) Restart(ctx context.Context, req containers.RestartRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(ctx, OpRestart, req.ID); err != nil {
		return err
	}
	k, err := f.mine(OpRestart, req.ID)
	if k == nil {
		return err
	}
	if k.startedAt.After(req.StartedAt) {
		return nil
	}
	task := containers.Task{Kind: containers.TaskRestart, Container: k.id, Began: f.now}
	if !f.tasks.Begin(task) {
		return nil
	}
	f.after(f.stopTime(k), func() {
		if _, ok := f.containers[k.id]; ok {
			f.start(k)
			f.record(EventRestart, k)
		}
		f.tasks.End(task, nil)
	})
	return nil
}

// Logs returns the last lines set with SetLogs.
func (f *Fake) Logs(ctx context.Context, id string, lines int) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(ctx, OpLogs, id); err != nil {
		return nil, err
	}
	k, err := f.mine(OpLogs, id)
	if k == nil {
		return nil, cmp.Or(err, fmt.Errorf("logs %s: %w", id, containers.ErrNotFound))
	}
	return slices.Clone(k.logs[max(0, len(k.logs)-lines):]), nil
}

// check runs the context and fault checks every call starts with.
func (f *Fake) check(ctx context.Context, op Op, target string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s %s: %w", op, target, err)
	}
	if f.fault != nil {
		if err := f.fault(op, target); err != nil {
			return fmt.Errorf("%s %s: %w", op, target, err)
		}
	}
	return nil
}

func (f *Fake) owned(id string) bool {
	k, ok := f.containers[id]
	return ok && containers.Owned(k.labels, f.host)
}

// mine returns this host's container id. A container that is gone is not an
// error (the call is a no-op); a foreign one is refused, and recorded.
func (f *Fake) mine(op Op, id string) (*ctr, error) {
	k, ok := f.containers[id]
	if !ok {
		return nil, nil
	}
	if !containers.Owned(k.labels, f.host) {
		f.foreign = append(f.foreign, string(op)+" "+id)
		return nil, fmt.Errorf("%s %s: %w", op, id, containers.ErrNotFound)
	}
	return k, nil
}

func (f *Fake) newCtr(id, name string, labels map[string]string) *ctr {
	f.seq++
	if id == "" {
		id = fmt.Sprintf("c%05d", f.seq)
	}
	if name == "" {
		name = "ctr-" + id
	}
	k := &ctr{id: id, name: name, labels: labels, seq: f.seq}
	f.containers[id] = k
	return k
}

// start (re)starts k's process now, with its spec hash's behaviour.
func (f *Fake) start(k *ctr) {
	b := f.behaviour[k.labels[containers.LabelSpec]]
	k.incarnation++
	// Simulated time can stand still between two starts; real start times
	// differ, and Restart tells incarnations apart by them.
	if k.startedAt.Before(f.now) {
		k.startedAt = f.now
	} else {
		k.startedAt = k.startedAt.Add(time.Nanosecond)
	}
	k.exited, k.stoppedOut, k.unknown, k.exitCode = false, false, false, 0
	k.failingSince = time.Time{}
	k.healthyAt = time.Time{}
	if !b.NeverHealthy {
		k.healthyAt = f.now.Add(max(f.timing.Healthy, f.timing.Boot))
	}
	if b.CrashAfter > 0 {
		inc := k.incarnation
		f.after(b.CrashAfter, func() {
			if k.incarnation == inc && !k.exited && f.containers[k.id] == k {
				f.exit(k, b.ExitCode)
			}
		})
	}
}

func (f *Fake) exit(k *ctr, code int) {
	if k.exited {
		return
	}
	f.record(EventExit, k)
	k.exited, k.exitCode, k.finishedAt = true, code, f.now
}

func (f *Fake) remove(k *ctr) {
	if f.containers[k.id] != k {
		return
	}
	f.record(EventRemove, k)
	delete(f.containers, k.id)
}

// stopTime is how long stopping k takes: nothing if it is not running.
func (f *Fake) stopTime(k *ctr) time.Duration {
	if k.exited {
		return 0
	}
	return f.timing.Stop
}

// after schedules run d from now; work due now runs before the call returns.
func (f *Fake) after(d time.Duration, run func()) {
	f.seq++
	s := scheduled{at: f.now.Add(d), seq: f.seq, run: run}
	i, _ := slices.BinarySearchFunc(f.pending, s, func(a, b scheduled) int {
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.seq, b.seq))
	})
	f.pending = slices.Insert(f.pending, i, s)
	if d <= 0 {
		for len(f.pending) > 0 && !f.pending[0].at.After(f.now) {
			next := f.pending[0]
			f.pending = f.pending[1:]
			next.run()
		}
	}
}

func (f *Fake) record(kind EventKind, k *ctr) {
	v := f.view(k)
	f.events = append(f.events, Event{At: f.now, Kind: kind, ID: k.id, WorkloadID: v.WorkloadID,
		Slot: v.Slot, SpecHash: v.SpecHash, RunID: v.RunID, Healthy: v.Healthy && v.State == contract.StateRunning})
}

func (f *Fake) snapshot(keep func(*ctr) bool) []containers.Container {
	ks := make([]*ctr, 0, len(f.containers))
	for _, k := range f.containers {
		if keep(k) {
			ks = append(ks, k)
		}
	}
	slices.SortFunc(ks, func(a, b *ctr) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]containers.Container, len(ks))
	for i, k := range ks {
		out[i] = f.view(k)
	}
	return out
}

// view describes k as a Client lists it, at the fake's current time.
func (f *Fake) view(k *ctr) containers.Container {
	c := containers.FromLabels(k.id, k.name, maps.Clone(k.labels))
	c.Created, c.StartedAt, c.FinishedAt, c.ExitCode = k.created, k.startedAt, k.finishedAt, k.exitCode
	switch {
	case k.exited && k.stoppedOut:
		c.State = contract.StateStopped
	case k.exited && k.exitCode == 0:
		c.State = contract.StateCompleted
	case k.exited:
		c.State = contract.StateCrashed
	case k.unknown:
		c.State = contract.StateUnknown
	case f.now.Before(k.startedAt.Add(f.timing.Boot)):
		c.State = contract.StateStarting
	default:
		c.State = contract.StateRunning
		c.IP = fmt.Sprintf("10.0.%d.%d", k.seq/250, 1+k.seq%250)
		interval := max(f.timing.CheckInterval, time.Millisecond)
		switch {
		case !k.failingSince.IsZero():
			c.FailingStreak = 1 + int(f.now.Sub(k.failingSince)/interval)
		case k.healthyAt.IsZero():
			c.FailingStreak = 1 + int(f.now.Sub(k.startedAt.Add(f.timing.Boot))/interval)
		case f.now.Before(k.healthyAt):
			// Still booting: no check has passed, none counts as failed yet.
		default:
			c.Healthy = true
		}
	}
	return c
}
