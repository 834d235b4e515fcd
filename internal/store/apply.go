package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The events of the apply protocol beyond apply.started and apply.finished.
const (
	// EventRolloutReverted: an egg with rollout.auto_revert failed its
	// rollout, and the control plane put its previous spec back.
	EventRolloutReverted EventType = "rollout.reverted"
	// EventRolloutRestarted: `hatch rollout restart` bumped an egg's revision.
	EventRolloutRestarted EventType = "rollout.restarted"
	// EventEggRescheduled: an egg's replicas moved off hosts that are down
	// or removed (or got placed once room appeared).
	EventEggRescheduled EventType = "egg.rescheduled"
	// EventVolumeRetained: a volume left the project file; its data is kept
	// on its host until `hatch destroy --volumes`.
	EventVolumeRetained EventType = "volume.retained"
	// EventVolumeDeleted: `hatch destroy --volumes` marked a volume for
	// deletion on its host.
	EventVolumeDeleted EventType = "volume.deleted"
)

// ErrLocked is wrapped by the *LockedError of a lease held by someone else.
var ErrLocked = errors.New("locked")

// Lease is the lock of one project: whoever holds it is the only one changing
// the project's resources (an apply, a rollout restart, an auto-revert, a
// reschedule). It lasts until Expires unless renewed, so a server that dies
// holding it blocks the project for one lease term at most, and a server that
// restarts releases its own at once (ReleaseServerLeases).
type Lease struct {
	Project string
	// Token identifies one acquisition; only its holder renews or releases it.
	Token string
	// Holder says who holds it, for the error a second caller gets:
	// "apply 12", "rollout restart of egg/web"...
	Holder string
	// Server names the control-plane server whose process holds it.
	Server  string
	Since   time.Time
	Expires time.Time
}

// BriefHolder begins the Holder of a lease held for a moment only: the
// jobs service writing runs into desired states, for a few milliseconds at
// a time. An operation that meets such a lease waits for it rather than
// failing as locked (see Lease.Brief).
const BriefHolder = "runs: "

// Brief reports whether the lease is held for a moment only (BriefHolder).
func (l Lease) Brief() bool { return strings.HasPrefix(l.Holder, BriefHolder) }

// LockedError is the answer to acquiring a lease someone else holds.
type LockedError struct{ Held Lease }

func (e *LockedError) Error() string {
	return fmt.Sprintf("project %s is locked by %s (server %s) since %s", e.Held.Project, e.Held.Holder, e.Held.Server,
		e.Held.Since.UTC().Format(time.RFC3339))
}

// Unwrap makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Unwrap() error { return ErrLocked }

// Leases keeps one lease per project.
type Leases interface {
	// AcquireLease takes l.Project's lease for l.Token, from l.Since until
	// l.Expires, if nobody holds it, its lease expired by l.Since, or its
	// server's registration in the live server list (ServerRegistry) ran out
	// by l.Since (the server died: its writes are fenced off from then on).
	// Taking it again with the same token renews it. Otherwise it returns a *LockedError
	// describing the lease held, and changes nothing.
	AcquireLease(ctx context.Context, l Lease) (Lease, error)
	// RenewLease moves the expiry of the lease held with token; a lease no
	// longer held with it (expired and taken, or released) gives ErrNotFound.
	RenewLease(ctx context.Context, project, token string, expires time.Time) error
	// ReleaseLease releases the lease held with token; releasing a lease not
	// held with it changes nothing and is no error.
	ReleaseLease(ctx context.Context, project, token string) error
	// ReleaseServerLeases releases every lease held by server (a server
	// starting releases what its previous life held) and returns them.
	ReleaseServerLeases(ctx context.Context, server string) ([]Lease, error)
}

// StoredPlan is a plan as the control plane keeps it between `plan` and
// `apply`. Doc is the server's own encoding; it holds no secret value.
type StoredPlan struct {
	ID      string
	Project string
	Created time.Time
	Expires time.Time
	// Blobs are the source digests the plan's resources name: kept from
	// collection for as long as the plan is stored.
	Blobs []string
	Doc   []byte
}

// Plans keeps pending plans.
type Plans interface {
	// PutPlan stores a new plan, retaining its blobs; an ID stored already
	// gives ErrExists.
	PutPlan(ctx context.Context, p StoredPlan) error
	// Plan returns a stored plan (expired or not), or ErrNotFound.
	Plan(ctx context.Context, id string) (StoredPlan, error)
	// DeletePlan forgets a plan and releases its blobs; an unknown ID is no
	// error.
	DeletePlan(ctx context.Context, id string) error
	// DeleteExpiredPlans forgets every plan expired at now and returns how
	// many it forgot.
	DeleteExpiredPlans(ctx context.Context, now time.Time) (int, error)
}

// SecretValue is one value of a project's secret, sealed (seal.Box) by the
// caller: the store never sees it in clear. Fingerprint is the keyed hash
// that the secret's handle carries.
type SecretValue struct {
	Project     string
	Name        string
	Fingerprint string
	Sealed      string
	Created     time.Time
}

// SecretValues keeps the values of secrets, a few per secret: the one in use,
// the previous one (auto-revert may need it) and those of pending plans.
type SecretValues interface {
	// PutSecretValue stores a value; one with the same project, name and
	// fingerprint stored already is kept as it was (the same value).
	PutSecretValue(ctx context.Context, v SecretValue) error
	// SecretValue returns the value with the fingerprint, or ErrNotFound.
	SecretValue(ctx context.Context, project, name, fingerprint string) (SecretValue, error)
	// PruneSecretValues deletes the secret's values whose fingerprint is not
	// in keep and that were created before before.
	PruneSecretValues(ctx context.Context, project, name string, keep []string, before time.Time) error
	// DeleteSecretValues deletes every value of the secret.
	DeleteSecretValues(ctx context.Context, project, name string) error
}
