package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hatchery/hatchery/internal/store"
)

// AcquireLease takes a project's lease if it is free, expired, or already
// held with the same token: one upsert whose condition is checked under the
// row's lock, so of concurrent acquirers on any number of servers one wins.
func (s *Store) AcquireLease(ctx context.Context, l store.Lease) (store.Lease, error) {
	if l.Project == "" || l.Token == "" {
		return store.Lease{}, errors.New("acquire lease: project and token must be set")
	}
	term := millis(l.Expires) - millis(l.Since)
	err := s.writeTx(ctx, false, func(tx *txn) error {
		// "since" is the caller's l.Since, or the database's clock: then
		// whether the lease held expired, and when this one does, is
		// measured by one clock for every server, never by theirs.
		var since, expires int64
		err := tx.QueryRow(ctx, `WITH clock AS (
				SELECT CASE WHEN $7::boolean THEN `+dbNowMillis+` ELSE $5::bigint END AS since)
			INSERT INTO leases (project, token, holder, server, since, expires_at)
			SELECT $1, $2, $3, $4, clock.since, clock.since + $6::bigint FROM clock
			ON CONFLICT (project) DO UPDATE SET token = excluded.token, holder = excluded.holder,
				server = excluded.server, expires_at = excluded.expires_at,
				since = CASE WHEN leases.token = excluded.token THEN leases.since ELSE excluded.since END
			WHERE leases.token = excluded.token OR leases.expires_at <= excluded.since
			RETURNING since, expires_at`,
			l.Project, l.Token, l.Holder, l.Server, millis(l.Since), term, !s.callerClockLeases).Scan(&since, &expires)
		if err == nil {
			l.Since, l.Expires = fromMillis(since), fromMillis(expires) // a renewal keeps the time it was taken
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
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

// RenewLease moves the expiry of a lease still held with token.
func (s *Store) RenewLease(ctx context.Context, project, token string, expires time.Time) error {
	err := s.writeTx(ctx, false, func(tx *txn) error {
		// With the database's clock, the caller's expiry counts only as a
		// term from its own now.
		tag, err := tx.Exec(ctx, `UPDATE leases SET expires_at = CASE WHEN $4::boolean THEN `+dbNowMillis+` + $5::bigint ELSE $3::bigint END
			WHERE project = $1 AND token = $2`,
			project, token, millis(expires), !s.callerClockLeases, time.Until(expires).Milliseconds())
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
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
func (s *Store) ReleaseLease(ctx context.Context, project, token string) error {
	err := s.writeTx(ctx, false, func(tx *txn) error {
		_, err := tx.Exec(ctx, `DELETE FROM leases WHERE project = $1 AND token = $2`, project, token)
		return err
	})
	if err != nil {
		return fmt.Errorf("release lease of %s: %w", project, err)
	}
	return nil
}

// ReleaseServerLeases releases every lease a server holds.
func (s *Store) ReleaseServerLeases(ctx context.Context, server string) ([]store.Lease, error) {
	var released []store.Lease
	err := s.writeTx(ctx, false, func(tx *txn) error {
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

func scanLease(row pgx.Row) (store.Lease, error) {
	var l store.Lease
	var since, expires int64
	if err := row.Scan(&l.Project, &l.Token, &l.Holder, &l.Server, &since, &expires); err != nil {
		return store.Lease{}, err
	}
	l.Since, l.Expires = fromMillis(since), fromMillis(expires)
	return l, nil
}

// planOwner is the blob retention owner of a plan.
func planOwner(id string) string { return "plan:" + id }

// PutPlan stores a new plan and retains its blobs, in one transaction.
func (s *Store) PutPlan(ctx context.Context, p store.StoredPlan) error {
	err := s.write(ctx, func(tx *txn) error {
		tag, err := tx.Exec(ctx, `INSERT INTO plans (id, project, created_at, expires_at, doc)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING`,
			p.ID, p.Project, millis(p.Created), millis(p.Expires), string(p.Doc))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return store.ErrExists
		}
		for _, d := range sortedUnique(p.Blobs) {
			if _, err := tx.Exec(ctx, `INSERT INTO blob_retention (owner, digest) VALUES ($1, $2)
				ON CONFLICT DO NOTHING`, planOwner(p.ID), d); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("put plan %s: %w", p.ID, err)
	}
	return nil
}

// Plan returns a stored plan.
func (s *Store) Plan(ctx context.Context, id string) (store.StoredPlan, error) {
	p := store.StoredPlan{ID: id}
	var created, expires int64
	var doc string
	err := s.db.QueryRow(ctx, `SELECT project, created_at, expires_at, doc,
			COALESCE(ARRAY(SELECT digest FROM blob_retention WHERE owner = $2 ORDER BY digest COLLATE "C"), '{}')
		FROM plans WHERE id = $1`, id, planOwner(id)).
		Scan(&p.Project, &created, &expires, &doc, &p.Blobs)
	if err != nil {
		return store.StoredPlan{}, fmt.Errorf("plan %s: %w", id, notFound(err, "no such plan"))
	}
	if len(p.Blobs) == 0 {
		p.Blobs = nil
	}
	p.Created, p.Expires, p.Doc = fromMillis(created), fromMillis(expires), []byte(doc)
	return p, nil
}

// DeletePlan forgets a plan and its retained blobs.
func (s *Store) DeletePlan(ctx context.Context, id string) error {
	err := s.write(ctx, func(tx *txn) error { return deletePlans(ctx, tx, []string{id}) })
	if err != nil {
		return fmt.Errorf("delete plan %s: %w", id, err)
	}
	return nil
}

// DeleteExpiredPlans forgets the plans expired at now.
func (s *Store) DeleteExpiredPlans(ctx context.Context, now time.Time) (int, error) {
	var ids []string
	err := s.write(ctx, func(tx *txn) error {
		rows, err := tx.Query(ctx, `DELETE FROM plans WHERE expires_at <= $1 RETURNING id`, millis(now))
		if err != nil {
			return err
		}
		if ids, err = scanStrings(rows, "expired plans"); err != nil {
			return err
		}
		return deletePlans(ctx, tx, ids)
	})
	if err != nil {
		return 0, fmt.Errorf("delete expired plans: %w", err)
	}
	return len(ids), nil
}

func deletePlans(ctx context.Context, tx *txn, ids []string) error {
	owners := make([]string, len(ids))
	for i, id := range ids {
		owners[i] = planOwner(id)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM plans WHERE id = ANY($1)`, ids); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `DELETE FROM blob_retention WHERE owner = ANY($1)`, owners)
	return err
}

// PutSecretValue stores a sealed secret value, keeping one stored already.
func (s *Store) PutSecretValue(ctx context.Context, v store.SecretValue) error {
	err := s.write(ctx, func(tx *txn) error {
		_, err := tx.Exec(ctx, `INSERT INTO secret_values (project, name, fingerprint, sealed, created_at)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (project, name, fingerprint) DO NOTHING`,
			v.Project, v.Name, v.Fingerprint, v.Sealed, millis(v.Created))
		return err
	})
	if err != nil {
		return fmt.Errorf("put value of secret %s in %s: %w", v.Name, v.Project, err)
	}
	return nil
}

// SecretValue returns one sealed value of a secret.
func (s *Store) SecretValue(ctx context.Context, project, name, fingerprint string) (store.SecretValue, error) {
	v := store.SecretValue{Project: project, Name: name, Fingerprint: fingerprint}
	var created int64
	err := s.db.QueryRow(ctx, `SELECT sealed, created_at FROM secret_values
		WHERE project = $1 AND name = $2 AND fingerprint = $3`, project, name, fingerprint).Scan(&v.Sealed, &created)
	if err != nil {
		return store.SecretValue{}, fmt.Errorf("value of secret %s in %s: %w", name, project, notFound(err, "no value with that fingerprint"))
	}
	v.Created = fromMillis(created)
	return v, nil
}

// PruneSecretValues deletes the secret's values created before before whose
// fingerprint is not in keep.
func (s *Store) PruneSecretValues(ctx context.Context, project, name string, keep []string, before time.Time) error {
	if keep == nil {
		keep = []string{}
	}
	err := s.write(ctx, func(tx *txn) error {
		_, err := tx.Exec(ctx, `DELETE FROM secret_values
			WHERE project = $1 AND name = $2 AND created_at < $3 AND NOT (fingerprint = ANY($4))`,
			project, name, millis(before), keep)
		return err
	})
	if err != nil {
		return fmt.Errorf("prune values of secret %s in %s: %w", name, project, err)
	}
	return nil
}

// DeleteSecretValues deletes every value of a secret.
func (s *Store) DeleteSecretValues(ctx context.Context, project, name string) error {
	err := s.write(ctx, func(tx *txn) error {
		_, err := tx.Exec(ctx, `DELETE FROM secret_values WHERE project = $1 AND name = $2`, project, name)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete values of secret %s in %s: %w", name, project, err)
	}
	return nil
}

func sortedUnique(in []string) []string {
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}
