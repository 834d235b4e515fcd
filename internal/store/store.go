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
	"strconv"
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

// PeerList is the fleet's valid host set, which every host's desired state
// carries (contract.DesiredState.Peers): stored once rather than in each
// host's state, where at 1,000 hosts it would be most of every row and
// every apply would write it 1,000 times.
type PeerList struct {
	// Version is contract.PeersVersion of the list.
	Version string
	// Doc is the list as JSON (see EncodePeers).
	Doc       []byte
	UpdatedAt time.Time
}

// EventType names what an event is about.
type EventType string

// The event types the control plane records.
const (
	EventHostUp      EventType = "host.up"
	EventHostDown    EventType = "host.down"
	EventHostUnknown EventType = "host.unknown"
	// EventHostFenced: a host that had no status report answered for
	// fence_after stopped its failover eggs (docs/BACKUPS.md); recorded
	// when it reports again.
	EventHostFenced         EventType = "host.fenced"
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
	// Summary is one line saying what the apply changes; Digest identifies
	// its spec and sources (the same files give the same digest).
	Summary, Digest string
	// RollbackOf is the apply whose inputs this one applied again (0: none).
	RollbackOf int64
	// HasInputs says whether the record keeps its inputs (ApplyInputs):
	// records made before they were kept cannot be rolled back to.
	HasInputs bool
}

// NewApply is what an apply's record is started with.
type NewApply struct {
	Project string
	// Actor is the name of the admin token that applies.
	Actor string
	// Blobs are the source digests it uses, kept from collection with it.
	Blobs []string
	At    time.Time
	// Inputs are what it applies, in the deploy service's own encoding (no
	// secret value in it): what a rollback to it applies again.
	Inputs          []byte
	Summary, Digest string
	RollbackOf      int64
	// Keep is how many of the project's records the history keeps, this one
	// included (the server's --keep-applies); 0 means DefaultKeepApplies.
	Keep int
}

// DefaultKeepApplies is how many applies of a project the history keeps
// unless told otherwise (`hatch server --keep-applies`).
const DefaultKeepApplies = 20

// KeepOf is how many records a.Keep asks the history to keep.
func KeepOf(a NewApply) int {
	if a.Keep <= 0 {
		return DefaultKeepApplies
	}
	return a.Keep
}

// ApplyStartedMessage is the message of an apply.started event, the same
// from every store.
func ApplyStartedMessage(a Apply) string {
	msg := "apply " + strconv.FormatInt(a.ID, 10) + " of " + a.Project
	if a.RollbackOf > 0 {
		msg += " (a rollback to apply " + strconv.FormatInt(a.RollbackOf, 10) + ")"
	}
	return msg + " started"
}

// ErrUnavailable is wrapped by the errors of a store that cannot reach its
// database (a PostgreSQL server down or unreachable): the caller may answer
// "try again" rather than "failed", and nothing was written.
var ErrUnavailable = errors.New("the database is unreachable")
