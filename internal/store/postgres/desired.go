package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/hatchery/hatchery/internal/store"
)

// PutDesiredStates stores, in one transaction, the states and the peer list
// whose stored versions differ, and wakes their waiters once committed. The
// upserts go to the database as one batch, in host order, so two servers
// writing the same hosts lock their rows in the same order.
func (s *Store) PutDesiredStates(ctx context.Context, states []store.DesiredState, peers *store.PeerList) (bool, error) {
	states = slices.SortedFunc(slices.Values(states), func(a, b store.DesiredState) int { return strings.Compare(a.HostID, b.HostID) })
	changed := false
	err := s.write(ctx, func(tx *txn) error {
		var batch pgx.Batch
		for _, d := range states {
			// The row is locked by the upsert and the version compared under
			// that lock, so two servers' puts cannot both think they changed
			// nothing.
			batch.Queue(`INSERT INTO desired_states (host_id, version, doc, updated_at)
				VALUES ($1, $2, $3, $4)
				ON CONFLICT (host_id) DO UPDATE SET
					version = excluded.version, doc = excluded.doc, updated_at = excluded.updated_at
				WHERE desired_states.version <> excluded.version`,
				d.HostID, d.Version, string(d.Doc), millis(d.UpdatedAt))
		}
		if peers != nil {
			batch.Queue(`INSERT INTO desired_peers (id, version, doc, updated_at)
				VALUES (1, $1, $2, $3)
				ON CONFLICT (id) DO UPDATE SET
					version = excluded.version, doc = excluded.doc, updated_at = excluded.updated_at
				WHERE desired_peers.version <> excluded.version`,
				peers.Version, string(peers.Doc), millis(peers.UpdatedAt))
		}
		results := tx.SendBatch(ctx, &batch)
		for _, d := range states {
			tag, err := results.Exec()
			if err != nil {
				results.Close()
				return fmt.Errorf("desired state of host %s: %w", d.HostID, err)
			}
			if tag.RowsAffected() > 0 {
				tx.wakeHosts = append(tx.wakeHosts, d.HostID)
			}
		}
		if peers != nil {
			tag, err := results.Exec()
			if err != nil {
				results.Close()
				return fmt.Errorf("peer list: %w", err)
			}
			tx.wakeAllHosts = tag.RowsAffected() > 0
		}
		if err := results.Close(); err != nil {
			return err
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
	d, err := scanDesiredState(s.db.QueryRow(ctx, `SELECT `+desiredColumns+` FROM desired_states WHERE host_id = $1`, hostID))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.DesiredState{HostID: hostID}, nil
	}
	if err != nil {
		return store.DesiredState{}, fmt.Errorf("desired state of host %s: %w", hostID, err)
	}
	return d, nil
}

// AllDesiredStates returns every host's desired state, sorted by host ID.
func (s *Store) AllDesiredStates(ctx context.Context) ([]store.DesiredState, error) {
	rows, err := s.db.Query(ctx, `SELECT `+desiredColumns+` FROM desired_states ORDER BY host_id COLLATE "C"`)
	if err != nil {
		return nil, fmt.Errorf("desired states: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.DesiredState, error) { return scanDesiredState(row) })
	if err != nil {
		return nil, fmt.Errorf("desired states: %w", err)
	}
	return out, nil
}

const desiredColumns = `host_id, version, doc, updated_at`

func scanDesiredState(row pgx.Row) (store.DesiredState, error) {
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
	err := s.db.QueryRow(ctx, `SELECT version, doc, updated_at FROM desired_peers WHERE id = 1`).Scan(&l.Version, &doc, &updated)
	if errors.Is(err, pgx.ErrNoRows) {
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
