package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

// Leases keeps one lease per project (store.Leases). Its operations are the
// fences themselves, so ctx's fences guard none of them.
type Leases struct{ base }

var _ store.Leases = (*Leases)(nil)

// AcquireLease takes a project's lease if it is free, expired, already held
// with the same token, or held by a server whose registration in the live
// server list (RegisterServer) has run out: a server killed mid-apply
// leaves the list within its roster term, well before its lease expires,
// and waiting for the lease would only make the user's retries fail. (The
// dead holder's writes stay fenced off: the token is no longer its.) A
// holder that never registered is waited for until its lease expires. It is
// one upsert whose condition is checked under the row's lock, so of
// concurrent acquirers on any number of servers one wins.
// The lease's "since" is the caller's l.Since, or the database's clock if the
// dialect measures terms by it: then whether the lease held expired, and
// when this one does, is measured by one clock for every server.
func (s *Leases) AcquireLease(ctx context.Context, l store.Lease) (store.Lease, error) {
	if l.Project == "" || l.Token == "" {
		return store.Lease{}, errors.New("acquire lease: project and token must be set")
	}
	term := Millis(l.Expires) - Millis(l.Since)
	since := s.termStart("$5", "$7") // the same in both places: a transaction's clock stands still
	err := s.unfenced(ctx, func(tx Tx) error {
		var taken, expires int64
		err := tx.QueryRow(ctx, `INSERT INTO leases (project, token, holder, server, since, expires_at)
			VALUES ($1, $2, $3, $4, `+since+`, `+since+` + CAST($6 AS bigint))
			ON CONFLICT (project) DO UPDATE SET token = excluded.token, holder = excluded.holder,
				server = excluded.server, expires_at = excluded.expires_at,
				since = CASE WHEN leases.token = excluded.token THEN leases.since ELSE excluded.since END
			WHERE leases.token = excluded.token OR leases.expires_at <= excluded.since
				OR EXISTS (SELECT 1 FROM servers WHERE servers.id = leases.server AND servers.expires_at <= excluded.since)
			RETURNING since, expires_at`,
			l.Project, l.Token, l.Holder, l.Server, Millis(l.Since), term, s.d.DatabaseClock).Scan(&taken, &expires)
		if err == nil {
			l.Since, l.Expires = FromMillis(taken), FromMillis(expires) // a renewal keeps the time it was taken
			return nil
		}
		if !errors.Is(err, ErrNoRows) {
			return err
		}
		// Not taken: the row is held by someone else, and locked by the
		// upsert, so it is still there to be described.
		held, err := scanLease(tx.QueryRow(ctx, `SELECT `+leaseColumns+` FROM leases WHERE project = $1`, l.Project))
		if err != nil {
			return err
		}
		return &store.LockedError{Held: held}
	})
	if err != nil {
		return store.Lease{}, fmt.Errorf("acquire lease of %s: %w", l.Project, err)
	}
	return l, nil
}

// RenewLease moves the expiry of a lease still held with token. If the
// dialect measures terms by the database's clock, the caller's expiry
// counts only as a term from the database's now.
func (s *Leases) RenewLease(ctx context.Context, project, token string, expires time.Time) error {
	err := s.unfenced(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, `UPDATE leases
			SET expires_at = CASE WHEN CAST($4 AS boolean) THEN `+s.d.Now+` + CAST($5 AS bigint) ELSE CAST($3 AS bigint) END
			WHERE project = $1 AND token = $2`,
			project, token, Millis(expires), s.d.DatabaseClock, time.Until(expires).Milliseconds())
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("lease no longer held: %w", store.ErrNotFound)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("renew lease of %s: %w", project, err)
	}
	return nil
}

// ReleaseLease releases a lease held with token.
func (s *Leases) ReleaseLease(ctx context.Context, project, token string) error {
	err := s.unfenced(ctx, func(tx Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM leases WHERE project = $1 AND token = $2`, project, token)
		return err
	})
	if err != nil {
		return fmt.Errorf("release lease of %s: %w", project, err)
	}
	return nil
}

// ReleaseServerLeases releases every lease a server holds, and returns them
// sorted by project.
func (s *Leases) ReleaseServerLeases(ctx context.Context, server string) ([]store.Lease, error) {
	var released []store.Lease
	err := s.unfenced(ctx, func(tx Tx) error {
		rows, err := tx.Query(ctx, `DELETE FROM leases WHERE server = $1 RETURNING `+leaseColumns, server)
		if err != nil {
			return err
		}
		released, err = collect(rows, scanLease)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("release leases of server %s: %w", server, err)
	}
	slices.SortFunc(released, func(a, b store.Lease) int { return strings.Compare(a.Project, b.Project) })
	return released, nil
}

const leaseColumns = `project, token, holder, server, since, expires_at`

func scanLease(row Row) (store.Lease, error) {
	var l store.Lease
	var since, expires int64
	if err := row.Scan(&l.Project, &l.Token, &l.Holder, &l.Server, &since, &expires); err != nil {
		return store.Lease{}, err
	}
	l.Since, l.Expires = FromMillis(since), FromMillis(expires)
	return l, nil
}
