package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

// Statuses keeps each host's latest report, which is also its heartbeat
// (store.Statuses; its host list is HostList's).
type Statuses struct{ base }

// PutStatus stores a host's report and counts it as the host's heartbeat.
func (s *Statuses) PutStatus(ctx context.Context, hostID string, report []byte, at time.Time) ([]byte, error) {
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
func (s *Statuses) Status(ctx context.Context, hostID string) (store.Status, error) {
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
func (s *Statuses) AllStatuses(ctx context.Context) ([]store.Status, error) {
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
func (s *Statuses) Host(ctx context.Context, id string) (store.Host, error) {
	h, err := scanHost(s.db.QueryRow(ctx, `SELECT `+hostColumns+` FROM hosts WHERE id = $1`, id))
	if err != nil {
		return store.Host{}, fmt.Errorf("host %s: %w", id, notFound(err, "no such host"))
	}
	return h, nil
}
