package postgres

import (
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/blob/blobtest"
)

func TestBlobConformance(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blobtest.Harness {
		s := openTemp(t)
		return blobtest.Harness{
			Store: s.Blobs(),
			Age: func(t *testing.T, d time.Duration) {
				for _, q := range []string{`UPDATE blobs SET touched_at = touched_at - make_interval(secs => $1)`,
					`UPDATE blob_uploads SET started_at = started_at - make_interval(secs => $1)`} {
					if _, err := s.pool.Exec(t.Context(), q, d.Seconds()); err != nil {
						t.Fatal(err)
					}
				}
			},
			Leftovers: func(t *testing.T) int {
				var n int
				if err := s.pool.QueryRow(t.Context(), `SELECT
					(SELECT count(*) FROM blob_uploads u WHERE NOT EXISTS (SELECT 1 FROM blobs b WHERE b.upload_id = u.id)) +
					(SELECT count(*) FROM blob_chunks c WHERE NOT EXISTS (SELECT 1 FROM blobs b WHERE b.upload_id = c.upload_id))`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			},
		}
	})
}
