// Package store says what the control plane persists, as small interfaces
// shaped by the code that uses them: hosts and their liveness, the desired
// state of each host, status reports, the event log, blob retention, apply
// history and token hashes. The graph reconciler's ResourceStorage is defined
// by the reconciler itself; implementations here satisfy it too.
//
// Implementations live in sub-packages (sqlite/, and later postgres/) and all
// pass the conformance suites in storetest, which use nothing but these
// interfaces. Times are passed in by the caller, so that the logic deciding
// them stays testable; only ResourceStorage, whose methods carry no time,
// stamps its events with the store's clock.
//
// Every method is safe for concurrent use. Every write is durable when it
// returns: an acknowledged write survives a crash of the process.
package store

import (
	"errors"
	"time"
)

// ErrNotFound is returned when the thing asked for does not exist.
var ErrNotFound = errors.New("not found")

// ErrExists is returned by a create-only write when the thing already exists.
var ErrExists = errors.New("already exists")

// HostState is the control plane's view of a host's liveness.
type HostState string

const (
	// HostUnknown: the server has not heard from the host since it started.
	HostUnknown HostState = "unknown"
	// HostUp: the host reported within the liveness timeout.
	HostUp HostState = "up"
	// HostDown: the host has not reported for longer than the liveness timeout.
	HostDown HostState = "down"
)

// Host is one Docker host running an agent.
type Host struct {
	ID    string
	State HostState
	// StateSince is when State last changed.
	StateSince time.Time
	// LastSeen is when the host last reported; zero if never.
	LastSeen time.Time
}

// Status is the last status report a host sent.
type Status struct {
	HostID string
	// Report is the report as the agent sent it (a contract.StatusReport in JSON).
	Report     []byte
	ReceivedAt time.Time
}

// DesiredState is what one host should run, at one version.
type DesiredState struct {
	HostID string
	// Version identifies the content (contract.DesiredState.Version); equal
	// versions mean equal content.
	Version string
	// Doc is the state in its stored form (see EncodeDesiredState): JSON with
	// secret values sealed.
	Doc       []byte
	UpdatedAt time.Time
}

// EventType names what an event is about.
type EventType string

// The event types the control plane records.
const (
	EventHostUp             EventType = "host.up"
	EventHostDown           EventType = "host.down"
	EventHostUnknown        EventType = "host.unknown"
	EventApplyStarted       EventType = "apply.started"
	EventApplyFinished      EventType = "apply.finished"
	EventResourceCreated    EventType = "resource.created"
	EventResourceUpdated    EventType = "resource.updated"
	EventResourceDeleted    EventType = "resource.deleted"
	EventRolloutProgressing EventType = "rollout.progressing"
	EventRolloutFailed      EventType = "rollout.failed"
	EventRolloutDone        EventType = "rollout.done"
	// The control plane's ACME client: a certificate obtained for a
	// hostname, one renewed, and an attempt that failed (with why).
	EventCertificateIssued  EventType = "certificate.issued"
	EventCertificateRenewed EventType = "certificate.renewed"
	EventCertificateFailed  EventType = "certificate.failed"
)

// Event is one entry of the event log.
type Event struct {
	// Seq orders the log: it increases with every event and is never reused.
	Seq  int64
	Time time.Time
	Type EventType
	// Project is "<namespace>/<project>", if the event concerns one.
	Project string
	// Host is the host's ID, if the event concerns one.
	Host string
	// Resource is "type/name", if the event concerns one.
	Resource string
	Message  string
	// Actor is the name of the admin token whose request caused the event
	// ("who ran what"); empty when the control plane or a host did. A write
	// whose context carries an actor (WithActor) gives it to the events it
	// records without one.
	Actor string
}

// ApplyOutcome is where an apply stands.
type ApplyOutcome string

const (
	ApplyRunning   ApplyOutcome = "running"
	ApplySucceeded ApplyOutcome = "succeeded"
	ApplyFailed    ApplyOutcome = "failed"
)

// Apply is one record of a project's apply history.
type Apply struct {
	ID       int64
	Project  string
	Started  time.Time
	Finished time.Time // zero while running
	Outcome  ApplyOutcome
	Message  string
	// Actor is the name of the admin token that applied.
	Actor string
	// Blobs are the source digests the apply used; they are retained for as
	// long as the record is kept.
	Blobs []string
}

// ApplyHistoryLimit is how many applies of a project the history keeps.
const ApplyHistoryLimit = 10

// ErrUnavailable is wrapped by the errors of a store that cannot reach its
// database (a PostgreSQL server down or unreachable): the caller may answer
// "try again" rather than "failed", and nothing was written.
var ErrUnavailable = errors.New("the database is unreachable")
