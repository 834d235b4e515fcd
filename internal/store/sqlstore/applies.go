package sqlstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

// ApplyHistory records the applies of each project, the last few kept
// (store.ApplyHistory).
type ApplyHistory struct{ base }

var _ store.ApplyHistory = (*ApplyHistory)(nil)

// StartApply records a running apply and trims the project's history.
func (s *ApplyHistory) StartApply(ctx context.Context, n store.NewApply) (store.Apply, error) {
	project := n.Project
	a := store.Apply{Project: project, Started: n.At.UTC(), Outcome: store.ApplyRunning, Actor: n.Actor,
		Blobs: sortedUnique(n.Blobs), Summary: n.Summary, Digest: n.Digest, RollbackOf: n.RollbackOf, HasInputs: len(n.Inputs) > 0}
	text := s.d.StorableText
	err := s.write(ctx, func(tx Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO applies (project, started_at, finished_at, outcome, message, actor,
			inputs, summary, digest, rollback_of)
			VALUES ($1, $2, 0, $3, '', $4, $5, $6, $7, $8) RETURNING id`, project, Millis(n.At), string(a.Outcome), n.Actor,
			text(string(n.Inputs)), text(n.Summary), text(n.Digest), n.RollbackOf).Scan(&a.ID)
		if err != nil {
			return err
		}
		for _, d := range a.Blobs {
			if _, err := tx.Exec(ctx, `INSERT INTO apply_blobs (apply_id, digest) VALUES ($1, $2)`, a.ID, d); err != nil {
				return err
			}
		}
		// The oldest record to drop is the one Keep places below the
		// newest; it and all before it go, with their blobs.
		const older = `SELECT id FROM applies WHERE project = $1 AND id <=
			(SELECT id FROM applies WHERE project = $1 ORDER BY id DESC LIMIT 1 OFFSET $2)`
		keep := store.KeepOf(n)
		if _, err := tx.Exec(ctx, `DELETE FROM apply_blobs WHERE apply_id IN (`+older+`)`, project, keep); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM applies WHERE id IN (`+older+`)`, project, keep); err != nil {
			return err
		}
		_, err = tx.AppendEvent(ctx, store.Event{Time: n.At, Type: store.EventApplyStarted, Project: project, Actor: n.Actor,
			Message: store.ApplyStartedMessage(a)})
		return err
	})
	if err != nil {
		return store.Apply{}, fmt.Errorf("start apply of %s: %w", project, err)
	}
	return a, nil
}

// FinishApply records a running apply's outcome.
func (s *ApplyHistory) FinishApply(ctx context.Context, id int64, outcome store.ApplyOutcome, message string, at time.Time) error {
	if outcome != store.ApplySucceeded && outcome != store.ApplyFailed {
		return fmt.Errorf("finish apply %d: outcome %q is not succeeded or failed", id, outcome)
	}
	err := s.write(ctx, func(tx Tx) error {
		var project string
		err := tx.QueryRow(ctx, `UPDATE applies SET finished_at = $2, outcome = $3, message = $4
			WHERE id = $1 AND outcome = $5 RETURNING project`,
			id, Millis(at), string(outcome), s.d.StorableText(message), string(store.ApplyRunning)).Scan(&project)
		if err != nil {
			return notFound(err, "no running apply with that id")
		}
		msg := "apply " + strconv.FormatInt(id, 10) + " of " + project + " " + string(outcome)
		if message != "" {
			msg += ": " + message
		}
		_, err = tx.AppendEvent(ctx, store.Event{Time: at, Type: store.EventApplyFinished, Project: project, Message: msg})
		return err
	})
	if err != nil {
		return fmt.Errorf("finish apply %d: %w", id, err)
	}
	return nil
}

// Applies returns the project's kept apply records, newest first, read in one
// statement (a row per record and blob) so a record and its blobs are seen
// together.
func (s *ApplyHistory) Applies(ctx context.Context, project string) ([]store.Apply, error) {
	rows, err := s.db.Query(ctx, `SELECT a.id, a.started_at, a.finished_at, a.outcome, a.message, a.actor,
			a.summary, a.digest, a.rollback_of, a.inputs <> '', b.digest
		FROM applies a LEFT JOIN apply_blobs b ON b.apply_id = a.id
		WHERE a.project = $1 ORDER BY a.id DESC, b.digest`+s.d.ByteOrder, project)
	if err != nil {
		return nil, fmt.Errorf("applies of %s: %w", project, err)
	}
	defer rows.Close()
	var out []store.Apply
	for rows.Next() {
		a := store.Apply{Project: project}
		var started, finished int64
		var outcome string
		var blob *string // NULL for a record without blobs
		if err := rows.Scan(&a.ID, &started, &finished, &outcome, &a.Message, &a.Actor,
			&a.Summary, &a.Digest, &a.RollbackOf, &a.HasInputs, &blob); err != nil {
			return nil, fmt.Errorf("applies of %s: %w", project, err)
		}
		if len(out) == 0 || out[len(out)-1].ID != a.ID {
			a.Started, a.Finished, a.Outcome = FromMillis(started), FromMillis(finished), store.ApplyOutcome(outcome)
			out = append(out, a)
		}
		if blob != nil {
			last := &out[len(out)-1]
			last.Blobs = append(last.Blobs, *blob)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("applies of %s: %w", project, err)
	}
	return out, nil
}

// ApplyInputs returns the inputs a kept apply record of the project holds.
func (s *ApplyHistory) ApplyInputs(ctx context.Context, project string, id int64) ([]byte, error) {
	var inputs string
	err := s.db.QueryRow(ctx, `SELECT inputs FROM applies WHERE project = $1 AND id = $2`, project, id).Scan(&inputs)
	if err != nil {
		return nil, fmt.Errorf("inputs of apply %d of %s: %w", id, project, notFound(err, "no such apply kept"))
	}
	return []byte(inputs), nil
}
