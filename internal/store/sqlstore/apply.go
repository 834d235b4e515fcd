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
func (s *Store) AcquireLease(ctx context.Context, l store.Lease) (store.Lease, error) {
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
func (s *Store) RenewLease(ctx context.Context, project, token string, expires time.Time) error {
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
func (s *Store) ReleaseLease(ctx context.Context, project, token string) error {
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
func (s *Store) ReleaseServerLeases(ctx context.Context, server string) ([]store.Lease, error) {
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

// planOwner is the blob retention owner of a plan.
func planOwner(id string) string { return "plan:" + id }

// PutPlan stores a new plan and retains its blobs, in one transaction.
func (s *Store) PutPlan(ctx context.Context, p store.StoredPlan) error {
	err := s.write(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, `INSERT INTO plans (id, project, created_at, expires_at, doc)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING`,
			p.ID, p.Project, Millis(p.Created), Millis(p.Expires), string(p.Doc))
		if err != nil {
			return err
		}
		if n == 0 {
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

// Plan returns a stored plan, read in one statement (a row per blob it
// retains) so the plan and its blobs are seen together.
func (s *Store) Plan(ctx context.Context, id string) (store.StoredPlan, error) {
	rows, err := s.db.Query(ctx, `SELECT p.project, p.created_at, p.expires_at, p.doc, b.digest
		FROM plans p LEFT JOIN blob_retention b ON b.owner = $2
		WHERE p.id = $1 ORDER BY b.digest`+s.d.ByteOrder, id, planOwner(id))
	if err != nil {
		return store.StoredPlan{}, fmt.Errorf("plan %s: %w", id, err)
	}
	defer rows.Close()
	p := store.StoredPlan{ID: id}
	found := false
	for rows.Next() {
		var created, expires int64
		var doc string
		var blob *string // NULL for a plan without blobs
		if err := rows.Scan(&p.Project, &created, &expires, &doc, &blob); err != nil {
			return store.StoredPlan{}, fmt.Errorf("plan %s: %w", id, err)
		}
		found = true
		p.Created, p.Expires, p.Doc = FromMillis(created), FromMillis(expires), []byte(doc)
		if blob != nil {
			p.Blobs = append(p.Blobs, *blob)
		}
	}
	if err := rows.Err(); err != nil {
		return store.StoredPlan{}, fmt.Errorf("plan %s: %w", id, err)
	}
	if !found {
		return store.StoredPlan{}, fmt.Errorf("plan %s: no such plan: %w", id, store.ErrNotFound)
	}
	return p, nil
}

// DeletePlan forgets a plan and its retained blobs.
func (s *Store) DeletePlan(ctx context.Context, id string) error {
	err := s.write(ctx, func(tx Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM plans WHERE id = $1`, id); err != nil {
			return err
		}
		return releasePlanBlobs(ctx, tx, []string{id})
	})
	if err != nil {
		return fmt.Errorf("delete plan %s: %w", id, err)
	}
	return nil
}

// DeleteExpiredPlans forgets the plans expired at now.
func (s *Store) DeleteExpiredPlans(ctx context.Context, now time.Time) (int, error) {
	var ids []string
	err := s.write(ctx, func(tx Tx) error {
		rows, err := tx.Query(ctx, `DELETE FROM plans WHERE expires_at <= $1 RETURNING id`, Millis(now))
		if err != nil {
			return err
		}
		if ids, err = scanStrings(rows, "expired plans"); err != nil {
			return err
		}
		return releasePlanBlobs(ctx, tx, ids)
	})
	if err != nil {
		return 0, fmt.Errorf("delete expired plans: %w", err)
	}
	return len(ids), nil
}

// releasePlanBlobs drops the blobs the plans retained.
func releasePlanBlobs(ctx context.Context, tx Tx, ids []string) error {
	for _, id := range ids {
		if _, err := tx.Exec(ctx, `DELETE FROM blob_retention WHERE owner = $1`, planOwner(id)); err != nil {
			return err
		}
	}
	return nil
}

// PutSecretValue stores a sealed secret value, keeping one stored already.
func (s *Store) PutSecretValue(ctx context.Context, v store.SecretValue) error {
	err := s.write(ctx, func(tx Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO secret_values (project, name, fingerprint, sealed, created_at)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (project, name, fingerprint) DO NOTHING`,
			v.Project, v.Name, v.Fingerprint, v.Sealed, Millis(v.Created))
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
	v.Created = FromMillis(created)
	return v, nil
}

// PruneSecretValues deletes the secret's values created before before whose
// fingerprint is not in keep.
func (s *Store) PruneSecretValues(ctx context.Context, project, name string, keep []string, before time.Time) error {
	err := s.write(ctx, func(tx Tx) error {
		rows, err := tx.Query(ctx, `SELECT fingerprint FROM secret_values
			WHERE project = $1 AND name = $2 AND created_at < $3`, project, name, Millis(before))
		if err != nil {
			return err
		}
		old, err := scanStrings(rows, "secret values")
		if err != nil {
			return err
		}
		for _, fp := range old {
			if slices.Contains(keep, fp) {
				continue
			}
			if _, err := tx.Exec(ctx, `DELETE FROM secret_values WHERE project = $1 AND name = $2 AND fingerprint = $3`,
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
	err := s.write(ctx, func(tx Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM secret_values WHERE project = $1 AND name = $2`, project, name)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete values of secret %s in %s: %w", name, project, err)
	}
	return nil
}
