package volumes

import (
	"context"
	"sync"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/backup"
)

// manifestCache keeps what List shows of each manifest the backup store
// holds, by ID: a manifest is immutable (its ID is its hash), so it is
// fetched and opened once, not on every List. Only the summary is kept,
// not the chunk list (some 100 bytes a chunk), so that memory grows with
// the backups, not with their size.
type manifestCache struct {
	mu   sync.Mutex
	byID map[string]storeBackup
}

// storeBackup is one manifest of the store, as List shows it.
type storeBackup struct {
	volume backup.VolumeID
	task   api.VolumeTask
}

func newManifestCache() *manifestCache { return &manifestCache{byID: map[string]storeBackup{}} }

func (c *manifestCache) drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byID, id)
}

// someManifests is a ManifestStore that lists only ids, to open the
// manifests the cache lacks with backup.ListBackups.
type someManifests struct {
	backup.ManifestStore
	ids []string
}

func (m someManifests) ListManifests(context.Context) ([]string, error) { return m.ids, nil }

// storeBackups returns every backup the store lists whose manifest opens
// with the cluster's key, opening only those not opened before; the error
// names those that do not open (they are tried again next time).
func (s *Service) storeBackups(ctx context.Context) ([]storeBackup, error) {
	ids, err := s.deps.Store.ListManifests(ctx)
	if err != nil {
		return nil, err
	}
	c := s.manifests
	c.mu.Lock()
	var missing []string
	for _, id := range ids {
		if _, ok := c.byID[id]; !ok {
			missing = append(missing, id)
		}
	}
	c.mu.Unlock()
	var openErr error
	if len(missing) > 0 {
		var ms []backup.Manifest
		ms, openErr = backup.ListBackups(ctx, someManifests{ManifestStore: s.deps.Store, ids: missing}, s.deps.ClusterKey)
		c.mu.Lock()
		for _, m := range ms {
			c.byID[m.ID] = storeBackup{volume: m.Volume, task: fromManifest(m)}
		}
		c.mu.Unlock()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	listed := make(map[string]bool, len(ids))
	out := make([]storeBackup, 0, len(ids))
	for _, id := range ids {
		listed[id] = true
		if b, ok := c.byID[id]; ok {
			out = append(out, b)
		}
	}
	for id := range c.byID {
		if !listed[id] { // deleted from the store by another control plane
			delete(c.byID, id)
		}
	}
	return out, openErr
}
