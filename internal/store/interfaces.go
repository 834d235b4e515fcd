package store

import (
	"context"
	"time"

	"github.com/hatchery/hatchery/internal/resource"
)

// HostList lists the hosts the control plane has heard of: those that
// reported and those that joined.
type HostList interface {
	// ListHosts returns every host, sorted by ID.
	ListHosts(ctx context.Context) ([]Host, error)
}

// Liveness is what the liveness monitor needs: the hosts, and two guarded
// transitions. A status report is the other half: it marks its host up (see
// Statuses).
type Liveness interface {
	HostList
	// MarkAllHostsUnknown sets every host that is up to unknown, recording
	// a host.unknown event for each; a host down stays down. The server
	// calls it when it starts: it has not heard from anyone yet, and a
	// restart of the server is not an outage of the fleet (so the next
	// report of a host that was up records no host.up: see PutStatus).
	MarkAllHostsUnknown(ctx context.Context, at time.Time) error
	// MarkHostDown sets the host down, with a host.down event, only if it is
	// not down already and was last seen before notSeenSince (or never), so a
	// report that lands while the monitor decides wins. It reports whether the
	// host changed.
	MarkHostDown(ctx context.Context, id string, notSeenSince, at time.Time) (bool, error)
}

// Statuses is what the status endpoint and the host views need.
type Statuses interface {
	// PutStatus stores a host's latest report and is its heartbeat: the host
	// is created if new, LastSeen becomes at, and a host that was not up goes
	// up, with a host.up event if it was down or had never reported (not if
	// it was unknown only because the server restarted). It returns the
	// report it replaced (nil if none).
	PutStatus(ctx context.Context, hostID string, report []byte, at time.Time) (previous []byte, err error)
	// Status returns a host's latest report, or ErrNotFound.
	Status(ctx context.Context, hostID string) (Status, error)
	// AllStatuses returns the latest report of every host that sent one,
	// sorted by host ID, in one read: for the work that looks at the whole
	// fleet.
	AllStatuses(ctx context.Context) ([]Status, error)
	// Host returns one host, or ErrNotFound.
	Host(ctx context.Context, id string) (Host, error)
	HostList
}

// DesiredStates keeps one desired state per host, and the fleet's peer list
// (contract.DesiredState.Peers, the same in every host's state) once for
// all, and wakes those waiting for a change.
type DesiredStates interface {
	// PutDesiredStates stores, in one transaction, each of states whose
	// stored version differs and, when peers is not nil, the peer list if
	// its stored version differs: the hosts of one apply see their new
	// states from one commit. Once committed it wakes the waiters of each
	// host whose state changed, and every host's waiters when the peer list
	// changed. It reports whether anything changed.
	PutDesiredStates(ctx context.Context, states []DesiredState, peers *PeerList) (changed bool, err error)
	// DesiredState returns the host's desired state; a host that has none gets
	// a zero DesiredState (empty Version, nil Doc) and no error.
	DesiredState(ctx context.Context, hostID string) (DesiredState, error)
	// AllDesiredStates returns every host's stored state in one read, for
	// the work that looks at the whole fleet.
	AllDesiredStates(ctx context.Context) ([]DesiredState, error)
	// DesiredPeers returns the stored peer list; a zero PeerList (empty
	// Version, nil Doc) if there is none.
	DesiredPeers(ctx context.Context) (PeerList, error)
	// DesiredPeersVersion returns the stored peer list's version ("" if
	// there is none), without the list.
	DesiredPeersVersion(ctx context.Context) (string, error)
	// WatchDesiredState returns a channel closed at the next change of the
	// host's desired state, or of the peer list, after the call. Call it
	// before reading the state, so that a change between the read and the
	// wait is not missed.
	WatchDesiredState(hostID string) <-chan struct{}
}

// Events is the event log.
type Events interface {
	// AppendEvent records an event (its Seq is assigned) and returns its Seq.
	AppendEvent(ctx context.Context, e Event) (int64, error)
	// ListEvents returns up to limit events with Seq > since, oldest first.
	ListEvents(ctx context.Context, since int64, limit int) ([]Event, error)
	// ListProjectEvents is ListEvents of one project's events only (Project
	// exactly project): what a deploy token may read.
	ListProjectEvents(ctx context.Context, project string, since int64, limit int) ([]Event, error)
	// WatchEvents returns a channel closed when the next event is recorded
	// after the call, whoever records it.
	WatchEvents() <-chan struct{}
}

// BlobRetention says which blobs must be kept. A blob is referenced when a
// deployed resource's Source names it, when a kept apply record lists it, or
// when some owner (a pending plan, say) retains it.
type BlobRetention interface {
	// ReferencedBlobs returns every referenced digest, each once, sorted.
	ReferencedBlobs(ctx context.Context) ([]string, error)
	// RetainBlobs makes owner's retained set exactly digests (empty releases all).
	RetainBlobs(ctx context.Context, owner string, digests []string) error
}

// ApplyHistory records applies: the last few of each project (NewApply.Keep)
// are kept, and with them the blobs they used and their inputs.
type ApplyHistory interface {
	// StartApply records a running apply by a.Actor (the admin token's
	// name), with an apply.started event naming the same actor, and drops
	// the project's records beyond a.Keep.
	StartApply(ctx context.Context, a NewApply) (Apply, error)
	// FinishApply records an apply's outcome, with an apply.finished event. A
	// record already finished or dropped gives ErrNotFound.
	FinishApply(ctx context.Context, id int64, outcome ApplyOutcome, message string, at time.Time) error
	// Applies returns the project's kept records, newest first (without
	// their inputs).
	Applies(ctx context.Context, project string) ([]Apply, error)
	// ApplyInputs returns the inputs of a kept record of the project (empty
	// for a record made before inputs were kept); a record not kept, or of
	// another project, gives ErrNotFound.
	ApplyInputs(ctx context.Context, project string, id int64) ([]byte, error)
}

// Projects is what the project views need besides the deployed resources.
type Projects interface {
	// ListProjects returns every "<namespace>/<project>" that has deployed
	// resources or apply records, sorted.
	ListProjects(ctx context.Context) ([]string, error)
	// ListResources returns a project's deployed resources, sorted by key.
	ListResources(ctx context.Context, project string) ([]*resource.Deployed, error)
}

// The tokens themselves are never stored: AdminTokens, JoinTokens and
// Members keep the hashes of their secrets, each for its own consumer.

// AdminTokens keeps the hashes of the named tokens: the first admin token,
// made when the server first starts, the admin tokens `hatch token create
// --admin --name N` makes and the deploy tokens `hatch token create --deploy`
// makes. A name is never reused, whatever the kind, so that it means one
// token in every event that names it.
type AdminTokens interface {
	// TokenHash returns the hash stored under name, or ErrNotFound.
	TokenHash(ctx context.Context, name string) (string, error)
	// CreateTokenHash stores a hash under a new name (the first admin token,
	// with no event); a name or hash already stored gives ErrExists and is
	// left as it was.
	CreateTokenHash(ctx context.Context, name, hash string, at time.Time) error
	// CreateAdminToken stores a named token of t.Kind (admin or deploy, with
	// its Project and Exec; not revoked) with a token.created event whose
	// Actor is by; a name or hash already stored, whatever its kind, gives
	// ErrExists and nothing changes.
	CreateAdminToken(ctx context.Context, t AdminToken, by string) error
	// AdminTokenByHash returns the named token (admin or deploy) whose
	// secret has the hash, revoked or not, or ErrNotFound.
	AdminTokenByHash(ctx context.Context, hash string) (AdminToken, error)
	// ListAdminTokens returns every named token, admin and deploy, the
	// first one included, oldest first.
	ListAdminTokens(ctx context.Context) ([]AdminToken, error)
	// RevokeAdminToken revokes the named token (admin or deploy) from at on
	// and returns it, with a token.revoked event whose Actor is by; a token
	// revoked already keeps its first RevokedAt (and no second event). An
	// unknown name gives ErrNotFound.
	RevokeAdminToken(ctx context.Context, name, by string, at time.Time) (AdminToken, error)
}

// JoinTokens keeps the join tokens hosts join with.
type JoinTokens interface {
	// CreateJoinToken stores a new join token (Uses 0, not revoked); an ID or
	// hash already stored gives ErrExists.
	CreateJoinToken(ctx context.Context, t JoinToken) error
	// JoinTokenByHash returns the join token whose secret has the hash,
	// usable or not, or ErrNotFound.
	JoinTokenByHash(ctx context.Context, hash string) (JoinToken, error)
	// ListJoinTokens returns every join token, oldest first.
	ListJoinTokens(ctx context.Context) ([]JoinToken, error)
	// RevokeJoinToken revokes a join token and returns it; a token revoked
	// already keeps its first RevokedAt. An unknown ID gives ErrNotFound.
	RevokeJoinToken(ctx context.Context, id string, at time.Time) (JoinToken, error)
}

// Members keeps the identities of the hosts that joined, with their host
// tokens' hashes.
type Members interface {
	HostIdentities
	// JoinHost spends one use of the join token whose secret has joinHash and
	// records the host h, in one transaction: the host also appears in the
	// host list (unknown, never seen, until it reports), with a host.joined
	// event. A join token not usable at h.JoinedAt gives ErrNotFound; a name
	// held by a host not removed, or equal to another host's ID, gives
	// ErrExists; either way nothing changes.
	JoinHost(ctx context.Context, joinHash string, h HostIdentity) error
	// HostByTokenHash returns the host whose token's secret has the hash,
	// removed or not, or ErrNotFound.
	HostByTokenHash(ctx context.Context, hash string) (HostIdentity, error)
	// FindHost returns the host with the ID, else the host not removed with
	// that name, else the one removed last with that name, or ErrNotFound.
	FindHost(ctx context.Context, idOrName string) (HostIdentity, error)
	// RemoveHost revokes the host's token from at on, with a host.removed
	// event, and returns the host; a host removed already keeps its first
	// RemovedAt (and no event). An unknown ID gives ErrNotFound.
	RemoveHost(ctx context.Context, id string, at time.Time) (HostIdentity, error)
}

// HostIdentities is what placement needs of the joined hosts: their names,
// and which were removed (their replicas go elsewhere).
type HostIdentities interface {
	// ListHostIdentities returns every host that joined, removed ones
	// included, sorted by name, then by when they joined.
	ListHostIdentities(ctx context.Context) ([]HostIdentity, error)
}

// ServerRegistry is where the control plane's servers say where they are
// reached, so that every desired-state answer can list the live ones and the
// hosts follow the control plane as servers come and go. A registration
// lasts for its term unless renewed: a server that died drops out by itself.
type ServerRegistry interface {
	// RegisterServer records (or renews) that server id is reached at url,
	// for ttl from now: the database's now on PostgreSQL, at on SQLite (one
	// server, one clock).
	RegisterServer(ctx context.Context, id, url string, ttl time.Duration, at time.Time) error
	// LiveServers returns the URLs of the registrations not expired at now
	// (measured as RegisterServer measures), sorted, each once.
	LiveServers(ctx context.Context, at time.Time) ([]string, error)
	// UnregisterServer removes server id's registration, as a server that
	// stops does; removing none is not an error.
	UnregisterServer(ctx context.Context, id string) error
}
