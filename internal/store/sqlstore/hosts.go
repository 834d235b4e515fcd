package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

// PutStatus stores a host's report and counts it as the host's heartbeat.
func (s *Store) PutStatus(ctx context.Context, hostID string, report []byte, at time.Time) ([]byte, error) {
	var previous []byte
	err := s.write(ctx, func(tx Tx) error {
		previous = nil
		selectHost := `SELECT state, status, last_seen FROM hosts WHERE id = $1` + s.d.LockRow
		var state, status string
		var seen int64
		err := tx.QueryRow(ctx, selectHost, hostID).Scan(&state, &status, &seen)
		if errors.Is(err, ErrNoRows) {
			// A new host; another server may be adding it at the same time,
			// so take the row it added, locked, if there is one.
			if _, err := tx.Exec(ctx, `INSERT INTO hosts (id, state, state_since, last_seen, status, created_at)
				VALUES ($1, $2, $3, 0, '', $3) ON CONFLICT (id) DO NOTHING`,
				hostID, string(store.HostUnknown), Millis(at)); err != nil {
				return err
			}
			err = tx.QueryRow(ctx, selectHost, hostID).Scan(&state, &status, &seen)
		}
		if err != nil {
			return err
		}
		if status != "" {
			previous = []byte(status)
		}
		if _, err := tx.Exec(ctx, `UPDATE hosts SET last_seen = $2, status = $3,
			state_since = CASE WHEN state = $4 THEN state_since ELSE $2 END, state = $4
			WHERE id = $1`, hostID, Millis(at), string(report), string(store.HostUp)); err != nil {
			return err
		}
		// host.up follows a host.down, or is a host's first report: a host
		// unknown since a server started, that reported before, was up then
		// (MarkAllHostsUnknown leaves a down host down) and the restart of
		// the server was no outage of it.
		if st := store.HostState(state); st == store.HostUp || (st == store.HostUnknown && seen != 0) {
			return nil
		}
		_, err = tx.AppendEvent(ctx, hostEvent(store.EventHostUp, hostID, at, "host "+hostID+" is up"))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("put status of host %s: %w", hostID, err)
	}
	return previous, nil
}

// Status returns a host's latest report.
func (s *Store) Status(ctx context.Context, hostID string) (store.Status, error) {
	var report string
	var seen int64
	err := s.db.QueryRow(ctx, `SELECT status, last_seen FROM hosts WHERE id = $1`, hostID).Scan(&report, &seen)
	if err == nil && report == "" {
		err = ErrNoRows
	}
	if err != nil {
		return store.Status{}, fmt.Errorf("status of host %s: %w", hostID, notFound(err, "no report"))
	}
	return store.Status{HostID: hostID, Report: []byte(report), ReceivedAt: FromMillis(seen)}, nil
}

// AllStatuses returns the latest report of every host that sent one, sorted
// by host ID, in one read.
func (s *Store) AllStatuses(ctx context.Context) ([]store.Status, error) {
	rows, err := s.db.Query(ctx, `SELECT id, status, last_seen FROM hosts WHERE status <> '' ORDER BY id`+s.d.ByteOrder)
	if err != nil {
		return nil, fmt.Errorf("statuses: %w", err)
	}
	out, err := collect(rows, func(row Row) (store.Status, error) {
		var st store.Status
		var report string
		var seen int64
		err := row.Scan(&st.HostID, &report, &seen)
		st.Report, st.ReceivedAt = []byte(report), FromMillis(seen)
		return st, err
	})
	if err != nil {
		return nil, fmt.Errorf("statuses: %w", err)
	}
	return out, nil
}

// Host returns one host.
func (s *Store) Host(ctx context.Context, id string) (store.Host, error) {
	h, err := scanHost(s.db.QueryRow(ctx, `SELECT `+hostColumns+` FROM hosts WHERE id = $1`, id))
	if err != nil {
		return store.Host{}, fmt.Errorf("host %s: %w", id, notFound(err, "no such host"))
	}
	return h, nil
}

// ListHosts returns every host, sorted by ID.
func (s *Store) ListHosts(ctx context.Context) ([]store.Host, error) {
	rows, err := s.db.Query(ctx, `SELECT `+hostColumns+` FROM hosts ORDER BY id`+s.d.ByteOrder)
	if err != nil {
		return nil, fmt.Errorf("list hosts: %w", err)
	}
	out, err := collect(rows, scanHost)
	if err != nil {
		return nil, fmt.Errorf("list hosts: %w", err)
	}
	return out, nil
}

// MarkAllHostsUnknown sets every host up unknown, with an event for each
// that changed, in the order of their IDs. A host down stays down: it was
// down before the server started, and its next report says it is up again.
func (s *Store) MarkAllHostsUnknown(ctx context.Context, at time.Time) error {
	err := s.write(ctx, func(tx Tx) error {
		// One statement locks every row it changes; the events come after,
		// as every event does.
		rows, err := tx.Query(ctx, `UPDATE hosts SET state = $1, state_since = $2 WHERE state <> $1 AND state <> $3 RETURNING id`,
			string(store.HostUnknown), Millis(at), string(store.HostDown))
		if err != nil {
			return err
		}
		ids, err := scanStrings(rows, "hosts")
		if err != nil {
			return err
		}
		slices.Sort(ids)
		for _, id := range ids {
			msg := "host " + id + " is unknown until it reports (the server started)"
			if _, err := tx.AppendEvent(ctx, hostEvent(store.EventHostUnknown, id, at, msg)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("mark hosts unknown: %w", err)
	}
	return nil
}

// MarkHostDown sets a host down if it has not been seen since notSeenSince.
func (s *Store) MarkHostDown(ctx context.Context, id string, notSeenSince, at time.Time) (bool, error) {
	changed := false
	err := s.write(ctx, func(tx Tx) error {
		changed = false
		var seen int64
		err := tx.QueryRow(ctx, `UPDATE hosts SET state = $2, state_since = $3
			WHERE id = $1 AND state <> $2 AND last_seen < $4 RETURNING last_seen`,
			id, string(store.HostDown), Millis(at), Millis(notSeenSince)).Scan(&seen)
		if errors.Is(err, ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		changed = true
		msg := "host " + id + " is down: no report since " + FromMillis(seen).Format(time.RFC3339)
		if seen == 0 {
			msg = "host " + id + " is down: it never reported"
		}
		_, err = tx.AppendEvent(ctx, hostEvent(store.EventHostDown, id, at, msg))
		return err
	})
	if err != nil {
		return false, fmt.Errorf("mark host %s down: %w", id, err)
	}
	return changed, nil
}

const hostColumns = `id, state, state_since, last_seen`

func scanHost(row Row) (store.Host, error) {
	var h store.Host
	var state string
	var since, seen int64
	if err := row.Scan(&h.ID, &state, &since, &seen); err != nil {
		return store.Host{}, err
	}
	h.State, h.StateSince, h.LastSeen = store.HostState(state), FromMillis(since), FromMillis(seen)
	return h, nil
}

func hostEvent(typ store.EventType, host string, at time.Time, msg string) store.Event {
	return store.Event{Time: at, Type: typ, Host: host, Message: msg}
}
