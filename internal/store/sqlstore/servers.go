package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

// ServerRegistry keeps the control plane's servers' registrations in the live
// server list (store.ServerRegistry).
type ServerRegistry struct{ base }

var _ store.ServerRegistry = (*ServerRegistry)(nil)

// RegisterServer records that server id is reached at url for ttl from at,
// or from the database's now if the dialect measures terms by it, so servers
// whose clocks differ agree on who is live. No project owns the
// registration: ctx's fences do not guard it.
func (s *ServerRegistry) RegisterServer(ctx context.Context, id, url string, ttl time.Duration, at time.Time) error {
	if id == "" || url == "" || ttl <= 0 {
		return fmt.Errorf("register server %q: an ID, a URL and a positive term are needed", id)
	}
	err := s.unfenced(ctx, func(tx Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO servers (id, url, expires_at)
			VALUES ($1, $2, `+s.termStart("$3", "$5")+` + CAST($4 AS bigint))
			ON CONFLICT (id) DO UPDATE SET url = excluded.url, expires_at = excluded.expires_at`,
			id, url, Millis(at), ttl.Milliseconds(), s.d.DatabaseClock)
		return err
	})
	if err != nil {
		return fmt.Errorf("register server %s: %w", id, err)
	}
	return nil
}

// LiveServers returns the URLs registered beyond at (beyond the database's
// now if the dialect measures terms by it), each once, in the database's
// order of text.
func (s *ServerRegistry) LiveServers(ctx context.Context, at time.Time) ([]string, error) {
	rows, err := s.db.Query(ctx, `SELECT DISTINCT url FROM servers
		WHERE expires_at > `+s.termStart("$1", "$2")+` ORDER BY url`,
		Millis(at), s.d.DatabaseClock)
	if err != nil {
		return nil, fmt.Errorf("live servers: %w", err)
	}
	return scanStrings(rows, "live servers")
}

// UnregisterServer removes server id's registration.
func (s *ServerRegistry) UnregisterServer(ctx context.Context, id string) error {
	err := s.unfenced(ctx, func(tx Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM servers WHERE id = $1`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("unregister server %s: %w", id, err)
	}
	return nil
}
