package volumes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/hatchery/hatchery/internal/backup"
	"github.com/hatchery/hatchery/internal/blob"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/store"
)

// BlobStore keeps backups in the control plane's blob store (files beside
// SQLite, rows on PostgreSQL: any server of a cluster serves them), a
// chunk or a manifest each a blob under its SHA-256. Its manifests are
// listed from the records (a manifest blob is a blob like another), so
// they are lost with the control plane's database: only a bucket outlives
// it (docs/BACKUPS.md).
type BlobStore struct {
	Blobs blob.Storage
	Tasks store.VolumeTasks
}

var _ backup.Store = (*BlobStore)(nil)

// maxObject bounds a stored object: a chunk's sealed size, or a manifest
// (about 100 bytes a chunk: some 300 GB of volume).
const maxObject = MaxManifest

// MaxChunk and MaxManifest bound what a host uploads: a sealed chunk
// (backup.MaxChunk and its sealing's overhead), and a manifest.
const (
	MaxChunk    = backup.MaxChunk + 4096
	MaxManifest = 256 << 20
)

func digestOf(id string) string { return "sha256:" + id }

// Put stores a chunk; the blob store checks its digest.
func (b *BlobStore) Put(ctx context.Context, id string, data []byte) error {
	if !backup.ValidID(id) {
		return fmt.Errorf("object ID %q is not 64 lowercase hex digits", id)
	}
	if _, _, err := b.Blobs.Put(ctx, digestOf(id), bytes.NewReader(data), maxObject); err != nil {
		return fmt.Errorf("store object %s: %w", id, err)
	}
	return nil
}

// Get returns a stored object, or an error wrapping backup.ErrNotFound.
func (b *BlobStore) Get(ctx context.Context, id string) ([]byte, error) {
	if !backup.ValidID(id) {
		return nil, fmt.Errorf("object ID %q is not 64 lowercase hex digits: %w", id, backup.ErrNotFound)
	}
	r, _, err := b.Blobs.Open(ctx, digestOf(id))
	if errors.Is(err, blob.ErrNotFound) {
		return nil, fmt.Errorf("object %s: %w", id, backup.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("object %s: %w", id, err)
	}
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, maxObject+1))
	if err != nil {
		return nil, fmt.Errorf("object %s: %w", id, err)
	}
	return data, nil
}

// Missing returns those of ids the store lacks. Each one it holds is
// touched: its grace period restarts, so that a collection running while
// the backup that was just told "the store has it" is in progress does
// not remove it (see GuardCollector).
func (b *BlobStore) Missing(ctx context.Context, ids []string) ([]string, error) {
	var out []string
	for _, id := range ids {
		if !backup.ValidID(id) {
			return nil, fmt.Errorf("chunk ID %q is not 64 lowercase hex digits", id)
		}
		_, err := b.Blobs.Touch(ctx, digestOf(id))
		switch {
		case errors.Is(err, blob.ErrNotFound):
			out = append(out, id)
		case err != nil:
			return nil, fmt.Errorf("chunk %s: %w", id, err)
		}
	}
	return out, nil
}

// PutManifest stores a manifest as a blob.
func (b *BlobStore) PutManifest(ctx context.Context, id string, data []byte) error {
	return b.Put(ctx, id, data)
}

// GetManifest returns a stored manifest.
func (b *BlobStore) GetManifest(ctx context.Context, id string) ([]byte, error) {
	return b.Get(ctx, id)
}

// ListManifests returns the manifests of the recorded good backups not
// forgotten.
func (b *BlobStore) ListManifests(ctx context.Context) ([]string, error) {
	list, err := b.Tasks.ListVolumeTasks(ctx, store.VolumeTaskFilter{Kind: string(contract.TaskBackup)})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range list {
		if t.State == store.TaskDone && t.Manifest != "" {
			out = append(out, t.Manifest)
		}
	}
	return out, nil
}
