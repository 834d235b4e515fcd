package api

import (
	"time"

	"github.com/hatchery/hatchery/internal/contract"
)

// --- Runs and schedules (jobs) ---

// RunRequest is the body of POST .../eggs/{egg}/runs (`hatch run`): a new
// container from the egg's current spec, with Command instead of the egg's.
type RunRequest struct {
	// Command replaces the egg's command; empty runs the egg's own.
	Command []string `json:"command,omitempty"`
	// Host is where to run it (a host's ID or name); empty lets the control
	// plane choose a host that may run the egg (the host of its volume for
	// a stateful egg).
	Host string `json:"host,omitempty"`
	// Keep keeps the run's container after it ended (its output stays
	// readable with `hatch logs --run`) until the egg's keep_runs prunes it.
	Keep bool `json:"keep,omitempty"`
	// Stop, for a stateful egg, stops the egg's replica for the run (its
	// stop-first window) and starts it again after; without it a run on a
	// running stateful egg is refused, since it would be a second container
	// on the egg's volume.
	Stop bool `json:"stop,omitempty"`
	// Timeout stops the run past it (a Go duration; empty: the egg's
	// schedule's timeout, else none).
	Timeout string `json:"timeout,omitempty"`
	// TTY (`hatch run -it`) gives the run's container a terminal and the
	// operator's input: it starts only once the operator's attach session
	// (GET .../runs/{id}/attach) is connected, so its first output is seen.
	TTY bool `json:"tty,omitempty"`
}

// The triggers of a run.
const (
	TriggerManual   = "manual"   // hatch run
	TriggerSchedule = "schedule" // a tick of the egg's schedule, on time
	TriggerFailover = "failover" // a volume's restore on another host when its host was lost
	TriggerMissed   = "missed"   // a tick run late, within its starting deadline, after the control plane was away
	TriggerFire     = "fire"     // hatch schedule run: a scheduled egg fired by hand
)

// Run is one run of an egg, as the control plane recorded it: GET
// .../runs and .../runs/{id}, and the answer of POST .../runs.
type Run struct {
	ID        string `json:"id"`
	Namespace string `json:"namespace"`
	Project   string `json:"project"`
	Egg       string `json:"egg"`
	// Host is the host's ID the run was placed on, and HostName its name.
	Host     string `json:"host"`
	HostName string `json:"host_name,omitempty"`
	Trigger  string `json:"trigger"`
	// Actor made a manual run or fired a schedule ("" for a schedule's).
	Actor string `json:"actor,omitempty"`
	// ScheduledAt is the tick a scheduled run is for; zero for a manual run.
	ScheduledAt time.Time `json:"scheduled_at,omitzero"`
	CreatedAt   time.Time `json:"created_at"`
	// DeliveredAt is when the run was put in its host's desired state
	// (zero: not yet; Host may then name the host asked for).
	DeliveredAt time.Time `json:"delivered_at,omitzero"`
	// Delay is how long the run waited for its project's lease (an apply
	// held it) before it was delivered.
	Delay     time.Duration `json:"delay,omitempty"`
	StartedAt time.Time     `json:"started_at,omitzero"`
	EndedAt   time.Time     `json:"ended_at,omitzero"`
	// State is contract.RunState's, or "lost" for a run whose host was lost
	// before it reported the run's end (never run again), or "missed" for a
	// tick outside its starting deadline (never run).
	State    string `json:"state"`
	ExitCode int    `json:"exit_code,omitempty"`
	Error    string `json:"error,omitempty"`
	// Kept: the container is kept after the run's end (--keep, or one of
	// the egg's last keep_runs scheduled runs).
	Kept bool `json:"kept,omitempty"`
	// TTY: a terminal's run (`hatch run -it`), started by its attach session.
	TTY bool `json:"tty,omitempty"`
}

// The states a run has in the control plane's record beyond the agent's
// (contract.RunState).
const (
	RunLost   = "lost"
	RunMissed = "missed"
)

// Ended reports whether the run is over, never to run again: its host
// reported its end (contract.RunState.Ended), or the control plane
// recorded it lost or missed.
func (r Run) Ended() bool {
	return contract.RunState(r.State).Ended() || r.State == RunLost || r.State == RunMissed
}

// Runs is the answer of GET .../runs.
type Runs struct {
	Runs []Run `json:"runs"`
}

// Schedule is a scheduled egg's schedule as `hatch status` and `hatch
// schedule` show it.
type Schedule struct {
	Egg string `json:"egg"`
	// Spec is the schedule as written ("every 15m", "cron 0 3 * * * Europe/Berlin").
	Spec   string    `json:"spec"`
	Paused bool      `json:"paused,omitempty"`
	Next   time.Time `json:"next,omitzero"`
	// LastRun is the last run's ID, "" for none yet.
	LastRun string `json:"last_run,omitempty"`
}

// Schedules is the answer of GET .../schedules.
type Schedules struct {
	Schedules []Schedule `json:"schedules"`
}
