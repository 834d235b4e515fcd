package store

import (
	"context"
	"time"
)

// The events of runs and schedules (issue 28).
const (
	// EventRunManual: an admin ran a command in a new container of an egg
	// (`hatch run`); Actor names them.
	EventRunManual EventType = "run.manual"
	// EventRunFailed: a run ended with a non-zero exit code, could not
	// start, or found no host before its starting deadline.
	EventRunFailed EventType = "run.failed"
	// EventRunTimedOut: a run was stopped past its timeout.
	EventRunTimedOut EventType = "run.timed_out"
	// EventRunLost: a run's host was lost before it reported the run's end;
	// it is never run again.
	EventRunLost EventType = "run.lost"
	// EventRunMissed: ticks of a schedule passed beyond their starting
	// deadline while no server ran the scheduler.
	EventRunMissed EventType = "run.missed"
	// EventScheduleFired, EventSchedulePaused, EventScheduleResumed: an
	// admin fired a scheduled egg by hand, paused or resumed its schedule.
	EventScheduleFired   EventType = "schedule.fired"
	EventSchedulePaused  EventType = "schedule.paused"
	EventScheduleResumed EventType = "schedule.resumed"
)

// The states of a run record. A run is recorded pending, and its host's
// reports move it to contract.RunState's running and then one of the ended
// ones (exited, timed_out, stopped, failed); the control plane itself ends
// a run lost (its host was lost first), failed (no host took it in time)
// or stopped (stopped before it was delivered). A tick never run is
// recorded as missed (outside its starting deadline) or skipped (its
// egg's previous run still ran, under concurrency: forbid).
const (
	RunPending  = "pending"
	RunRunning  = "running"
	RunExited   = "exited"
	RunTimedOut = "timed_out"
	RunStopped  = "stopped"
	RunFailed   = "failed"
	RunLost     = "lost"
	RunMissed   = "missed"
	RunSkipped  = "skipped"
)

// RunEnded reports whether a run in state has ended: its end is recorded
// and it never runs again.
func RunEnded(state string) bool { return state != RunPending && state != RunRunning }

// Run is one recorded run of an egg (api.Run is what users see of it).
type Run struct {
	// ID is unique in the cluster: it names the run's container.
	ID      string
	Project string // "<namespace>/<project>"
	Egg     string
	// Host is the host's ID it was delivered to ("" until then), or, set
	// at creation, the host it must run on (`hatch run --host`).
	Host    string
	Trigger string // api.Trigger*
	Actor   string
	// ScheduledAt is the tick a scheduled run is for (zero for a manual
	// run or a fire): no two runs of an egg are recorded for one tick.
	ScheduledAt time.Time
	CreatedAt   time.Time
	// DeliveredAt is when the run was put in its host's desired state (zero:
	// not yet), and Delay how long it waited for its project's lease.
	DeliveredAt time.Time
	Delay       time.Duration
	StartedAt   time.Time
	EndedAt     time.Time
	State       string // Run* above
	ExitCode    int
	Error       string
	// Kept: the container is kept after the run's end (--keep, or a
	// scheduled run among its egg's last keep_runs).
	Kept bool
	// Command replaces the egg's (nil: the egg's own).
	Command []string
	Timeout time.Duration
	// StopRequested: the run is to be stopped (Ctrl-C, concurrency:
	// replace).
	StopRequested bool
	// StopEgg: a run of a stateful egg made with --stop: the egg's
	// replica on the run's host is stopped while the run is delivered.
	StopEgg bool
	// TTY: `hatch run -it`: the run's container gets a terminal and its
	// operator's input, and starts only once the operator's attach session
	// is connected, so no output is lost before it.
	TTY bool
	// Missed is, for a run recorded missed, how many ticks it stands for
	// (ScheduledAt is the last of them).
	Missed int
	// ReleasedAt is when the run left its host's desired state (zero: it
	// is there, or was never delivered).
	ReleasedAt time.Time
}

// RunProgress is what a host reported of a run (contract.RunStatus), or
// what the control plane decided of it (lost, failed).
type RunProgress struct {
	State     string
	StartedAt time.Time
	EndedAt   time.Time
	ExitCode  int
	Error     string
}

// RunFilter selects runs.
type RunFilter struct {
	Project string // "" for every project
	Egg     string // "" for every egg (of Project)
	// Unreleased selects the runs that are not out of their host's desired
	// state yet: pending, running, or ended and kept or not yet removed.
	Unreleased bool
	// Limit bounds the runs returned (0: no bound).
	Limit int
}

// ScheduleState is what the scheduler keeps of a scheduled egg between
// ticks, and across a takeover.
type ScheduleState struct {
	Project string
	Egg     string
	Paused  bool
	// LastTick is the last tick the scheduler decided (ran, skipped or
	// counted missed): the next pass looks at the ticks after it.
	LastTick  time.Time
	UpdatedAt time.Time
}

// Runs is what the jobs service records of runs. Writes made by the
// scheduler carry the loops' lease as a fence (WithFence), and those that
// go with a change of a project's desired state its lease too.
type Runs interface {
	// CreateRuns records new runs in one transaction. A run whose ID, or
	// whose egg and ScheduledAt (non-zero), is recorded already gives
	// ErrExists and nothing is kept. If tick is not nil its LastTick is
	// stored as its schedule's in the same transaction, only if it is
	// later than the stored one (ErrExists otherwise: another pass decided
	// those ticks), so a tick is decided once whoever decides it.
	CreateRuns(ctx context.Context, runs []Run, tick *ScheduleState) error
	// Run returns one run, or ErrNotFound.
	Run(ctx context.Context, id string) (Run, error)
	// ListRuns returns the runs f selects, newest first (by CreatedAt, then ID).
	ListRuns(ctx context.Context, f RunFilter) ([]Run, error)
	// DeliverRun records that the run was put in host's desired state at
	// at, after delay. A run delivered already keeps its first delivery.
	DeliverRun(ctx context.Context, id, host string, at time.Time, delay time.Duration) error
	// RecordRunProgress records p of a run that has not ended, and reports
	// whether anything changed; a run ended already changes no more (its
	// first recorded end stands). Unknown ID: ErrNotFound.
	RecordRunProgress(ctx context.Context, id string, p RunProgress) (bool, error)
	// RequestRunStop marks the run to be stopped (it reports whether it
	// was not already).
	RequestRunStop(ctx context.Context, id string) (bool, error)
	// SetRunKept sets whether the run's container is kept after its end.
	SetRunKept(ctx context.Context, id string, kept bool) error
	// ReleaseRun records that the run left its host's desired state at at.
	ReleaseRun(ctx context.Context, id string, at time.Time) error
	// PruneRuns deletes the records of released runs beyond the newest
	// keep of each egg (their containers are gone already), so a schedule
	// every few seconds does not grow the table for ever; it returns how
	// many it deleted.
	PruneRuns(ctx context.Context, keep int) (int64, error)
	// LastSuccesses returns, for every egg with a scheduled or fired run
	// (not a manual one) that exited 0, when the last one ended: project ->
	// egg -> time.
	LastSuccesses(ctx context.Context) (map[string]map[string]time.Time, error)
}

// ScheduleStates keeps the scheduled eggs' schedule states.
type ScheduleStates interface {
	// ListScheduleStates returns the states of project's scheduled eggs ("" for
	// every project), sorted by project and egg.
	ListScheduleStates(ctx context.Context, project string) ([]ScheduleState, error)
	// InitSchedule records s unless its egg has a state: the first call
	// wins (it reports whether it recorded s).
	InitSchedule(ctx context.Context, s ScheduleState) (bool, error)
	// PauseSchedule sets whether the egg's schedule is paused, creating its
	// state if it has none, and reports whether it changed. Resuming sets
	// its LastTick to lastTick (now): the ticks of the pause never run.
	PauseSchedule(ctx context.Context, project, egg string, paused bool, lastTick, at time.Time) (bool, error)
}
