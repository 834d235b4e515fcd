package sqlite

import (
	"context"
	"fmt"

	"github.com/hatchery/hatchery/internal/store"
)

// AppendEvent records an event and returns its Seq.
func (s *Store) AppendEvent(ctx context.Context, e store.Event) (int64, error) {
	var seq int64
	err := s.write(ctx, func(tx *txn) error {
		var err error
		seq, err = tx.appendEvent(ctx, e)
		return err
	})
	return seq, err
}

// ListEvents returns up to limit events after since, oldest first.
func (s *Store) ListEvents(ctx context.Context, since int64, limit int) ([]store.Event, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT seq, at, type, project, host, resource, message
		FROM events WHERE seq > $1 ORDER BY seq LIMIT $2`, since, limit)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	defer rows.Close()
	var out []store.Event
	for rows.Next() {
		var e store.Event
		var at int64
		var typ string
		if err := rows.Scan(&e.Seq, &at, &typ, &e.Project, &e.Host, &e.Resource, &e.Message); err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		e.Time, e.Type = fromMillis(at), store.EventType(typ)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return out, nil
}

// WatchEvents returns a channel closed when the next event is recorded.
func (s *Store) WatchEvents() <-chan struct{} { return s.events.Wait(eventsKey) }
