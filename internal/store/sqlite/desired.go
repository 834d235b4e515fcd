package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/hatchery/hatchery/internal/store"
)

// PutDesiredState stores a host's desired state and wakes its waiters, unless
// the stored version is the same.
func (s *Store) PutDesiredState(ctx context.Context, d store.DesiredState) (bool, error) {
	changed := false
	err := s.write(ctx, func(tx *txn) error {
		var version string
		err := tx.QueryRowContext(ctx, `SELECT version FROM desired_states WHERE host_id = $1`, d.HostID).Scan(&version)
		if err == nil && version == d.Version {
			return nil
		}
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO desired_states (host_id, version, doc, updated_at)
			VALUES ($1, $2, $3, $4)
			ON CONFLICT (host_id) DO UPDATE SET
				version = excluded.version, doc = excluded.doc, updated_at = excluded.updated_at`,
			d.HostID, d.Version, string(d.Doc), millis(d.UpdatedAt)); err != nil {
			return err
		}
		changed = true
		tx.wakeHosts = append(tx.wakeHosts, d.HostID)
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
	err := s.db.QueryRowContext(ctx, `SELECT version, doc, updated_at FROM desired_states WHERE host_id = $1`,
		hostID).Scan(&d.Version, &doc, &updated)
	if errors.Is(err, sql.ErrNoRows) {
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
