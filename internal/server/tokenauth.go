package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hatchery/hatchery/internal/fleet"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/store"
)

// TokenLookup is what TokenAuth reads of the stored tokens.
type TokenLookup interface {
	JoinTokenByHash(ctx context.Context, hash string) (store.JoinToken, error)
	HostByTokenHash(ctx context.Context, hash string) (store.HostIdentity, error)
	AdminTokenByHash(ctx context.Context, hash string) (store.AdminToken, error)
}

// TokenAuth accepts the four kinds of token the server issues: admin
// tokens (the first one, whose hash it holds, and the named ones not
// revoked), deploy tokens not revoked, host tokens of hosts not removed, and
// join tokens still usable. Only the secret's hash is ever looked at
// (pki.HashSecret); it is looked up by that hash, which tells a timing
// observer nothing about the secret (a SHA-256 preimage), and then compared
// in constant time.
type TokenAuth struct {
	admin  AdminToken
	tokens TokenLookup
	now    func() time.Time
}

// NewTokenAuth returns the server's authenticator: adminHash is the stored
// hash of the admin token's secret; now decides expiry.
func NewTokenAuth(adminHash string, tokens TokenLookup, now func() time.Time) *TokenAuth {
	return &TokenAuth{admin: NewAdminToken(adminHash), tokens: tokens, now: now}
}

// refusal is an ErrUnauthenticated with a reason the caller may be told: it
// holds the token, so saying why it no longer works gives nothing away.
type refusal struct{ reason string }

func (r *refusal) Error() string        { return r.reason }
func (r *refusal) Is(target error) bool { return target == ErrUnauthenticated }

// Authenticate resolves a token to its principal. A token it does not accept
// gives an error that is ErrUnauthenticated; a store failure gives any other.
func (a *TokenAuth) Authenticate(ctx context.Context, token string) (Principal, error) {
	tok, err := pki.ParseToken(token)
	if err != nil {
		return Principal{}, ErrUnauthenticated
	}
	hash := tok.Hash()
	switch tok.Kind {
	case pki.KindAdmin, pki.KindDeploy:
		if p, err := a.admin.Authenticate(ctx, token); err == nil {
			return p, nil
		}
		t, err := a.tokens.AdminTokenByHash(ctx, hash)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return Principal{}, ErrUnauthenticated
		case err != nil:
			return Principal{}, fmt.Errorf("authenticate %s token: %w", tok.Kind, err)
		case !pki.EqualHash(t.Hash, hash) || storedKind(t) != tok.Kind:
			// A token whose kind was edited is not the token made.
			return Principal{}, ErrUnauthenticated
		case t.Revoked():
			return Principal{}, &refusal{fleet.RevokedReason(t)}
		}
		if t.IsDeploy() {
			return Principal{Name: t.Name, Project: t.Project, Exec: t.Exec}, nil
		}
		return Principal{Admin: true, Name: t.Name}, nil
	case pki.KindHost:
		h, err := a.tokens.HostByTokenHash(ctx, hash)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return Principal{}, ErrUnauthenticated
		case err != nil:
			return Principal{}, fmt.Errorf("authenticate host token: %w", err)
		case !pki.EqualHash(h.TokenHash, hash):
			return Principal{}, ErrUnauthenticated
		case h.Removed():
			return Principal{}, &refusal{fmt.Sprintf("host %s was removed (hatch hosts remove) at %s: its token is refused; "+
				"to bring the machine back, join again with a new join token", h.ID, h.RemovedAt.Format(time.RFC3339))}
		}
		return Principal{HostID: h.ID}, nil
	case pki.KindJoin:
		j, err := a.tokens.JoinTokenByHash(ctx, hash)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return Principal{}, ErrUnauthenticated
		case err != nil:
			return Principal{}, fmt.Errorf("authenticate join token: %w", err)
		case !pki.EqualHash(j.Hash, hash):
			return Principal{}, ErrUnauthenticated
		}
		if state := j.State(a.now()); state != store.JoinTokenActive {
			return Principal{}, joinRefusal(j.ID, state)
		}
		return Principal{JoinToken: j.ID}, nil
	}
	return Principal{}, ErrUnauthenticated
}

func joinRefusal(id, state string) error { return &refusal{fleet.JoinRefusal(id, state)} }

// storedKind is the kind of token (pki) a stored named token was made as.
func storedKind(t store.AdminToken) string {
	if t.IsDeploy() {
		return pki.KindDeploy
	}
	return pki.KindAdmin
}
