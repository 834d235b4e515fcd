package postgres

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/blob"
	"github.com/hatchery/hatchery/internal/blob/blobtest"
	"github.com/hatchery/hatchery/internal/testutil/pgtest"
)

// blobRoundTrip uploads content to s and reads it back, and returns how
// long each took.
func blobRoundTrip(b *testing.B, s blob.Storage, content []byte) (up, down time.Duration) {
	b.Helper()
	ctx := context.Background()
	d := blobtest.Digest(content)
	start := time.Now()
	if _, created, err := s.Put(ctx, d, bytes.NewReader(content), int64(len(content))); err != nil || !created {
		b.Fatalf("Put = %v, %v", created, err)
	}
	up = time.Since(start)
	start = time.Now()
	r, _, err := s.Open(ctx, d)
	if err != nil {
		b.Fatal(err)
	}
	n, err := io.Copy(io.Discard, r)
	r.Close()
	if err != nil || n != int64(len(content)) {
		b.Fatalf("read back %d bytes, %v", n, err)
	}
	return up, time.Since(start)
}

// BenchmarkBlobThroughput: a 32 MiB blob uploaded and read back, in the
// PostgreSQL store's chunk rows and in the file store, in the same run; the
// figures are MiB/s of each way and PostgreSQL's round trip rate over the
// file store's.
func BenchmarkBlobThroughput(b *testing.B) {
	const size = 32 << 20
	files, err := blob.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	pg, err := Open(b.Context(), pgtest.Shared(b).NewSchema(b), zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pg.Close() })
	stores := []blob.Storage{files, pg.Blobs()}
	var up, down [2]time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		content := blobtest.Random(size, uint64(i)+1000) // a new digest each round: no upload is skipped
		b.StartTimer()
		for j, s := range stores {
			u, d := blobRoundTrip(b, s, content)
			up[j] += u
			down[j] += d
		}
	}
	mibps := func(d time.Duration) float64 { return float64(b.N) * size / (1 << 20) / d.Seconds() }
	b.ReportMetric(mibps(up[0]), "files-up-MiB/s")
	b.ReportMetric(mibps(down[0]), "files-down-MiB/s")
	b.ReportMetric(mibps(up[1]), "postgres-up-MiB/s")
	b.ReportMetric(mibps(down[1]), "postgres-down-MiB/s")
	b.ReportMetric((up[0]+down[0]).Seconds()/(up[1]+down[1]).Seconds(), "postgres/files")
}
