package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

var (
	_ store.Leases       = (*Store)(nil)
	_ store.Plans        = (*Store)(nil)
	_ store.SecretValues = (*Store)(nil)
)

// AcquireLease takes a project's lease if it is free, expired, or already
// held with the same token.
func (s *Store) AcquireLease(ctx context.Context, l store.Lease) (store.Lease, error) {
	if l.Project == "" || l.Token == "" {
		return store.Lease{}, errors.New("acquire lease: project and token must be set")
	}
	err := s.writeTx(ctx, false, func(tx *txn) error {
		held, err := scanLease(tx.QueryRowContext(ctx, `SELECT `+leaseColumns+` FROM leases WHERE project = $1`, l.Project))
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		case held.Token == l.Token:
			l.Since = held.Since // a renewal keeps the time it was taken
		case held.Expires.After(l.Since):
			return &store.LockedError{Held: held}
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO leases (project, token, holder, server, since, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (project) DO UPDATE SET token = excluded.token, holder = excluded.holder,
				server = excluded.server, since = excluded.since, expires_at = excluded.expires_at`,
			l.Project, l.Token, l.Holder, l.Server, millis(l.Since), millis(l.Expires))
		return err
	})
	if err != nil {
		return store.Lease{}, fmt.Errorf("acquire lease of %s: %w", l.Project, err)
	}
	l.Since, l.Expires = fromMillis(millis(l.Since)), fromMillis(millis(l.Expires))
	return l, nil
}

// RenewLease moves the expiry of a lease still held with token.
func (s *Store) RenewLease(ctx context.Context, project, token string, expires time.Time) error {
	err := s.writeTx(ctx, false, func(tx *txn) error {
		res, err := tx.ExecContext(ctx, `UPDATE leases SET expires_at = $3 WHERE project = $1 AND token = $2`,
			project, token, millis(expires))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(err, fmt.Errorf("lease no longer held: %w", store.ErrNotFound))
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
		_, err := tx.ExecContext(ctx, `DELETE FROM leases WHERE project = $1 AND token = $2`, project, token)
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
		rows, err := tx.QueryContext(ctx, `SELECT `+leaseColumns+` FROM leases WHERE server = $1 ORDER BY project`, server)
		if err != nil {
			return err
		}
		err = func() error {
			defer rows.Close()
			for rows.Next() {
				l, err := scanLease(rows)
				if err != nil {
					return err
				}
				released = append(released, l)
			}
			return rows.Err()
		}()
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM leases WHERE server = $1`, server)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("release leases of server %s: %w", server, err)
	}
	return released, nil
}

const leaseColumns = `project, token, holder, server, since, expires_at`

func scanLease(row scanner) (store.Lease, error) {
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
		res, err := tx.ExecContext(ctx, `INSERT INTO plans (id, project, created_at, expires_at, doc)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING`,
			p.ID, p.Project, millis(p.Created), millis(p.Expires), string(p.Doc))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(err, store.ErrExists)
		}
		for _, d := range sortedUnique(p.Blobs) {
			if _, err := tx.ExecContext(ctx, `INSERT INTO blob_retention (owner, digest) VALUES ($1, $2)
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
	err := s.db.QueryRowContext(ctx, `SELECT project, created_at, expires_at, doc FROM plans WHERE id = $1`, id).
		Scan(&p.Project, &created, &expires, &doc)
	if err != nil {
		return store.StoredPlan{}, fmt.Errorf("plan %s: %w", id, notFound(err, "no such plan"))
	}
	p.Created, p.Expires, p.Doc = fromMillis(created), fromMillis(expires), []byte(doc)
	rows, err := s.db.QueryContext(ctx, `SELECT digest FROM blob_retention WHERE owner = $1 ORDER BY digest`, planOwner(id))
	if err != nil {
		return store.StoredPlan{}, fmt.Errorf("plan %s: %w", id, err)
	}
	if p.Blobs, err = scanStrings(rows, "plan blobs"); err != nil {
		return store.StoredPlan{}, fmt.Errorf("plan %s: %w", id, err)
	}
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
		rows, err := tx.QueryContext(ctx, `SELECT id FROM plans WHERE expires_at <= $1`, millis(now))
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
	for _, id := range ids {
		if _, err := tx.ExecContext(ctx, `DELETE FROM plans WHERE id = $1`, id); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM blob_retention WHERE owner = $1`, planOwner(id)); err != nil {
			return err
		}
	}
	return nil
}

// PutSecretValue stores a sealed secret value, keeping one stored already.
func (s *Store) PutSecretValue(ctx context.Context, v store.SecretValue) error {
	err := s.write(ctx, func(tx *txn) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO secret_values (project, name, fingerprint, sealed, created_at)
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
	err := s.db.QueryRowContext(ctx, `SELECT sealed, created_at FROM secret_values
		WHERE project = $1 AND name = $2 AND fingerprint = $3`, project, name, fingerprint).Scan(&v.Sealed, &created)
	if err != nil {
		return store.SecretValue{}, fmt.Errorf("value of secret %s in %s: %w", name, project, notFound(err, "no value with that fingerprint"))
	}
	v.Created = fromMillis(created)
	return v, nil
}

// PruneSecretValues deletes the secret's old values not in keep.
func (s *Store) PruneSecretValues(ctx context.Context, project, name string, keep []string, before time.Time) error {
	err := s.write(ctx, func(tx *txn) error {
		rows, err := tx.QueryContext(ctx, `SELECT fingerprint FROM secret_values
			WHERE project = $1 AND name = $2 AND created_at < $3`, project, name, millis(before))
		if err != nil {
			return err
		}
		old, err := scanStrings(rows, "secret values")
		if err != nil {
			return err
		}
		kept := make(map[string]bool, len(keep))
		for _, k := range keep {
			kept[k] = true
		}
		for _, fp := range old {
			if kept[fp] {
				continue
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM secret_values WHERE project = $1 AND name = $2 AND fingerprint = $3`,
				project, name, fp); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("prune values of secret %s in %s: %w", name, project, err)
	}
	return nil
}

// DeleteSecretValues deletes every value of a secret.
func (s *Store) DeleteSecretValues(ctx context.Context, project, name string) error {
	err := s.write(ctx, func(tx *txn) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM secret_values WHERE project = $1 AND name = $2`, project, name)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete values of secret %s in %s: %w", name, project, err)
	}
	return nil
}
