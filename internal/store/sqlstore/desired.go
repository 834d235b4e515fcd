package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hatchery/hatchery/internal/store"
)

// DesiredStates reads and writes each host's desired state and the fleet's
// peer list (store.DesiredStates but its waits, which are the backend's
// Waiters: a write names, through its Tx, the hosts to wake).
type DesiredStates struct{ base }

// PutDesiredStates stores, in one transaction, the states and the peer list
// whose stored versions differ, and has their waiters woken once committed.
// Each upsert locks its row and compares the version under that lock, so
// two servers' puts cannot both think they changed nothing; the rows go in
// host order, so two servers writing the same hosts lock them in the same
// order.
func (s *DesiredStates) PutDesiredStates(ctx context.Context, states []store.DesiredState, peers *store.PeerList) (bool, error) {
	states = slices.SortedFunc(slices.Values(states), func(a, b store.DesiredState) int { return strings.Compare(a.HostID, b.HostID) })
	args := make([][]any, len(states))
	for i, d := range states {
		args[i] = []any{d.HostID, d.Version, string(d.Doc), Millis(d.UpdatedAt)}
	}
	changed := false
	err := s.write(ctx, func(tx Tx) error {
		changed = false
		rows, err := tx.ExecEach(ctx, `INSERT INTO desired_states (host_id, version, doc, updated_at)
			VALUES ($1, $2, $3, $4)
			ON CONFLICT (host_id) DO UPDATE SET
				version = excluded.version, doc = excluded.doc, updated_at = excluded.updated_at
			WHERE desired_states.version <> excluded.version`, args)
		if err != nil {
			return err
		}
		for i, n := range rows {
			if n > 0 {
				tx.WakeHosts(states[i].HostID)
				changed = true
			}
		}
		if peers == nil {
			return nil
		}
		n, err := tx.Exec(ctx, `INSERT INTO desired_peers (id, version, doc, updated_at)
			VALUES (1, $1, $2, $3)
			ON CONFLICT (id) DO UPDATE SET
				version = excluded.version, doc = excluded.doc, updated_at = excluded.updated_at
			WHERE desired_peers.version <> excluded.version`,
			peers.Version, string(peers.Doc), Millis(peers.UpdatedAt))
		if err != nil {
			return fmt.Errorf("peer list: %w", err)
		}
		if n > 0 {
			tx.WakeAllHosts()
			changed = true
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("put desired states: %w", err)
	}
	return changed, nil
}

const desiredColumns = `host_id, version, doc, updated_at`

func scanDesiredState(row Row) (store.DesiredState, error) {
	var d store.DesiredState
	var doc string
	var updated int64
	if err := row.Scan(&d.HostID, &d.Version, &doc, &updated); err != nil {
		return store.DesiredState{}, err
	}
	d.Doc, d.UpdatedAt = []byte(doc), FromMillis(updated)
	return d, nil
}

// DesiredState returns a host's desired state (a zero one if it has none).
func (s *DesiredStates) DesiredState(ctx context.Context, hostID string) (store.DesiredState, error) {
	d, err := scanDesiredState(s.db.QueryRow(ctx, `SELECT `+desiredColumns+` FROM desired_states WHERE host_id = $1`, hostID))
	if errors.Is(err, ErrNoRows) {
		return store.DesiredState{HostID: hostID}, nil
	}
	if err != nil {
		return store.DesiredState{}, fmt.Errorf("desired state of host %s: %w", hostID, err)
	}
	return d, nil
}

// AllDesiredStates returns every host's desired state, sorted by host ID.
func (s *DesiredStates) AllDesiredStates(ctx context.Context) ([]store.DesiredState, error) {
	rows, err := s.db.Query(ctx, `SELECT `+desiredColumns+` FROM desired_states ORDER BY host_id`+s.d.ByteOrder)
	if err != nil {
		return nil, fmt.Errorf("desired states: %w", err)
	}
	out, err := collect(rows, scanDesiredState)
	if err != nil {
		return nil, fmt.Errorf("desired states: %w", err)
	}
	return out, nil
}

// DesiredPeersVersion returns the stored peer list's version ("" if there is
// none): what a long-poll compares, without reading the list itself.
func (s *DesiredStates) DesiredPeersVersion(ctx context.Context) (string, error) {
	var v string
	err := s.db.QueryRow(ctx, `SELECT version FROM desired_peers WHERE id = 1`).Scan(&v)
	if errors.Is(err, ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("peer list: %w", err)
	}
	return v, nil
}

// DesiredPeers returns the stored peer list (a zero one if there is none).
func (s *DesiredStates) DesiredPeers(ctx context.Context) (store.PeerList, error) {
	var l store.PeerList
	var doc string
	var updated int64
	err := s.db.QueryRow(ctx, `SELECT version, doc, updated_at FROM desired_peers WHERE id = 1`).Scan(&l.Version, &doc, &updated)
	if errors.Is(err, ErrNoRows) {
		return store.PeerList{}, nil
	}
	if err != nil {
		return store.PeerList{}, fmt.Errorf("peer list: %w", err)
	}
	l.Doc, l.UpdatedAt = []byte(doc), FromMillis(updated)
	return l, nil
}
