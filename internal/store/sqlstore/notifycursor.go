package sqlstore

import (
	"context"
	"fmt"

	"github.com/hatchery/hatchery/internal/store"
)

// NotifyCursors keeps the one row of where the notifications stand in the
// event log (store.NotifyCursor).
type NotifyCursors struct{ base }

var _ store.NotifyCursor = (*NotifyCursors)(nil)

// NotifyCursor returns the stored seq, or the newest event's if none is.
func (s *NotifyCursors) NotifyCursor(ctx context.Context) (int64, error) {
	var seq int64
	err := s.db.QueryRow(ctx, `SELECT COALESCE((SELECT seq FROM notify_cursor WHERE id = 1),
		(SELECT MAX(seq) FROM events), 0)`).Scan(&seq)
	if err != nil {
		return 0, fmt.Errorf("read the notifications' cursor: %w", err)
	}
	return seq, nil
}

// SetNotifyCursor records seq, under ctx's fences.
func (s *NotifyCursors) SetNotifyCursor(ctx context.Context, seq int64) error {
	err := s.write(ctx, func(tx Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO notify_cursor (id, seq) VALUES (1, $1)
			ON CONFLICT (id) DO UPDATE SET seq = excluded.seq`, seq)
		return err
	})
	if err != nil {
		return fmt.Errorf("move the notifications' cursor to %d: %w", seq, err)
	}
	return nil
}
