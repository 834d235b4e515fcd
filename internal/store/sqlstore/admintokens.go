package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

// AdminTokens keeps the hashes of the admin tokens (store.AdminTokens).
type AdminTokens struct{ base }

var _ store.AdminTokens = (*AdminTokens)(nil)

const adminTokenColumns = `name, hash, created_at, revoked_at, kind, project, may_exec`

func scanAdminToken(row Row) (store.AdminToken, error) {
	var t store.AdminToken
	var created, revoked, exec int64
	if err := row.Scan(&t.Name, &t.Hash, &created, &revoked, &t.Kind, &t.Project, &exec); err != nil {
		return store.AdminToken{}, err
	}
	t.CreatedAt, t.RevokedAt, t.Exec = FromMillis(created), FromMillis(revoked), exec != 0
	return t, nil
}

// TokenHash returns the hash stored under name.
func (s *AdminTokens) TokenHash(ctx context.Context, name string) (string, error) {
	var hash string
	err := s.db.QueryRow(ctx, `SELECT hash FROM tokens WHERE name = $1`, name).Scan(&hash)
	if err != nil {
		return "", fmt.Errorf("token %s: %w", name, notFound(err, "no such token"))
	}
	return hash, nil
}

// CreateTokenHash stores a hash under a new name.
func (s *AdminTokens) CreateTokenHash(ctx context.Context, name, hash string, at time.Time) error {
	err := s.write(ctx, func(tx Tx) error {
		return insertAdminToken(ctx, tx, store.AdminToken{Name: name, Kind: store.TokenAdmin, Hash: hash, CreatedAt: at})
	})
	if err != nil {
		return fmt.Errorf("create token %s: %w", name, err)
	}
	return nil
}

// insertAdminToken stores a token whose name and hash are both new, else
// gives ErrExists. ON CONFLICT without a target covers both unique indexes,
// so a concurrent insert of either waits for the other and then does nothing.
func insertAdminToken(ctx context.Context, tx Tx, t store.AdminToken) error {
	exec := 0
	if t.Exec {
		exec = 1
	}
	n, err := tx.Exec(ctx, `INSERT INTO tokens (`+adminTokenColumns+`) VALUES ($1, $2, $3, 0, $4, $5, $6)
		ON CONFLICT DO NOTHING`, t.Name, t.Hash, Millis(t.CreatedAt), t.Kind, t.Project, exec)
	if err != nil {
		return err
	}
	if n == 0 {
		return store.ErrExists
	}
	return nil
}

// CreateAdminToken stores a named admin token with a token.created event.
func (s *AdminTokens) CreateAdminToken(ctx context.Context, t store.AdminToken, by string) error {
	if t.Name == "" || t.Hash == "" || t.CreatedAt.IsZero() {
		return fmt.Errorf("create admin token %q: a name, a hash and a time are needed", t.Name)
	}
	if t.Kind == "" {
		t.Kind = store.TokenAdmin
	}
	switch {
	case t.Kind == store.TokenAdmin && t.Project == "" && !t.Exec:
	case t.Kind == store.TokenDeploy && t.Project != "":
	default:
		return fmt.Errorf("create token %q: kind %q with project %q: an admin token has no project, a deploy token needs one",
			t.Name, t.Kind, t.Project)
	}
	err := s.write(ctx, func(tx Tx) error {
		if err := insertAdminToken(ctx, tx, t); err != nil {
			return err
		}
		_, err := tx.AppendEvent(ctx, store.Event{Time: t.CreatedAt, Type: store.EventTokenCreated, Actor: by,
			Project: t.Project, Message: t.Describe() + " created"})
		return err
	})
	if err != nil {
		return fmt.Errorf("create admin token %s: %w", t.Name, err)
	}
	return nil
}

// AdminTokenByHash returns the admin token whose secret has the hash.
func (s *AdminTokens) AdminTokenByHash(ctx context.Context, hash string) (store.AdminToken, error) {
	t, err := scanAdminToken(s.db.QueryRow(ctx, `SELECT `+adminTokenColumns+` FROM tokens WHERE hash = $1`, hash))
	if err != nil {
		// The hash is not repeated: it is as good as a token in a log line.
		return store.AdminToken{}, fmt.Errorf("admin token: %w", notFound(err, "no such admin token"))
	}
	return t, nil
}

// ListAdminTokens returns every admin token, oldest first (names compared
// byte by byte).
func (s *AdminTokens) ListAdminTokens(ctx context.Context) ([]store.AdminToken, error) {
	rows, err := s.db.Query(ctx, `SELECT `+adminTokenColumns+` FROM tokens ORDER BY created_at, name`+s.d.ByteOrder)
	if err != nil {
		return nil, fmt.Errorf("list admin tokens: %w", err)
	}
	out, err := collect(rows, scanAdminToken)
	if err != nil {
		return nil, fmt.Errorf("list admin tokens: %w", err)
	}
	return out, nil
}

// RevokeAdminToken revokes a named token, with a token.revoked event the
// first time. The UPDATE locks the row, so of concurrent revocations one
// changes it and records the event; the others see it revoked.
func (s *AdminTokens) RevokeAdminToken(ctx context.Context, name, by string, at time.Time) (store.AdminToken, error) {
	var t store.AdminToken
	err := s.write(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, `UPDATE tokens SET revoked_at = $2 WHERE name = $1 AND revoked_at = 0`, name, Millis(at))
		if err != nil {
			return err
		}
		t, err = scanAdminToken(tx.QueryRow(ctx, `SELECT `+adminTokenColumns+` FROM tokens WHERE name = $1`, name))
		if err != nil {
			return notFound(err, "no such admin token")
		}
		if n == 0 {
			return nil // revoked already: no second event
		}
		_, err = tx.AppendEvent(ctx, store.Event{Time: at, Type: store.EventTokenRevoked, Actor: by,
			Project: t.Project, Message: t.Describe() + " revoked"})
		return err
	})
	if err != nil {
		return store.AdminToken{}, fmt.Errorf("revoke admin token %s: %w", name, err)
	}
	return t, nil
}
