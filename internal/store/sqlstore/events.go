package sqlstore

import (
	"context"
	"fmt"

	"github.com/hatchery/hatchery/internal/store"
)

// Events records and lists the event log (store.Events but its waits, which
// are the backend's Waiters: a Tx that records an event wakes them).
type Events struct{ base }

// AppendEvent records an event and returns its Seq.
func (s *Events) AppendEvent(ctx context.Context, e store.Event) (int64, error) {
	var seq int64
	err := s.write(ctx, func(tx Tx) error {
		var err error
		seq, err = tx.AppendEvent(ctx, e)
		return err
	})
	return seq, err
}

const eventColumns = `seq, at, type, project, host, resource, message, actor`

// ListEvents returns up to limit events after since, oldest first.
func (s *Events) ListEvents(ctx context.Context, since int64, limit int) ([]store.Event, error) {
	rows, err := s.db.Query(ctx, `SELECT `+eventColumns+` FROM events WHERE seq > $1 ORDER BY seq LIMIT $2`, since, limit)
	return collectEvents(rows, err)
}

// ListProjectEvents returns up to limit events of the project after since,
// oldest first.
func (s *Events) ListProjectEvents(ctx context.Context, project string, since int64, limit int) ([]store.Event, error) {
	rows, err := s.db.Query(ctx, `SELECT `+eventColumns+` FROM events WHERE project = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
		project, since, limit)
	return collectEvents(rows, err)
}

func collectEvents(rows Rows, err error) ([]store.Event, error) {
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	out, err := collect(rows, scanEvent)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return out, nil
}

func scanEvent(row Row) (store.Event, error) {
	var e store.Event
	var at int64
	var typ string
	if err := row.Scan(&e.Seq, &at, &typ, &e.Project, &e.Host, &e.Resource, &e.Message, &e.Actor); err != nil {
		return store.Event{}, err
	}
	e.Time, e.Type = FromMillis(at), store.EventType(typ)
	return e, nil
}
