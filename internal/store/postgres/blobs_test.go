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

// The chunks of an upload cut short by a server's death (no blobs row, no
// cleanup) are collected once the upload has been still for the grace, and
// not before: a slow upload in progress keeps its chunks.
func TestBlobCollectionRemovesUploadsAServerDiedIn(t *testing.T) {
	s := openTemp(t)
	var upload int64
	if err := s.pool.QueryRow(t.Context(), `INSERT INTO blob_uploads DEFAULT VALUES RETURNING id`).Scan(&upload); err != nil {
		t.Fatal(err)
	}
	if err := s.Blobs().putChunk(t.Context(), upload, 0, blobtest.Random(ChunkSize, 1)); err != nil {
		t.Fatal(err)
	}
	chunks := func() int {
		var n int
		if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM blob_chunks WHERE upload_id = $1`, upload).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, err := s.Blobs().Collect(t.Context(), nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	if chunks() != 1 {
		t.Fatal("collection removed the chunks of an upload within its grace")
	}
	if _, err := s.pool.Exec(t.Context(), `UPDATE blob_uploads SET started_at = now() - interval '2 hours' WHERE id = $1`, upload); err != nil {
		t.Fatal(err)
	}
	if removed, err := s.Blobs().Collect(t.Context(), nil, time.Hour); err != nil || len(removed) != 0 {
		t.Fatalf("Collect = %v, %v; want no blob reported (an upload is none)", removed, err)
	}
	if chunks() != 0 {
		t.Fatal("the chunks of an upload still past its grace were kept")
	}
}

// An upload still for longer than the grace is collected under it; its
// install then fails cleanly instead of naming chunks that are gone.
func TestAnUploadCollectedUnderItFailsCleanly(t *testing.T) {
	s := openTemp(t)
	b := s.Blobs()
	var upload int64
	if err := s.pool.QueryRow(t.Context(), `INSERT INTO blob_uploads (started_at) VALUES (now() - interval '2 hours') RETURNING id`).Scan(&upload); err != nil {
		t.Fatal(err)
	}
	content := []byte("slow")
	if err := b.putChunk(t.Context(), upload, 0, content); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Collect(t.Context(), nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.install(t.Context(), blobtest.Digest(content), upload, int64(len(content))); err == nil {
		t.Fatal("an upload whose chunks were collected was installed")
	}
	if has, err := b.HasSource(t.Context(), blobtest.Digest(content)); has || err != nil {
		t.Fatalf("HasSource = %v, %v; want no blob", has, err)
	}
}
