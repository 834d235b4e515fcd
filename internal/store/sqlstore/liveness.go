package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

// Liveness makes the liveness monitor's guarded transitions of the hosts'
// states (store.Liveness; its host list is HostList's).
type Liveness struct{ base }

// MarkAllHostsUnknown sets every host up unknown, with an event for each
// that changed, in the order of their IDs. A host down stays down: it was
// down before the server started, and its next report says it is up again.
func (s *Liveness) MarkAllHostsUnknown(ctx context.Context, at time.Time) error {
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
func (s *Liveness) MarkHostDown(ctx context.Context, id string, notSeenSince, at time.Time) (bool, error) {
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
