// Package backup is the storage engine of volume backups: it cuts a volume's
// tar stream into content-defined chunks, compresses and encrypts each one,
// stores it under the SHA-256 of what is stored, and writes an encrypted
// manifest that lists them; Restore reads them back, verifying everything
// before it writes a byte. The agent (which backs up and restores) and the
// control plane (which lists, keeps and forgets backups) both use it; it does
// I/O only through the io.Reader/io.Writer it is handed, a Store, and the
// spill directory of a restore.
//
// Invariants:
//   - Equal content gives an equal stored chunk within one volume (dedup): a
//     chunk's nonce is derived from an HMAC of what it seals, so sealing is
//     deterministic, and a chunk the store already has is not sent again.
//     Because the nonce is a MAC of the sealed plaintext itself, one nonce
//     never seals two different plaintexts under one key.
//   - A stored object's ID is the hex SHA-256 of its bytes: what a store (the
//     control plane's blob store, a bucket) can check without any key.
//   - A host needs only its volume's key (VolumeKey), never the cluster's
//     backup key; a manifest names its volume in clear, authenticated by that
//     volume's key, so the holder of the cluster's key and the bucket alone can
//     list and open every backup (ListBackups).
//   - Restore fetches and verifies every chunk (its ID, the GCM tag, the
//     nonce against the plaintext's HMAC, its size) and the whole stream's
//     size and SHA-256 before the first byte reaches its writer: a missing or
//     corrupted chunk fails naming the backup and the chunk, writing nothing.
//   - Memory is bounded by a few chunks in flight (the chunker's maximum,
//     MaxChunk, times the pipeline's depth), whatever the volume's size.
package backup

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// FormatVersion is the version of the manifest and of the stored objects'
// layout. A reader refuses a version it does not know.
const FormatVersion = 1

// The chunker's boundaries. restic/chunker's defaults (512 KiB minimum, 1 MiB
// average, 8 MiB maximum) re-send 5.6–7.1 % of a 200 MB volume when 20 of its
// 2,000 files are rewritten; an eighth of them keeps that under the 5 % bound
// with a wide margin (TestIncrementalBackupSendsLittle logs the figure), at
// the cost of 8 times as many chunks (about 1,600 for 200 MB: a manifest of
// some 150 KB and as many store requests).
const (
	MinChunk         = 64 << 10
	MaxChunk         = 1 << 20
	ChunkAverageBits = 17 // 128 KiB on average
)

// Errors callers branch on, with errors.Is.
var (
	// ErrNotFound is what a Store returns for an object it does not hold.
	ErrNotFound = errors.New("backup: object not found")
	// ErrCorrupt is a stored object that fails a check: its ID, its
	// authentication, its nonce, its size or its format.
	ErrCorrupt = errors.New("backup: object is corrupted or sealed with another key")
	// ErrWrongVolume is a key used for a manifest of another volume.
	ErrWrongVolume = errors.New("backup: the key is for another volume")
)

// ChunkStore keeps sealed chunks under their IDs (hex SHA-256 of the data).
// Implementations: the control plane's blob store (through the agent's
// client), s3store.
type ChunkStore interface {
	// Put stores data under id, the hex SHA-256 of data (a store may refuse
	// a mismatch). Idempotent: putting a stored chunk again succeeds.
	Put(ctx context.Context, id string, data []byte) error
	// Get returns the data stored under id, or an error wrapping
	// ErrNotFound.
	Get(ctx context.Context, id string) ([]byte, error)
	// Missing returns those of ids the store does not hold, so that a
	// backup sends only those.
	Missing(ctx context.Context, ids []string) ([]string, error)
}

// ManifestStore keeps sealed manifests apart from chunks, so that a store
// lists the backups it holds without any key (a prefix of a bucket, a kind
// of the blob store).
type ManifestStore interface {
	// PutManifest stores data under id, its hex SHA-256; idempotent.
	PutManifest(ctx context.Context, id string, data []byte) error
	// GetManifest returns the data stored under id, or an error wrapping
	// ErrNotFound.
	GetManifest(ctx context.Context, id string) ([]byte, error)
	// ListManifests returns the IDs of every manifest stored, in no order.
	ListManifests(ctx context.Context) ([]string, error)
}

// Store is where backups go: their chunks and their manifests.
type Store interface {
	ChunkStore
	ManifestStore
}

// Manifest describes one backup: what its volume's tar stream was and the
// chunks that hold it, in order. It is stored sealed with the volume's key;
// ID, the SHA-256 of the stored manifest, is the backup's handle.
type Manifest struct {
	// ID is the backup's handle; it is not part of the sealed JSON but the
	// hash of it as stored.
	ID      string    `json:"-"`
	Format  int       `json:"format"`
	Volume  VolumeID  `json:"volume"`
	Created time.Time `json:"created"`
	// Size and SHA256 are the whole tar stream's.
	Size    int64         `json:"size"`
	SHA256  string        `json:"sha256"`
	Chunker ChunkerParams `json:"chunker"`
	Chunks  []ChunkRef    `json:"chunks"`
}

// ChunkerParams are the content-defined chunker's settings a backup was cut
// with. A restore does not need them; they say why chunks are the size they
// are, and a later format could change them only with a new version.
type ChunkerParams struct {
	// Polynomial is the Rabin fingerprint's, derived from the volume's key
	// (so boundaries, which reveal something of content, differ between
	// volumes). Hex, as restic/chunker writes it.
	Polynomial  string `json:"polynomial"`
	Min         int    `json:"min"`
	Max         int    `json:"max"`
	AverageBits int    `json:"average_bits"`
}

// ChunkRef is one chunk of a manifest: its stored ID, its plaintext size (the
// bytes of the tar stream it holds) and its stored (compressed, sealed) size.
type ChunkRef struct {
	ID     string `json:"id"`
	Size   int64  `json:"size"`
	Stored int64  `json:"stored"`
}

// Stats are what one Backup did.
type Stats struct {
	// Chunks and Bytes are the whole stream's.
	Chunks int
	Bytes  int64
	// NewChunks and SentBytes are what the store did not have and was sent,
	// the manifest included: the incremental cost.
	NewChunks int
	SentBytes int64
	// StoredBytes is the size of every chunk of the backup as stored, sent
	// or already there.
	StoredBytes int64
}

// check validates a manifest read from a store: it is what the restore
// trusts to know which chunks to fetch and how large each must be.
func (m *Manifest) check() error {
	if m.Format != FormatVersion {
		return fmt.Errorf("manifest format %d, want %d", m.Format, FormatVersion)
	}
	if err := m.Volume.Validate(); err != nil {
		return fmt.Errorf("manifest volume: %w", err)
	}
	if !ValidID(m.SHA256) {
		return fmt.Errorf("manifest sha256 %q is not 64 lowercase hex digits", m.SHA256)
	}
	var total int64
	for i, c := range m.Chunks {
		if !ValidID(c.ID) {
			return fmt.Errorf("manifest chunk %d: ID %q is not 64 lowercase hex digits", i, c.ID)
		}
		if c.Size <= 0 || c.Size > MaxChunk || c.Stored <= 0 || c.Stored > maxStored {
			return fmt.Errorf("manifest chunk %d (%s): size %d, stored %d out of bounds", i, c.ID, c.Size, c.Stored)
		}
		total += c.Size
	}
	if total != m.Size {
		return fmt.Errorf("manifest chunks add up to %d bytes, the stream was %d", total, m.Size)
	}
	return nil
}

// ChunkError is a chunk a restore could not use: Err wraps ErrNotFound,
// ErrCorrupt or the store's error. Its message names the chunk; Restore's
// error around it names the backup.
type ChunkError struct {
	Backup string
	Chunk  string
	Err    error
}

func (e *ChunkError) Error() string {
	return fmt.Sprintf("chunk %s: %v", e.Chunk, e.Err)
}

func (e *ChunkError) Unwrap() error { return e.Err }
