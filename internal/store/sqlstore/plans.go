package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

// Plans keeps pending plans, each retaining its blobs (store.Plans).
type Plans struct{ base }

var _ store.Plans = (*Plans)(nil)

// planOwner is the blob retention owner of a plan.
func planOwner(id string) string { return "plan:" + id }

// PutPlan stores a new plan and retains its blobs, in one transaction.
func (s *Plans) PutPlan(ctx context.Context, p store.StoredPlan) error {
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
func (s *Plans) Plan(ctx context.Context, id string) (store.StoredPlan, error) {
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
func (s *Plans) DeletePlan(ctx context.Context, id string) error {
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
func (s *Plans) DeleteExpiredPlans(ctx context.Context, now time.Time) (int, error) {
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
