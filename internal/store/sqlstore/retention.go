package sqlstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/hatchery/hatchery/internal/store"
)

// BlobRetention says which blobs collection must keep (store.BlobRetention).
type BlobRetention struct{ base }

var _ store.BlobRetention = (*BlobRetention)(nil)

// ReferencedBlobs returns every digest a resource, an apply record or a
// retention owner holds, sorted byte by byte.
func (s *BlobRetention) ReferencedBlobs(ctx context.Context) ([]string, error) {
	rows, err := s.db.Query(ctx, `SELECT source FROM resources WHERE source <> ''
		UNION SELECT digest FROM apply_blobs
		UNION SELECT digest FROM blob_retention`)
	if err != nil {
		return nil, fmt.Errorf("referenced blobs: %w", err)
	}
	out, err := scanStrings(rows, "referenced blobs")
	slices.Sort(out)
	return out, err
}

// RetainBlobs replaces owner's retained set.
func (s *BlobRetention) RetainBlobs(ctx context.Context, owner string, digests []string) error {
	err := s.write(ctx, func(tx Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM blob_retention WHERE owner = $1`, owner); err != nil {
			return err
		}
		for _, d := range sortedUnique(digests) {
			if _, err := tx.Exec(ctx, `INSERT INTO blob_retention (owner, digest) VALUES ($1, $2)
				ON CONFLICT DO NOTHING`, owner, d); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("retain blobs for %s: %w", owner, err)
	}
	return nil
}
