package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/hatchery/hatchery/internal/store"
)

// PutDesiredState stores a host's desired state and wakes its waiters, unless
// the stored version is the same.
func (s *Store) PutDesiredState(ctx context.Context, d store.DesiredState) (bool, error) {
	changed := false
	err := s.write(ctx, func(tx *txn) error {
		changed = false
		// One statement: the row is locked by the upsert, and the version
		// compared under that lock, so two servers' puts cannot both think
		// they changed nothing.
		tag, err := tx.Exec(ctx, `INSERT INTO desired_states (host_id, version, doc, updated_at)
			VALUES ($1, $2, $3, $4)
			ON CONFLICT (host_id) DO UPDATE SET
				version = excluded.version, doc = excluded.doc, updated_at = excluded.updated_at
			WHERE desired_states.version <> excluded.version`,
			d.HostID, d.Version, string(d.Doc), millis(d.UpdatedAt))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
		changed = true
		tx.wakeHosts = []string{d.HostID}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("put desired state of host %s: %w", d.HostID, err)
	}
	return changed, nil
}

// DesiredState returns a host's desired state (a zero one if it has none).
func (s *Store) DesiredState(ctx context.Context, hostID string) (store.DesiredState, error) {
	d := store.DesiredState{HostID: hostID}
	var doc string
	var updated int64
	err := s.db.QueryRow(ctx, `SELECT version, doc, updated_at FROM desired_states WHERE host_id = $1`,
		hostID).Scan(&d.Version, &doc, &updated)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, nil
	}
	if err != nil {
		return store.DesiredState{}, fmt.Errorf("desired state of host %s: %w", hostID, err)
	}
	d.Doc, d.UpdatedAt = []byte(doc), fromMillis(updated)
	return d, nil
}

// WatchDesiredState returns a channel closed at the host's next change.
func (s *Store) WatchDesiredState(hostID string) <-chan struct{} { return s.desired.Wait(hostID) }
