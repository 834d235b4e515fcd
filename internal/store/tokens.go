package store

import (
	"fmt"
	"time"
)

// The events of joining and removing hosts.
const (
	// EventHostJoined: a host traded a join token for its identity.
	EventHostJoined EventType = "host.joined"
	// EventHostRemoved: `hatch hosts remove` revoked a host's token; its
	// replicas are to be placed elsewhere.
	EventHostRemoved EventType = "host.removed"
	// EventTokenCreated: an admin made a named token (admin or deploy).
	EventTokenCreated EventType = "token.created"
	// EventTokenRevoked: an admin revoked a named token (admin or deploy).
	EventTokenRevoked EventType = "token.revoked"
	// EventBlobUploaded: a deploy token uploaded a blob new to the server
	// (a build context); the event names its project and the token.
	EventBlobUploaded EventType = "blob.uploaded"
)

// AdminToken is a named token as stored, an admin token or a deploy token
// (Kind): its name (what events and apply records say ran something), the
// hash of its secret and whether it was revoked. The two kinds share one
// table so that a name means one token whatever its kind. The token itself
// is printed once and never stored.
type AdminToken struct {
	Name string
	// Kind is TokenAdmin or TokenDeploy; "" is read as TokenAdmin.
	Kind string
	// Hash is the hex SHA-256 of the token's secret (pki.HashSecret).
	Hash      string
	CreatedAt time.Time
	// RevokedAt is when it was revoked; zero while it was not.
	RevokedAt time.Time
	// Project is a deploy token's project ("<namespace>/<name>"), the only
	// one it may act on; "" for an admin token.
	Project string
	// Exec says a deploy token may also exec into its project's eggs.
	Exec bool
}

// The kinds of named token.
const (
	// TokenAdmin may do everything.
	TokenAdmin = "admin"
	// TokenDeploy may plan, apply, roll back and read one project.
	TokenDeploy = "deploy"
)

// IsDeploy reports whether the token is a deploy token.
func (t AdminToken) IsDeploy() bool { return t.Kind == TokenDeploy }

// Describe names the token as messages do: `admin token "alice"`,
// `deploy token "ci" of default/shop`.
func (t AdminToken) Describe() string {
	if t.IsDeploy() {
		return fmt.Sprintf("deploy token %q of %s", t.Name, t.Project)
	}
	return fmt.Sprintf("admin token %q", t.Name)
}

// DeployActor is the actor a deploy token's work is recorded under (events,
// apply records): its name and kind, which no admin token's name can be
// (':' is not allowed in one).
func DeployActor(name string) string { return "deploy:" + name }

// FirstAdminToken is the name of the admin token the server makes at its
// first start and keeps in its data dir: the way back in, never revoked.
const FirstAdminToken = "admin"

// Revoked reports whether the token was revoked.
func (t AdminToken) Revoked() bool { return !t.RevokedAt.IsZero() }

// JoinToken is a token an agent trades for a host identity, as stored: the
// hash of its secret and how long and how often it may be used. The token
// itself is printed once and never stored.
type JoinToken struct {
	// ID names the token in `hatch token list` and `hatch token revoke`.
	ID string
	// Hash is the hex SHA-256 of the token's secret (pki.HashSecret).
	Hash      string
	CreatedAt time.Time
	// ExpiresAt is when the token stops being accepted.
	ExpiresAt time.Time
	// MaxUses is how many hosts may join with it; Uses how many did.
	MaxUses int
	Uses    int
	// RevokedAt is when it was revoked; zero while it was not.
	RevokedAt time.Time
}

// The states of a join token, as State names them.
const (
	JoinTokenActive  = "active"
	JoinTokenExpired = "expired"
	JoinTokenUsedUp  = "used up"
	JoinTokenRevoked = "revoked"
)

// State says whether the token is usable at the given time, and if not, why.
// Revocation is said first, then use, then expiry: the reason a person acted
// on before the one that merely happened.
func (t JoinToken) State(at time.Time) string {
	switch {
	case !t.RevokedAt.IsZero():
		return JoinTokenRevoked
	case t.Uses >= t.MaxUses:
		return JoinTokenUsedUp
	case !at.Before(t.ExpiresAt):
		return JoinTokenExpired
	}
	return JoinTokenActive
}

// Usable reports whether a host may join with the token at the given time.
func (t JoinToken) Usable(at time.Time) bool { return t.State(at) == JoinTokenActive }

// HostIdentity is a host that joined: its ID (what desired states, labels and
// routes name), its name (unique among hosts not removed; what placement
// names), and the hash of its host token.
type HostIdentity struct {
	ID   string
	Name string
	// TokenHash is the hex SHA-256 of the host token's secret.
	TokenHash string
	// JoinToken is the ID of the join token the host joined with.
	JoinToken string
	JoinedAt  time.Time
	// RemovedAt is when `hatch hosts remove` revoked the host's token; zero
	// while the host is a member. A removed host's token is refused, and its
	// name may be taken by a new host.
	RemovedAt time.Time
}

// Removed reports whether the host was removed.
func (h HostIdentity) Removed() bool { return !h.RemovedAt.IsZero() }

// JoinTokenID is the ID of the join token whose secret has the hash (hex):
// its first 16 digits. Whoever holds a token can so name it (to revoke it),
// and the ID tells nothing that would help to forge one.
func JoinTokenID(hash string) string {
	if len(hash) < 16 {
		return hash
	}
	return hash[:16]
}
