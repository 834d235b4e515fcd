package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

// HostIdentities lists the hosts that joined, for placement
// (store.HostIdentities).
type HostIdentities struct{ base }

var _ store.HostIdentities = (*HostIdentities)(nil)

const hostIdentityColumns = `id, name, token_hash, join_token, joined_at, removed_at`

func scanHostIdentity(row Row) (store.HostIdentity, error) {
	var h store.HostIdentity
	var joined, removed int64
	if err := row.Scan(&h.ID, &h.Name, &h.TokenHash, &h.JoinToken, &joined, &removed); err != nil {
		return store.HostIdentity{}, err
	}
	h.JoinedAt, h.RemovedAt = FromMillis(joined), FromMillis(removed)
	return h, nil
}

// ListHostIdentities returns every joined host, sorted by name, then join time.
func (s *HostIdentities) ListHostIdentities(ctx context.Context) ([]store.HostIdentity, error) {
	rows, err := s.db.Query(ctx, `SELECT `+hostIdentityColumns+` FROM host_identities
		ORDER BY name`+s.d.ByteOrder+`, joined_at, id`+s.d.ByteOrder)
	if err != nil {
		return nil, fmt.Errorf("list host identities: %w", err)
	}
	out, err := collect(rows, scanHostIdentity)
	if err != nil {
		return nil, fmt.Errorf("list host identities: %w", err)
	}
	return out, nil
}

// Members keeps the identities of the hosts that joined (store.Members; the
// list placement needs too is HostIdentities').
type Members struct{ base }

// JoinHost spends a use of the join token and records the host, all or
// nothing. The token's row is locked while its uses are counted, so
// concurrent joins on any number of servers never spend more than it has.
func (s *Members) JoinHost(ctx context.Context, joinHash string, h store.HostIdentity) error {
	if h.ID == "" || h.Name == "" || h.TokenHash == "" || h.JoinedAt.IsZero() {
		return fmt.Errorf("join host %q: an ID, a name, a token hash and a time are needed", h.Name)
	}
	err := s.write(ctx, func(tx Tx) error {
		tok, err := scanJoinToken(tx.QueryRow(ctx, `SELECT `+joinTokenColumns+` FROM join_tokens WHERE hash = $1`+s.d.LockRow, joinHash))
		if err != nil {
			return notFound(err, "no such join token")
		}
		if state := tok.State(h.JoinedAt); state != store.JoinTokenActive {
			return fmt.Errorf("join token %s is %s: %w", tok.ID, state, store.ErrNotFound)
		}
		var holder string
		err = tx.QueryRow(ctx, `SELECT id FROM host_identities
			WHERE (name = $1 AND removed_at = 0) OR id = $1 OR name = $2 OR id = $2 LIMIT 1`, h.Name, h.ID).Scan(&holder)
		switch {
		case err == nil:
			return fmt.Errorf("host name %q or ID %s is taken by host %s: %w", h.Name, h.ID, holder, store.ErrExists)
		case !errors.Is(err, ErrNoRows):
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE join_tokens SET uses = uses + 1 WHERE id = $1`, tok.ID); err != nil {
			return err
		}
		// A name taken by a concurrent join is caught by the unique index.
		n, err := tx.Exec(ctx, `INSERT INTO host_identities (`+hostIdentityColumns+`)
			VALUES ($1, $2, $3, $4, $5, 0) ON CONFLICT DO NOTHING`, h.ID, h.Name, h.TokenHash, tok.ID, Millis(h.JoinedAt))
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("host %s: its name, ID or token is another host's: %w", h.ID, store.ErrExists)
		}
		// The host is listed from now on, unknown until its first report; if
		// it never reports, liveness marks it down like any silent host.
		if _, err := tx.Exec(ctx, `INSERT INTO hosts (id, state, state_since, last_seen, status, created_at)
			VALUES ($1, $2, $3, 0, '', $3) ON CONFLICT (id) DO NOTHING`, h.ID, string(store.HostUnknown), Millis(h.JoinedAt)); err != nil {
			return err
		}
		_, err = tx.AppendEvent(ctx, hostEvent(store.EventHostJoined, h.ID, h.JoinedAt,
			fmt.Sprintf("host %s joined as %q", h.ID, h.Name)))
		return err
	})
	if err != nil {
		return fmt.Errorf("join host %q: %w", h.Name, err)
	}
	return nil
}

// HostByTokenHash returns the host whose token's secret has the hash.
func (s *Members) HostByTokenHash(ctx context.Context, hash string) (store.HostIdentity, error) {
	h, err := scanHostIdentity(s.db.QueryRow(ctx, `SELECT `+hostIdentityColumns+` FROM host_identities WHERE token_hash = $1`, hash))
	if err != nil {
		return store.HostIdentity{}, fmt.Errorf("host token: %w", notFound(err, "no such host token"))
	}
	return h, nil
}

// FindHost returns a host by ID, else by name (a member first, else the one
// removed last).
func (s *Members) FindHost(ctx context.Context, idOrName string) (store.HostIdentity, error) {
	h, err := scanHostIdentity(s.db.QueryRow(ctx, `SELECT `+hostIdentityColumns+` FROM host_identities
		WHERE id = $1 OR name = $1
		ORDER BY id = $1 DESC, removed_at = 0 DESC, removed_at DESC LIMIT 1`, idOrName))
	if err != nil {
		return store.HostIdentity{}, fmt.Errorf("host %q: %w", idOrName, notFound(err, "no host with this ID or name"))
	}
	return h, nil
}

// RemoveHost revokes a host's token, with a host.removed event the first time.
func (s *Members) RemoveHost(ctx context.Context, id string, at time.Time) (store.HostIdentity, error) {
	var h store.HostIdentity
	err := s.write(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, `UPDATE host_identities SET removed_at = $2 WHERE id = $1 AND removed_at = 0`, id, Millis(at))
		if err != nil {
			return err
		}
		h, err = scanHostIdentity(tx.QueryRow(ctx, `SELECT `+hostIdentityColumns+` FROM host_identities WHERE id = $1`, id))
		if err != nil {
			return notFound(err, "no such host")
		}
		if n == 0 {
			return nil // removed already: no second event
		}
		_, err = tx.AppendEvent(ctx, hostEvent(store.EventHostRemoved, id, at,
			fmt.Sprintf("host %s (%q) was removed: its token is refused and its replicas go elsewhere", id, h.Name)))
		return err
	})
	if err != nil {
		return store.HostIdentity{}, fmt.Errorf("remove host %s: %w", id, err)
	}
	return h, nil
}
