package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

var _ store.ServerRegistry = (*Store)(nil)

// RegisterServer records that server id is reached at url until at+ttl.
func (s *Store) RegisterServer(ctx context.Context, id, url string, ttl time.Duration, at time.Time) error {
	if id == "" || url == "" || ttl <= 0 {
		return fmt.Errorf("register server %q: an ID, a URL and a positive term are needed", id)
	}
	err := s.write(ctx, func(tx *txn) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO servers (id, url, expires_at) VALUES ($1, $2, $3)
			ON CONFLICT (id) DO UPDATE SET url = excluded.url, expires_at = excluded.expires_at`,
			id, url, millis(at.Add(ttl)))
		return err
	})
	if err != nil {
		return fmt.Errorf("register server %s: %w", id, err)
	}
	return nil
}

// LiveServers returns the URLs registered beyond at.
func (s *Store) LiveServers(ctx context.Context, at time.Time) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT url FROM servers WHERE expires_at > $1 ORDER BY url`, millis(at))
	if err != nil {
		return nil, fmt.Errorf("live servers: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var u string
		if err := rows.Scan(&u); err != nil {
			return nil, fmt.Errorf("live servers: %w", err)
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("live servers: %w", err)
	}
	return out, nil
}

// UnregisterServer removes server id's registration.
func (s *Store) UnregisterServer(ctx context.Context, id string) error {
	err := s.write(ctx, func(tx *txn) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM servers WHERE id = $1`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("unregister server %s: %w", id, err)
	}
	return nil
}
