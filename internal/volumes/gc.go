package volumes

import (
	"context"
	"time"

	"github.com/hatchery/hatchery/internal/blob"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/store"
)

// Collector removes unreferenced blobs past a grace (fleet.BlobCollector).
type Collector interface {
	Collect(ctx context.Context, referenced []string, grace time.Duration) ([]blob.Info, error)
}

// GuardCollector is the blob collector, made safe for backups in
// progress: their chunks are retained only once the backup is good, so
// until then a chunk uploaded, or touched by Missing, since the oldest
// open backup began is never collected (the grace is stretched back to
// that backup's creation).
type GuardCollector struct {
	Blobs Collector
	S     *Service
}

// Collect collects with the grace stretched over every open backup.
func (g GuardCollector) Collect(ctx context.Context, referenced []string, grace time.Duration) ([]blob.Info, error) {
	list, err := g.S.deps.Tasks.ListVolumeTasks(ctx, store.VolumeTaskFilter{Kind: string(contract.TaskBackup), Unreleased: true})
	if err != nil {
		return nil, err
	}
	now := g.S.now()
	for _, t := range list {
		if !store.TaskEnded(t.State) || t.State == store.TaskDone {
			// Open, or done and not yet released: its chunks may not be retained yet.
			grace = max(grace, now.Sub(t.CreatedAt)+time.Minute)
		}
	}
	return g.Blobs.Collect(ctx, referenced, grace)
}
