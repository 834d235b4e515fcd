package volumes

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/backup"
	"github.com/hatchery/hatchery/internal/backup/s3store"
	"github.com/hatchery/hatchery/internal/blob"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/store"
)

// Collector removes unreferenced blobs past a grace (fleet.BlobCollector).
type Collector interface {
	Collect(ctx context.Context, referenced []string, grace time.Duration) ([]blob.Info, error)
}

// Sweeper is a backup store whose unreferenced chunks the service
// collects itself (a bucket: s3store.Store): nothing there records which
// backup holds a chunk, so forgetting deletes the manifest and a sweep
// deletes the chunks no manifest lists. The blob store needs none of it:
// its retention records say what is referenced.
type Sweeper interface {
	DeleteManifest(ctx context.Context, id string) error
	ListChunks(ctx context.Context) ([]s3store.ChunkInfo, error)
	DeleteChunk(ctx context.Context, id string) error
}

var _ Sweeper = (*s3store.Store)(nil)

// GuardCollector is the blob collector, made safe for backups in
// progress: their chunks are retained only once the backup is good, so
// until then a chunk uploaded, or touched by Missing, since the oldest
// open backup began is never collected (the grace is stretched back to
// that backup's creation). With a bucket for backups, it sweeps the
// bucket too (Service.Sweep): the blob collector's loop is the one
// background loop that collects.
type GuardCollector struct {
	Blobs Collector
	S     *Service
}

// Collect collects with the grace stretched over every open backup.
func (g GuardCollector) Collect(ctx context.Context, referenced []string, grace time.Duration) ([]blob.Info, error) {
	oldest, err := g.S.oldestOpenBackup(ctx)
	if err != nil {
		return nil, err
	}
	if !oldest.IsZero() {
		grace = max(grace, g.S.now().Sub(oldest)+time.Minute)
	}
	removed, err := g.Blobs.Collect(ctx, referenced, grace)
	if _, ok := g.S.deps.Store.(Sweeper); ok {
		if _, serr := g.S.Sweep(ctx, grace); serr != nil {
			err = errors.Join(err, fmt.Errorf("sweep the backup store: %w", serr))
		}
	}
	return removed, err
}

// oldestOpenBackup returns when the oldest backup whose chunks may not be
// retained yet was asked for (open, or done and not yet released), or
// zero if there is none.
func (s *Service) oldestOpenBackup(ctx context.Context) (time.Time, error) {
	list, err := s.deps.Tasks.ListVolumeTasks(ctx, store.VolumeTaskFilter{Kind: string(contract.TaskBackup), Unreleased: true})
	if err != nil {
		return time.Time{}, err
	}
	var oldest time.Time
	for _, t := range list {
		if (!store.TaskEnded(t.State) || t.State == store.TaskDone) && (oldest.IsZero() || t.CreatedAt.Before(oldest)) {
			oldest = t.CreatedAt
		}
	}
	return oldest, nil
}

// Sweep deletes from a bucket the chunks no manifest there lists (each
// opened with the cluster's key) that were written before the cutoff:
// grace before now, or before the oldest backup in progress began if it
// is older (its chunks are listed by no manifest yet). The grace also
// covers the bucket's clock running ahead of this server's, and a backup
// whose task was recorded by a server that restarted. A manifest that
// does not open stops the sweep: its chunks cannot be told apart (another
// cluster's prefix, a corrupted object), and deleting them could lose a
// backup. It returns how many chunks it deleted; a store that is not a
// Sweeper has nothing to sweep.
func (s *Service) Sweep(ctx context.Context, grace time.Duration) (int, error) {
	sw, ok := s.deps.Store.(Sweeper)
	if !ok {
		return 0, nil
	}
	cutoff := s.now().Add(-grace)
	oldest, err := s.oldestOpenBackup(ctx)
	if err != nil {
		return 0, err
	}
	if !oldest.IsZero() && oldest.Add(-grace).Before(cutoff) {
		cutoff = oldest.Add(-grace)
	}
	// The chunks are listed before the manifests: a backup that ends in
	// between has its manifest read, and its new chunks are past the cutoff.
	chunks, err := sw.ListChunks(ctx)
	if err != nil {
		return 0, err
	}
	ms, err := backup.ListBackups(ctx, s.deps.Store, s.deps.ClusterKey)
	if err != nil {
		return 0, fmt.Errorf("%w (nothing is swept while a manifest of the backup store does not open with the backup key: "+
			"keep one cluster's backups under a prefix of their own)", err)
	}
	marked := map[string]bool{}
	for _, m := range ms {
		for _, c := range m.Chunks {
			marked[c.ID] = true
		}
	}
	deleted := 0
	var freed int64
	for _, c := range chunks {
		if marked[c.ID] || !c.Modified.Before(cutoff) {
			continue
		}
		if err := sw.DeleteChunk(ctx, c.ID); err != nil {
			return deleted, err
		}
		deleted++
		freed += c.Size
	}
	if deleted > 0 {
		s.log.Info("swept unreferenced chunks from the backup store", zap.Int("chunks", deleted), zap.Int64("bytes", freed),
			zap.Int("manifests", len(ms)), zap.Time("cutoff", cutoff))
	}
	return deleted, nil
}

// deleteManifest deletes a forgotten backup's manifest from a bucket, so
// that no new control plane lists it again and the sweep collects its
// chunks; the blob store's manifests are released with the record.
func (s *Service) deleteManifest(ctx context.Context, id string) error {
	sw, ok := s.deps.Store.(Sweeper)
	if !ok || id == "" {
		return nil
	}
	if err := sw.DeleteManifest(ctx, id); err != nil {
		return fmt.Errorf("forget backup %s: %w", short(id), err)
	}
	s.manifests.drop(id)
	return nil
}
