package sqlstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

// SecretValues keeps the sealed values of secrets (store.SecretValues).
type SecretValues struct{ base }

var _ store.SecretValues = (*SecretValues)(nil)

// PutSecretValue stores a sealed secret value, keeping one stored already.
func (s *SecretValues) PutSecretValue(ctx context.Context, v store.SecretValue) error {
	err := s.write(ctx, func(tx Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO secret_values (project, name, fingerprint, sealed, created_at)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (project, name, fingerprint) DO NOTHING`,
			v.Project, v.Name, v.Fingerprint, v.Sealed, Millis(v.Created))
		return err
	})
	if err != nil {
		return fmt.Errorf("put value of secret %s in %s: %w", v.Name, v.Project, err)
	}
	return nil
}

// SecretValue returns one sealed value of a secret.
func (s *SecretValues) SecretValue(ctx context.Context, project, name, fingerprint string) (store.SecretValue, error) {
	v := store.SecretValue{Project: project, Name: name, Fingerprint: fingerprint}
	var created int64
	err := s.db.QueryRow(ctx, `SELECT sealed, created_at FROM secret_values
		WHERE project = $1 AND name = $2 AND fingerprint = $3`, project, name, fingerprint).Scan(&v.Sealed, &created)
	if err != nil {
		return store.SecretValue{}, fmt.Errorf("value of secret %s in %s: %w", name, project, notFound(err, "no value with that fingerprint"))
	}
	v.Created = FromMillis(created)
	return v, nil
}

// PruneSecretValues deletes the secret's values created before before whose
// fingerprint is not in keep.
func (s *SecretValues) PruneSecretValues(ctx context.Context, project, name string, keep []string, before time.Time) error {
	err := s.write(ctx, func(tx Tx) error {
		rows, err := tx.Query(ctx, `SELECT fingerprint FROM secret_values
			WHERE project = $1 AND name = $2 AND created_at < $3`, project, name, Millis(before))
		if err != nil {
			return err
		}
		old, err := scanStrings(rows, "secret values")
		if err != nil {
			return err
		}
		for _, fp := range old {
			if slices.Contains(keep, fp) {
				continue
			}
			if _, err := tx.Exec(ctx, `DELETE FROM secret_values WHERE project = $1 AND name = $2 AND fingerprint = $3`,
				project, name, fp); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("prune values of secret %s in %s: %w", name, project, err)
	}
	return nil
}

// DeleteSecretValues deletes every value of a secret.
func (s *SecretValues) DeleteSecretValues(ctx context.Context, project, name string) error {
	err := s.write(ctx, func(tx Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM secret_values WHERE project = $1 AND name = $2`, project, name)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete values of secret %s in %s: %w", name, project, err)
	}
	return nil
}
