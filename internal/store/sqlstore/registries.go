package sqlstore

import (
	"context"
	"fmt"

	"github.com/hatchery/hatchery/internal/store"
)

// RegistryLogins keeps the cluster-wide registry logins
// (store.RegistryLogins). No project owns them: their writes are unfenced.
type RegistryLogins struct{ base }

// PutRegistryLogin stores a login, replacing the host's.
func (s *RegistryLogins) PutRegistryLogin(ctx context.Context, l store.RegistryLogin) error {
	err := s.unfenced(ctx, func(tx Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO registry_logins (host, username, sealed, fingerprint, updated_at)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (host) DO UPDATE SET username = $2, sealed = $3, fingerprint = $4, updated_at = $5`,
			l.Host, l.Username, l.Sealed, l.Fingerprint, Millis(l.UpdatedAt))
		return err
	})
	if err != nil {
		return fmt.Errorf("put the login of registry %s: %w", l.Host, err)
	}
	return nil
}

// DeleteRegistryLogin deletes the host's login: store.ErrNotFound if none.
func (s *RegistryLogins) DeleteRegistryLogin(ctx context.Context, host string) error {
	err := s.unfenced(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, `DELETE FROM registry_logins WHERE host = $1`, host)
		if err == nil && n == 0 {
			return store.ErrNotFound
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("delete the login of registry %s: %w", host, err)
	}
	return nil
}

// ListRegistryLogins lists every login, by host.
func (s *RegistryLogins) ListRegistryLogins(ctx context.Context) ([]store.RegistryLogin, error) {
	rows, err := s.db.Query(ctx, `SELECT host, username, sealed, fingerprint, updated_at FROM registry_logins
		ORDER BY host`+s.d.ByteOrder)
	if err != nil {
		return nil, fmt.Errorf("registry logins: %w", err)
	}
	out, err := collect(rows, func(row Row) (store.RegistryLogin, error) {
		var l store.RegistryLogin
		var updated int64
		err := row.Scan(&l.Host, &l.Username, &l.Sealed, &l.Fingerprint, &updated)
		l.UpdatedAt = FromMillis(updated)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("registry logins: %w", err)
	}
	return out, nil
}
