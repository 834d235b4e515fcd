// Package converge holds the diff and converge logic at the heart of the
// agent. It compares the desired state (from the control plane) against the
// actual state (containers on the host carrying Hatchery's labels and this
// host's ID) and converges: start missing, stop extra, restart crashed or
// unhealthy, roll stale ones. Every operation is idempotent and safely
// retryable, so a converge that is interrupted and re-run reaches the same end
// state.
//
// Diff is pure: the clock and the agent's History (restarts, health streaks,
// failed rollouts) are inputs, so the rules are table- and property-tested
// without I/O. Apply only starts the slow work (builds, drains, stops) through
// the containers.Client, which tracks it as tasks the agent owns; the next Diff
// sees the slot building or the container draining and does not start the same
// work twice. The logic depends only on containers.Client, so it is tested against
// the in-memory fake (containers/fake).
//
// The rules, per desired workload with Replicas = N, one replica slot at a time
// (0..N-1), converging towards one healthy, up-to-date container per slot:
//
//   - Up to date means the container's spec-hash label equals
//     contract.SpecHash of its workload; anything else (another hash, a missing
//     or malformed label) is stale, so changing one workload never rolls
//     another, and changing only Replicas rolls nothing.
//   - No up-to-date container in the slot: start one. A stale container left
//     in the slot keeps serving while it boots (start-first). Starts that roll
//     a serving slot are limited to MaxSurge slots of the workload at a time;
//     filling an empty slot is not.
//   - An up-to-date container is healthy (and has been for MinReady): roll
//     (drain) the stale one. Duplicates are removed, keeping a healthy one; a
//     stalled roll keeps at most one stale container per slot, a healthy one
//     if any.
//   - An up-to-date container still booting: wait, unless ProgressDeadline has
//     passed since it was created and a check has failed since (one that no
//     check has judged yet, as an agent just started sees it, gets its first
//     check). Then the rollout has failed: with a stale
//     container to fall back on, the replacement is stopped and that spec hash
//     is not tried again in a serving slot until the desired spec changes;
//     without, it is kept and restarted under the crash-loop back-off.
//   - An up-to-date container that crashed, or that was healthy and has failed
//     HealthRetries consecutive checks (outside the start period): restart it
//     in place, at once the first time, then after 1s, 2s, 4s... up to 5
//     minutes; 10 minutes healthy resets the back-off. Restarts for failed
//     checks go MaxSurge replicas of a workload at a time (counting those
//     still booting), so a starved prober never restarts a whole egg. Restart policy "no"
//     leaves an exited container alone (a completed job is kept for its logs),
//     "on-failure" restarts only a failure.
//   - A stateful workload (a volume, or rollout order stop-first) rolls
//     stop-old-then-start-new as one Replace, which stops the old container only
//     once the new image is ready, and never has two containers in a slot.
//   - Slots at or above N, every slot when N is 0, and workloads no longer
//     desired are removed.
//
// Removing a container that may be serving (running and healthy) always goes
// through a drain, out of traffic first; a plain stop is for containers that
// serve nothing (exited, booting, failing health) and for a stateful slot's
// stop-first replace. Containers being built or drained are never acted on
// again. Nothing without Hatchery's labels and this host's ID is ever in a
// plan.
package converge

import (
	"fmt"
	"time"

	"github.com/hatchery/hatchery/internal/containers"
)

// Action names a single convergence step, for structured logging.
type Action string

const (
	// ActionStart starts a fresh container for a replica slot: a plain first
	// start, or the start half of a zero-downtime roll (the old container keeps
	// serving).
	ActionStart Action = "start"
	// ActionStop stops and removes a container that serves nothing: exited,
	// still booting, failing health, a failed replacement, a duplicate that is
	// not serving.
	ActionStop Action = "stop"
	// ActionRestart restarts an up-to-date but crashed (or unhealthy) container
	// in place, under the crash-loop back-off.
	ActionRestart Action = "restart"
	// ActionRoll drains a superseded (stale or legacy) container gracefully,
	// once a healthy replacement is already serving: the stop half of a
	// zero-downtime roll.
	ActionRoll Action = "roll"
	// ActionDrain drains a serving container that is no longer wanted: a
	// scale-down, a cold Egg, a duplicate, a workload no longer desired.
	ActionDrain Action = "drain"
	// ActionReplace rolls a stateful slot stop-first: the new image is made
	// ready while the old container (ContainerID) serves, then the old one is
	// stopped and the new one started, as one task.
	ActionReplace Action = "replace"
)

// Step is one planned or performed convergence action, kept for logging and
// for assertion in tests.
type Step struct {
	Action     Action
	WorkloadID string
	// BlobID is the internal Blob identity of the Egg the step concerns, if
	// known. Never rendered to customers.
	BlobID string
	// ContainerID is the target container, where one exists.
	ContainerID string
	// ReplicaIndex is the 0-based replica slot this step concerns. ActionStart
	// uses it to name and label the new container; stop, roll and restart
	// carry it for logging and idempotency.
	ReplicaIndex int
	// SpecHash is the spec hash of the container to start, or of the target.
	SpecHash string
	// StartedAt is, for a restart, the start time of the incarnation to
	// restart: a container started since is left alone.
	StartedAt time.Time
	// Reason says why, for logs: "missing", "stale", "crashed", "scale-down"...
	Reason string
	// NeverStarted marks a restart that is the container's first start (it
	// was created, and the agent killed before it started it): it is not
	// counted as a restart after a crash.
	NeverStarted bool
}

func (s Step) String() string {
	out := fmt.Sprintf("%s %s/%d", s.Action, s.WorkloadID, s.ReplicaIndex)
	if s.ContainerID != "" {
		out += " " + s.ContainerID
	}
	if s.Reason != "" {
		out += " (" + s.Reason + ")"
	}
	return out
}

// Plan is the set of steps computed by Diff. A rolling deploy spans more than
// one plan: an early plan starts the new container (leaving the old serving),
// and a later plan drains the old once the new is healthy. No single plan ever
// stops a slot's only healthy backend.
type Plan struct {
	Steps []Step
	// Failures are rollouts that this plan gives up on; Converge records them
	// in the History so that no new attempt is made for that spec hash.
	Failures []Failure
	// WakeAt is the earliest time at which a decision this plan waited on
	// changes by the clock alone: a crash-loop back-off ends, a replacement
	// has been healthy for MinReady, a progress deadline or a start period
	// passes. Zero if nothing waits on the clock. The agent converges again
	// then, instead of on its next periodic tick.
	WakeAt time.Time
	// Held are the steps Hold or HoldNewer took out of the plan (Diff never
	// sets it): they wait until the guard is lifted.
	Held []Step
	// Newer are the containers HoldNewer found created for a later desired
	// state than the one converged to (a cache older than what runs).
	// While there are any, every step but restarts in place is Held.
	Newer []containers.Container
}

// Empty reports whether the plan does nothing now (it may still wait for
// WakeAt).
func (p Plan) Empty() bool { return len(p.Steps) == 0 && len(p.Failures) == 0 }

// Failure is a failed rollout of a workload to a spec hash.
type Failure struct {
	WorkloadID string
	SpecHash   string
	Reason     string
	// Image says the rollout failed before any container was made: the
	// registry refused the image's pull (containers.ImageError) with the
	// login Login (contract.WorkloadSpec.PullLogin).
	Image bool
	Login string
}
