package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/hatchery/hatchery/internal/store"
)

// PutDesiredStates stores, in one transaction, the states and the peer list
// whose stored versions differ, and wakes their waiters once committed.
func (s *Store) PutDesiredStates(ctx context.Context, states []store.DesiredState, peers *store.PeerList) (bool, error) {
	changed := false
	err := s.write(ctx, func(tx *txn) error {
		put, err := tx.PrepareContext(ctx, `INSERT INTO desired_states (host_id, version, doc, updated_at)
			VALUES ($1, $2, $3, $4)
			ON CONFLICT (host_id) DO UPDATE SET
				version = excluded.version, doc = excluded.doc, updated_at = excluded.updated_at
			WHERE desired_states.version <> excluded.version`)
		if err != nil {
			return err
		}
		defer put.Close()
		for _, d := range states {
			res, err := put.ExecContext(ctx, d.HostID, d.Version, string(d.Doc), millis(d.UpdatedAt))
			if err != nil {
				return fmt.Errorf("desired state of host %s: %w", d.HostID, err)
			}
			if n, err := res.RowsAffected(); err != nil || n > 0 {
				tx.wakeHosts = append(tx.wakeHosts, d.HostID)
			}
		}
		if peers != nil {
			res, err := tx.ExecContext(ctx, `INSERT INTO desired_peers (id, version, doc, updated_at)
				VALUES (1, $1, $2, $3)
				ON CONFLICT (id) DO UPDATE SET
					version = excluded.version, doc = excluded.doc, updated_at = excluded.updated_at
				WHERE desired_peers.version <> excluded.version`,
				peers.Version, string(peers.Doc), millis(peers.UpdatedAt))
			if err != nil {
				return fmt.Errorf("peer list: %w", err)
			}
			n, err := res.RowsAffected()
			tx.wakeAllHosts = err != nil || n > 0
		}
		changed = len(tx.wakeHosts) > 0 || tx.wakeAllHosts
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("put desired states: %w", err)
	}
	return changed, nil
}

// DesiredState returns a host's desired state (a zero one if it has none).
func (s *Store) DesiredState(ctx context.Context, hostID string) (store.DesiredState, error) {
	d, err := scanDesiredState(s.db.QueryRowContext(ctx, `SELECT `+desiredColumns+` FROM desired_states WHERE host_id = $1`, hostID))
	if errors.Is(err, sql.ErrNoRows) {
		return store.DesiredState{HostID: hostID}, nil
	}
	if err != nil {
		return store.DesiredState{}, fmt.Errorf("desired state of host %s: %w", hostID, err)
	}
	return d, nil
}

// AllDesiredStates returns every host's desired state, sorted by host ID.
func (s *Store) AllDesiredStates(ctx context.Context) ([]store.DesiredState, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+desiredColumns+` FROM desired_states ORDER BY host_id`)
	if err != nil {
		return nil, fmt.Errorf("desired states: %w", err)
	}
	defer rows.Close()
	var out []store.DesiredState
	for rows.Next() {
		d, err := scanDesiredState(rows)
		if err != nil {
			return nil, fmt.Errorf("desired states: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("desired states: %w", err)
	}
	return out, nil
}

const desiredColumns = `host_id, version, doc, updated_at`

func scanDesiredState(row scanner) (store.DesiredState, error) {
	var d store.DesiredState
	var doc string
	var updated int64
	if err := row.Scan(&d.HostID, &d.Version, &doc, &updated); err != nil {
		return store.DesiredState{}, err
	}
	d.Doc, d.UpdatedAt = []byte(doc), fromMillis(updated)
	return d, nil
}

// DesiredPeers returns the stored peer list (a zero one if there is none).
func (s *Store) DesiredPeers(ctx context.Context) (store.PeerList, error) {
	var l store.PeerList
	var doc string
	var updated int64
	err := s.db.QueryRowContext(ctx, `SELECT version, doc, updated_at FROM desired_peers WHERE id = 1`).Scan(&l.Version, &doc, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return store.PeerList{}, nil
	}
	if err != nil {
		return store.PeerList{}, fmt.Errorf("peer list: %w", err)
	}
	l.Doc, l.UpdatedAt = []byte(doc), fromMillis(updated)
	return l, nil
}

// WatchDesiredState returns a channel closed at the host's next change.
func (s *Store) WatchDesiredState(hostID string) <-chan struct{} { return s.desired.Wait(hostID) }
