// Package containers is the agent's view of a Docker host: the Client interface the
// converge engine drives, the Container it observes, the labels that mark what
// Hatchery owns (the names Docker objects get are contract's: the control
// plane computes them too), and Tasks, the bookkeeping of slow operations (image
// pulls and builds, drains, stops) shared by every Client implementation.
//
// Nothing here talks to Docker. The real adapter lives in containers/docker (the
// Docker Engine Go SDK), the in-memory fake used by pure tests in containers/fake.
//
// Invariant: a Client lists and touches only containers labelled
// io.hatchery.managed=true with its own host ID (see Owned). Anything else on
// the host is invisible to it.
package containers

import (
	"context"
	"errors"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
)

// Client is what the converge engine needs of a Docker host.
//
// Every mutating call only starts its work and returns: pulling or building an
// image, draining and stopping take seconds to minutes, and a converge must
// never wait for them. The work runs as a task the Client owns (see Tasks);
// until it finishes, List shows its effect in progress (a building placeholder
// for a start, a draining container for a drain or stop, a starting one for a
// restart). Every call is idempotent: asking for work already in progress, or
// already done, is a cheap no-op that returns nil.
type Client interface {
	// List returns this host's containers, with tasks in progress overlaid.
	List(ctx context.Context) ([]Container, error)
	// Start begins creating and starting a container for a slot: get the
	// image (pull, or build from the Blob), create the container with its
	// labels, networks and mounts, start it. With Replace set (a stop-first
	// roll), the replaced container is stopped and removed only once the
	// image is ready, so the slot's gap is just the container start.
	Start(ctx context.Context, req StartRequest) error
	// Drain begins the graceful removal of a container that may be serving:
	// take it out of traffic (the ingress hook), wait for it to be idle or for
	// the drain timeout, then stop and remove it as Stop does.
	Drain(ctx context.Context, req StopRequest) error
	// Stop begins stopping and removing a container that is not serving:
	// its stop signal, the stop timeout, kill, remove. A container already
	// gone is not an error.
	Stop(ctx context.Context, req StopRequest) error
	// Restart begins restarting a container in place (same ID, same
	// configuration): out of traffic, stop, start. It does nothing if the
	// container was (re)started after req.StartedAt: someone got there first.
	Restart(ctx context.Context, req RestartRequest) error
}

// LogReader is implemented by clients that can show a container's log, for
// the status report of a failed container.
type LogReader interface {
	// Logs returns the last lines of the container's output, oldest first.
	Logs(ctx context.Context, id string, lines int) ([]string, error)
}

// ErrNotFound reports a container that does not exist (or is not this host's).
var ErrNotFound = errors.New("containers: container not found")

// StartRequest asks for a new container in a workload's slot.
type StartRequest struct {
	// HostID is this host's ID, written into the container's labels.
	HostID string
	Spec   contract.WorkloadSpec
	// SpecHash is contract.SpecHash(Spec), written into the labels.
	SpecHash string
	Slot     int
	// Replace is the ID of a container this one supersedes in a stop-first
	// roll, stopped (with Spec's stop timeout) once the new image is ready and
	// before the new container is created. Empty for a start-first start.
	Replace string
	// Stamp names the desired state the container is created for, written
	// into its labels (see StateStamp).
	Stamp StateStamp
}

// RunRequest asks for a run's container (contract.Run): created from Spec,
// named contract.RunContainerName, labelled RunLabels, started once. A
// container of that name that exists already is never started again.
type RunRequest struct {
	// HostID is this host's ID, written into the container's labels.
	HostID string
	RunID  string
	Spec   contract.WorkloadSpec
	// SpecHash is contract.SpecHash(Spec), written into the labels.
	SpecHash string
	// TTY makes the container with a terminal and an open stdin, and leaves
	// it created: its attach session starts it (contract.Run.TTY).
	TTY bool
}

// Name returns the Docker name of the run's container.
func (r RunRequest) Name() string {
	return contract.RunContainerName(r.Spec.Project, r.Spec.Egg, r.RunID)
}

// StopRequest asks for a container to be drained or stopped, then removed.
type StopRequest struct {
	ID string
	// WorkloadID and Slot name the container in errors and logs.
	WorkloadID string
	Slot       int
	// DrainTimeout bounds the wait for in-flight requests (Drain only).
	DrainTimeout time.Duration
	// StopTimeout is how long the stop signal has before the kill.
	StopTimeout time.Duration
}

// RestartRequest asks for a container to be restarted in place.
type RestartRequest struct {
	ID         string
	WorkloadID string
	Slot       int
	// StartedAt is when the container last started, as observed by the caller;
	// a container started since then is not restarted again.
	StartedAt   time.Time
	StopTimeout time.Duration
	// DrainTimeout bounds the drain of a running container before its stop
	// (contract.DefaultDrainTimeout when zero): a container restarted for
	// failed checks may still be serving requests.
	DrainTimeout time.Duration
}

// Container is one of this host's containers as the agent observes it, or a
// placeholder for one being built (State building, no ID).
type Container struct {
	// ID is Docker's container ID; empty for a building placeholder.
	ID   string
	Name string

	// WorkloadID, BlobID, Slot and SpecHash are read from the labels (see
	// FromLabels). LabelError says which were missing or malformed; such a
	// container is treated as stale (in slot 0 if its slot is unreadable).
	WorkloadID string
	BlobID     string
	Slot       int
	SpecHash   string
	LabelError string
	// RunID is the run whose container this is (LabelRun), empty for a
	// replica. A run's container carries its egg's workload label too, but
	// it is no replica: the converge, the ingress and the status report's
	// containers leave it out (see SplitRuns).
	RunID string
	// Stamp is the desired state the container was created for, from its
	// labels (zero for a container of an older agent).
	Stamp StateStamp

	State contract.ContainerState
	// IP is the container's address on its workload's first network (the one
	// it was created on), where the ingress and the agent's probes reach it;
	// empty when it is not running.
	IP string
	// Healthy is the result of the latest health check (true for a running
	// container without a health check).
	Healthy bool
	// FailingStreak counts consecutive failed health checks, not counting
	// those during the check's start period.
	FailingStreak int
	// ExitCode is the last exit status of a container that is not running.
	ExitCode int
	// Paused is set for a running container whose processes are frozen
	// (docker pause): it counts as running, never as ready, and its
	// agent-side checks fail without being tried (a paused process still
	// accepts TCP connections into its backlog), so it is out of the pool
	// at once and restarted like any container failing its checks.
	Paused bool

	// Created is when the container (or its start task) was created;
	// StartedAt when its process last started; FinishedAt when it last exited.
	Created    time.Time
	StartedAt  time.Time
	FinishedAt time.Time

	Labels map[string]string
}

// SplitRuns parts listed containers into the replicas (and any container
// that is not a run's) and the runs' containers, keeping their order.
func SplitRuns(listed []Container) (replicas, runs []Container) {
	replicas = make([]Container, 0, len(listed))
	for _, c := range listed {
		if c.RunID != "" {
			runs = append(runs, c)
		} else {
			replicas = append(replicas, c)
		}
	}
	return replicas, runs
}

// Placeholder reports whether c stands for a container still being built.
func (c Container) Placeholder() bool { return c.ID == "" }

// StateFromDocker maps Docker's container state ("created", "running",
// "exited"...) and exit code to the agent's.
func StateFromDocker(state string, exitCode int) contract.ContainerState {
	switch state {
	case "created":
		return contract.StateStopped
	case "running", "paused": // paused: see Container.Paused
		return contract.StateRunning
	case "restarting":
		return contract.StateStarting
	case "removing":
		return contract.StateDraining
	case "exited":
		if exitCode == 0 {
			return contract.StateCompleted
		}
		return contract.StateCrashed
	case "dead":
		return contract.StateCrashed
	default: // a state newer than this code
		return contract.StateUnknown
	}
}
