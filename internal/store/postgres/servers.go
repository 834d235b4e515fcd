package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

var _ store.ServerRegistry = (*Store)(nil)

// RegisterServer records that server id is reached at url for ttl from the
// database's now (from at with Options.CallerClockLeases, for the suite), so
// servers whose clocks differ agree on who is live.
func (s *Store) RegisterServer(ctx context.Context, id, url string, ttl time.Duration, at time.Time) error {
	if id == "" || url == "" || ttl <= 0 {
		return fmt.Errorf("register server %q: an ID, a URL and a positive term are needed", id)
	}
	err := s.writeTx(ctx, false, func(tx *txn) error {
		_, err := tx.Exec(ctx, `INSERT INTO servers (id, url, expires_at)
			VALUES ($1, $2, (CASE WHEN $5::boolean THEN `+dbNowMillis+` ELSE $3::bigint END) + $4::bigint)
			ON CONFLICT (id) DO UPDATE SET url = excluded.url, expires_at = excluded.expires_at`,
			id, url, millis(at), ttl.Milliseconds(), !s.callerClockLeases)
		return err
	})
	if err != nil {
		return fmt.Errorf("register server %s: %w", id, err)
	}
	return nil
}

// LiveServers returns the URLs registered beyond the database's now (at
// with Options.CallerClockLeases).
func (s *Store) LiveServers(ctx context.Context, at time.Time) ([]string, error) {
	rows, err := s.db.Query(ctx, `SELECT DISTINCT url FROM servers
		WHERE expires_at > (CASE WHEN $2::boolean THEN `+dbNowMillis+` ELSE $1::bigint END) ORDER BY url`,
		millis(at), !s.callerClockLeases)
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
		return nil, fmt.Errorf("live servers: %w", classify(err))
	}
	return out, nil
}

// UnregisterServer removes server id's registration.
func (s *Store) UnregisterServer(ctx context.Context, id string) error {
	err := s.writeTx(ctx, false, func(tx *txn) error {
		_, err := tx.Exec(ctx, `DELETE FROM servers WHERE id = $1`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("unregister server %s: %w", id, err)
	}
	return nil
}
