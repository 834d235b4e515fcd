package blob_test

import (
	"sync"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/blob"
	"github.com/hatchery/hatchery/internal/blob/blobtest"
)

func TestConformance(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blobtest.Harness {
		s, err := blob.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex // guards now: uploads read the clock concurrently
		now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
		blob.SetClock(s, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
		return blobtest.Harness{
			Store:     s,
			Age:       func(_ *testing.T, d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) },
			Leftovers: func(*testing.T) int { return blob.TempFiles(s) },
		}
	})
}
