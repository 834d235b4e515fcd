package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

// JoinTokens keeps the hashes of the join tokens hosts join with
// (store.JoinTokens).
type JoinTokens struct{ base }

var _ store.JoinTokens = (*JoinTokens)(nil)

const joinTokenColumns = `id, hash, created_at, expires_at, max_uses, uses, revoked_at`

func scanJoinToken(row Row) (store.JoinToken, error) {
	var t store.JoinToken
	var created, expires, revoked int64
	if err := row.Scan(&t.ID, &t.Hash, &created, &expires, &t.MaxUses, &t.Uses, &revoked); err != nil {
		return store.JoinToken{}, err
	}
	t.CreatedAt, t.ExpiresAt, t.RevokedAt = FromMillis(created), FromMillis(expires), FromMillis(revoked)
	return t, nil
}

// CreateJoinToken stores a new join token.
func (s *JoinTokens) CreateJoinToken(ctx context.Context, t store.JoinToken) error {
	if t.ID == "" || t.Hash == "" || t.MaxUses < 1 || t.ExpiresAt.IsZero() {
		return fmt.Errorf("create join token %q: an ID, a hash, an expiry and at least one use are needed", t.ID)
	}
	err := s.write(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, `INSERT INTO join_tokens (`+joinTokenColumns+`)
			VALUES ($1, $2, $3, $4, $5, 0, 0) ON CONFLICT DO NOTHING`,
			t.ID, t.Hash, Millis(t.CreatedAt), Millis(t.ExpiresAt), t.MaxUses)
		if err != nil {
			return err
		}
		if n == 0 {
			return store.ErrExists
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("create join token %s: %w", t.ID, err)
	}
	return nil
}

// JoinTokenByHash returns the join token whose secret has the hash.
func (s *JoinTokens) JoinTokenByHash(ctx context.Context, hash string) (store.JoinToken, error) {
	t, err := scanJoinToken(s.db.QueryRow(ctx, `SELECT `+joinTokenColumns+` FROM join_tokens WHERE hash = $1`, hash))
	if err != nil {
		// The hash is not repeated: it is as good as a token in a log line.
		return store.JoinToken{}, fmt.Errorf("join token: %w", notFound(err, "no such join token"))
	}
	return t, nil
}

// ListJoinTokens returns every join token, oldest first.
func (s *JoinTokens) ListJoinTokens(ctx context.Context) ([]store.JoinToken, error) {
	rows, err := s.db.Query(ctx, `SELECT `+joinTokenColumns+` FROM join_tokens ORDER BY created_at, id`+s.d.ByteOrder)
	if err != nil {
		return nil, fmt.Errorf("list join tokens: %w", err)
	}
	out, err := collect(rows, scanJoinToken)
	if err != nil {
		return nil, fmt.Errorf("list join tokens: %w", err)
	}
	return out, nil
}

// RevokeJoinToken revokes a join token; a second revocation changes nothing.
func (s *JoinTokens) RevokeJoinToken(ctx context.Context, id string, at time.Time) (store.JoinToken, error) {
	var t store.JoinToken
	err := s.write(ctx, func(tx Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE join_tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at = 0`,
			id, Millis(at)); err != nil {
			return err
		}
		var err error
		t, err = scanJoinToken(tx.QueryRow(ctx, `SELECT `+joinTokenColumns+` FROM join_tokens WHERE id = $1`, id))
		return notFound(err, "no such join token")
	})
	if err != nil {
		return store.JoinToken{}, fmt.Errorf("revoke join token %s: %w", id, err)
	}
	return t, nil
}
