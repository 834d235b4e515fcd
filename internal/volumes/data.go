package volumes

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hatchery/hatchery/internal/backup"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/store"
)

// The data routes of a host's volume tasks (contract.VolumeTaskPath). Each
// call is checked against the task first: it must be the calling host's,
// open, and of the route's kind (ErrForbidden otherwise; ErrNotFound for a
// task never recorded), whatever the host's token would let it reach
// elsewhere.

// MaxMissing bounds the chunk IDs one Missing call may ask about.
const MaxMissing = 20_000

// hostTask returns the task if it is host's, open, and of kind.
func (s *Service) hostTask(ctx context.Context, host, id string, kind contract.VolumeTaskKind) (store.VolumeTask, error) {
	t, err := s.deps.Tasks.VolumeTask(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return store.VolumeTask{}, fmt.Errorf("%w: no volume task %s", ErrNotFound, id)
	}
	if err != nil {
		return store.VolumeTask{}, err
	}
	switch {
	case t.Host != host || t.DeliveredAt.IsZero():
		return store.VolumeTask{}, fmt.Errorf("%w: volume task %s is not this host's", ErrForbidden, id)
	case store.TaskEnded(t.State) || !t.ReleasedAt.IsZero():
		return store.VolumeTask{}, fmt.Errorf("%w: volume task %s has ended", ErrForbidden, id)
	case t.Kind != string(kind):
		return store.VolumeTask{}, fmt.Errorf("%w: volume task %s is a %s, not a %s", ErrForbidden, id, t.Kind, kind)
	}
	return t, nil
}

// Missing answers a backup's host which of ids the store lacks.
func (s *Service) Missing(ctx context.Context, host, task string, ids []string) ([]string, error) {
	if _, err := s.hostTask(ctx, host, task, contract.TaskBackup); err != nil {
		return nil, err
	}
	if len(ids) > MaxMissing {
		return nil, fmt.Errorf("%w: %d chunk IDs in one request, at most %d", ErrInvalid, len(ids), MaxMissing)
	}
	for _, id := range ids {
		if !backup.ValidID(id) {
			return nil, fmt.Errorf("%w: chunk ID %q is not 64 lowercase hex digits", ErrInvalid, id)
		}
	}
	missing, err := s.deps.Store.Missing(ctx, ids)
	if missing == nil && err == nil {
		missing = []string{}
	}
	return missing, err
}

// PutChunk stores a backup's chunk, whose SHA-256 must be id.
func (s *Service) PutChunk(ctx context.Context, host, task, id string, data []byte) error {
	if _, err := s.hostTask(ctx, host, task, contract.TaskBackup); err != nil {
		return err
	}
	if err := backup.CheckObject(id, data); err != nil {
		return fmt.Errorf("%w: chunk %s: %w", ErrInvalid, id, err)
	}
	return s.deps.Store.Put(ctx, id, data)
}

// oneManifest is a ManifestStore of one manifest, to open an uploaded one
// before it is stored.
type oneManifest struct {
	id   string
	data []byte
}

func (o oneManifest) PutManifest(context.Context, string, []byte) error {
	return errors.New("read only")
}
func (o oneManifest) ListManifests(context.Context) ([]string, error) { return []string{o.id}, nil }
func (o oneManifest) GetManifest(_ context.Context, id string) ([]byte, error) {
	if id != o.id {
		return nil, backup.ErrNotFound
	}
	return o.data, nil
}

// PutManifest stores a backup's manifest once it checks: its SHA-256 is
// id, it opens with the task's volume key and names the task's volume
// (backup.OpenManifest), and the store holds every chunk it lists.
func (s *Service) PutManifest(ctx context.Context, host, task, id string, data []byte) error {
	t, err := s.hostTask(ctx, host, task, contract.TaskBackup)
	if err != nil {
		return err
	}
	if err := backup.CheckObject(id, data); err != nil {
		return fmt.Errorf("%w: manifest %s: %w", ErrInvalid, id, err)
	}
	m, err := s.openManifest(ctx, oneManifest{id, data}, t, id)
	if err != nil {
		return err
	}
	if err := s.allStored(ctx, m); err != nil {
		return err
	}
	return s.deps.Store.PutManifest(ctx, id, data)
}

// openManifest opens manifest id of t's volume from ms, with the volume's key.
func (s *Service) openManifest(ctx context.Context, ms backup.ManifestStore, t store.VolumeTask, id string) (backup.Manifest, error) {
	key, err := s.volumeKey(t.Project, t.Volume)
	if err != nil {
		return backup.Manifest{}, err
	}
	m, err := backup.OpenManifest(ctx, ms, id, key)
	if errors.Is(err, backup.ErrCorrupt) || errors.Is(err, backup.ErrWrongVolume) || errors.Is(err, backup.ErrNotFound) {
		return backup.Manifest{}, fmt.Errorf("%w: %w (it must open with volume %s's key)", ErrInvalid, err, t.Volume)
	}
	return m, err
}

// allStored checks that the store holds every chunk m lists.
func (s *Service) allStored(ctx context.Context, m backup.Manifest) error {
	ids := make([]string, len(m.Chunks))
	for i, c := range m.Chunks {
		ids[i] = c.ID
	}
	missing, err := s.deps.Store.Missing(ctx, ids)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: backup %s lists %d chunks the store lacks, %s first", ErrInvalid, short(m.ID), len(missing), missing[0])
	}
	return nil
}

// GetManifest returns the sealed manifest of a restore's backup.
func (s *Service) GetManifest(ctx context.Context, host, task string) ([]byte, error) {
	t, err := s.hostTask(ctx, host, task, contract.TaskRestore)
	if err != nil {
		return nil, err
	}
	data, err := s.deps.Store.GetManifest(ctx, t.Backup)
	if errors.Is(err, backup.ErrNotFound) {
		return nil, fmt.Errorf("%w: backup %s's manifest is not in the store", ErrNotFound, short(t.Backup))
	}
	return data, err
}

// GetChunk returns a sealed chunk that the restore's manifest lists
// (ErrNotFound for any other).
func (s *Service) GetChunk(ctx context.Context, host, task, id string) ([]byte, error) {
	t, err := s.hostTask(ctx, host, task, contract.TaskRestore)
	if err != nil {
		return nil, err
	}
	listed, err := s.lists.get(t.ID, func() (map[string]bool, error) {
		m, err := s.openManifest(ctx, s.deps.Store, t, t.Backup)
		if err != nil {
			return nil, err
		}
		set := make(map[string]bool, len(m.Chunks))
		for _, c := range m.Chunks {
			set[c.ID] = true
		}
		return set, nil
	})
	if err != nil {
		return nil, err
	}
	if !listed[id] {
		return nil, fmt.Errorf("%w: backup %s lists no chunk %s", ErrNotFound, short(t.Backup), id)
	}
	data, err := s.deps.Store.Get(ctx, id)
	if errors.Is(err, backup.ErrNotFound) {
		return nil, fmt.Errorf("%w: chunk %s of backup %s is not in the store", ErrNotFound, id, short(t.Backup))
	}
	return data, err
}

// chunkLists keeps the chunk sets of open restores' manifests, so that a
// restore's thousands of chunk reads open its manifest once.
type chunkLists struct {
	mu   sync.Mutex
	sets map[string]map[string]bool
}

// maxLists bounds the sets kept (a few restores run at once).
const maxLists = 32

func newChunkLists() *chunkLists { return &chunkLists{sets: map[string]map[string]bool{}} }

func (c *chunkLists) get(task string, load func() (map[string]bool, error)) (map[string]bool, error) {
	c.mu.Lock()
	set, ok := c.sets[task]
	c.mu.Unlock()
	if ok {
		return set, nil
	}
	set, err := load()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.sets) >= maxLists {
		for k := range c.sets {
			delete(c.sets, k)
			break
		}
	}
	c.sets[task] = set
	return set, nil
}

func (c *chunkLists) drop(task string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.sets, task)
}
