package backup

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/restic/chunker"
)

// depth is how many chunks a backup or a restore has in flight: enough to
// keep every core and a store's round trips busy, few enough to bound memory
// (each at most MaxChunk plain plus as much sealed).
func depth() int { return min(max(2*runtime.GOMAXPROCS(0), 4), 16) }

// Backup reads a volume's tar stream to its end and stores it in store:
// chunks first, each unless the store has it, then the manifest, whose ID is
// the backup's handle. A backup that fails leaves at most chunks no manifest
// lists (blob retention collects them), never a manifest. created is the
// time the manifest records. The stream is read on one goroutine, which a
// failure elsewhere stops only once its read returns: a stream tied to ctx
// (an HTTP body) ends with it.
func Backup(ctx context.Context, tarStream io.Reader, key VolumeKey, store Store, created time.Time) (Manifest, Stats, error) {
	fail := func(err error) (Manifest, Stats, error) {
		return Manifest{}, Stats{}, fmt.Errorf("back up %s: %w", key.volume, err)
	}
	pol, err := key.polynomial()
	if err != nil {
		return fail(fmt.Errorf("chunker polynomial: %w", err))
	}
	s, err := newSealer(key, depth())
	if err != nil {
		return fail(err)
	}
	defer s.close()

	cut := chunker.NewWithBoundaries(tarStream, pol, MinChunk, MaxChunk)
	cut.SetAverageBits(ChunkAverageBits)
	var read int64 // the stream's bytes chunked so far
	next := func() ([]byte, bool, error) {
		c, err := cut.Next(nil)
		if err == io.EOF {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("read the tar stream after byte %d: %w", read, err)
		}
		read += int64(len(c.Data))
		return c.Data, true, nil
	}
	type stored struct {
		data []byte
		ref  ChunkRef
		sent bool
	}
	work := func(ctx context.Context, data []byte) (stored, error) {
		id, object := s.seal(chunkAAD, data)
		sent, err := putIfMissing(ctx, store, id, object)
		if err != nil {
			return stored{}, err
		}
		return stored{data: data, ref: ChunkRef{ID: id, Size: int64(len(data)), Stored: int64(len(object))}, sent: sent}, nil
	}
	m := Manifest{
		Format:  FormatVersion,
		Volume:  key.volume,
		Created: created.UTC(),
		Chunker: ChunkerParams{Polynomial: pol.String(), Min: MinChunk, Max: MaxChunk, AverageBits: ChunkAverageBits},
	}
	var st Stats
	// The whole stream is hashed here, in order, rather than as it is read:
	// the reading goroutine (the chunker's) is the pipeline's bottleneck.
	whole := sha256.New()
	sink := func(c stored) error {
		whole.Write(c.data)
		m.Chunks = append(m.Chunks, c.ref)
		st.Chunks++
		st.Bytes += c.ref.Size
		st.StoredBytes += c.ref.Stored
		if c.sent {
			st.NewChunks++
			st.SentBytes += c.ref.Stored
		}
		return nil
	}
	if err := ordered(ctx, depth(), next, work, sink); err != nil {
		return fail(err)
	}
	m.Size = read
	m.SHA256 = hex.EncodeToString(whole.Sum(nil))

	object, err := sealManifest(s, &m)
	if err != nil {
		return fail(err)
	}
	if err := store.PutManifest(ctx, m.ID, object); err != nil {
		return fail(fmt.Errorf("store manifest %s: %w", m.ID, err))
	}
	st.SentBytes += int64(len(object))
	return m, st, nil
}

// putIfMissing sends a sealed chunk unless the store has it, and says
// whether it did.
func putIfMissing(ctx context.Context, store ChunkStore, id string, object []byte) (bool, error) {
	missing, err := store.Missing(ctx, []string{id})
	if err != nil {
		return false, fmt.Errorf("ask the store for chunk %s: %w", id, err)
	}
	if len(missing) == 0 {
		return false, nil
	}
	if err := store.Put(ctx, id, object); err != nil {
		return false, fmt.Errorf("store chunk %s: %w", id, err)
	}
	return true, nil
}

// sealManifest seals m, sets its ID and returns the object to store.
func sealManifest(s *sealer, m *Manifest) ([]byte, error) {
	body, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	label, err := json.Marshal(m.Volume)
	if err != nil {
		return nil, fmt.Errorf("encode manifest label: %w", err)
	}
	var object []byte
	m.ID, object = s.seal(manifestAAD(label), body)
	return object, nil
}

// manifestVolume reads the clear-text volume of a stored manifest, and how
// long its authenticated prefix is. Not trusted until the manifest opens
// with that volume's key.
func manifestVolume(object []byte) (VolumeID, int, error) {
	if len(object) < 3 || object[0] != kindManifest {
		return VolumeID{}, 0, fmt.Errorf("not a manifest: %w", ErrCorrupt)
	}
	n := int(binary.BigEndian.Uint16(object[1:3]))
	if len(object) < 3+n {
		return VolumeID{}, 0, fmt.Errorf("manifest label cut short: %w", ErrCorrupt)
	}
	var v VolumeID
	if err := json.Unmarshal(object[3:3+n], &v); err != nil {
		return VolumeID{}, 0, fmt.Errorf("manifest label: %v: %w", err, ErrCorrupt)
	}
	if err := v.Validate(); err != nil {
		return VolumeID{}, 0, fmt.Errorf("manifest label: %v: %w", err, ErrCorrupt)
	}
	return v, 3 + n, nil
}

// OpenManifest fetches backup id from store and opens it with its volume's
// key; ErrWrongVolume if the backup is of another volume.
func OpenManifest(ctx context.Context, store ManifestStore, id string, key VolumeKey) (Manifest, error) {
	if !ValidID(id) {
		return Manifest{}, fmt.Errorf("backup ID %q is not 64 lowercase hex digits", id)
	}
	object, err := store.GetManifest(ctx, id)
	if err != nil {
		return Manifest{}, fmt.Errorf("backup %s: fetch manifest: %w", id, err)
	}
	return openManifest(id, object, key)
}

func openManifest(id string, object []byte, key VolumeKey) (Manifest, error) {
	fail := func(err error) (Manifest, error) { return Manifest{}, fmt.Errorf("backup %s: manifest: %w", id, err) }
	v, aadLen, err := manifestVolume(object)
	if err != nil {
		return fail(err)
	}
	if v != key.volume {
		return fail(fmt.Errorf("it is of %s, the key of %s: %w", v, key.volume, ErrWrongVolume))
	}
	s, err := newSealer(key, 1)
	if err != nil {
		return fail(err)
	}
	defer s.close()
	body, err := s.open(id, object, aadLen, maxManifest)
	if err != nil {
		return fail(err)
	}
	var m Manifest
	if err := json.Unmarshal(body, &m); err != nil {
		return fail(fmt.Errorf("decode: %v: %w", err, ErrCorrupt))
	}
	if m.Volume != v {
		return fail(fmt.Errorf("its body names %s, its label %s: %w", m.Volume, v, ErrCorrupt))
	}
	if err := m.check(); err != nil {
		return fail(fmt.Errorf("%v: %w", err, ErrCorrupt))
	}
	m.ID = id
	return m, nil
}

// ListBackups opens every manifest in store with the cluster's backup key,
// oldest first: all a new control plane needs, with the bucket, to find every
// backup. A manifest that does not open is left out and named in the error,
// which joins them all; the others are still returned.
func ListBackups(ctx context.Context, store ManifestStore, clusterKey []byte) ([]Manifest, error) {
	ids, err := store.ListManifests(ctx)
	if err != nil {
		return nil, fmt.Errorf("list backups: %w", err)
	}
	var out []Manifest
	var errs []error
	for _, id := range ids {
		object, err := store.GetManifest(ctx, id)
		if err != nil {
			errs = append(errs, fmt.Errorf("backup %s: fetch manifest: %w", id, err))
			continue
		}
		v, _, err := manifestVolume(object)
		if err != nil {
			errs = append(errs, fmt.Errorf("backup %s: %w", id, err))
			continue
		}
		key, err := DeriveVolumeKey(clusterKey, v)
		if err != nil {
			return nil, err
		}
		m, err := openManifest(id, object, key)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Manifest) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out, errors.Join(errs...)
}

// Restore writes backup m's tar stream to w. It first fetches every chunk
// and verifies it (its ID against its content, its authentication, its nonce
// against its plaintext's MAC, its sizes), spilling the verified stream to a
// private file in spillDir, then checks the whole stream's size and SHA-256,
// and only then copies it to w. So a missing or corrupted chunk fails naming
// the backup and the chunk (a *ChunkError) and w gets nothing. Spilling,
// rather than verifying in one pass and fetching again in a second, fetches
// once and writes exactly what was verified, whatever the store does
// between two passes; it needs as much free disk as the volume, which the
// volume being restored will need anyway.
func Restore(ctx context.Context, m Manifest, key VolumeKey, store ChunkStore, w io.Writer, spillDir string) error {
	fail := func(err error) error { return fmt.Errorf("restore backup %s: %w", m.ID, err) }
	if m.Volume != key.volume {
		return fail(fmt.Errorf("it is of %s, the key of %s: %w", m.Volume, key.volume, ErrWrongVolume))
	}
	if err := m.check(); err != nil {
		return fail(err)
	}
	s, err := newSealer(key, depth())
	if err != nil {
		return fail(err)
	}
	defer s.close()
	spill, err := os.CreateTemp(spillDir, ".hatch-restore-*")
	if err != nil {
		return fail(fmt.Errorf("spill file: %w", err))
	}
	defer os.Remove(spill.Name())
	defer spill.Close()

	whole := sha256.New()
	i := 0
	next := func() (ChunkRef, bool, error) {
		if i == len(m.Chunks) {
			return ChunkRef{}, false, nil
		}
		i++
		return m.Chunks[i-1], true, nil
	}
	work := func(ctx context.Context, ref ChunkRef) ([]byte, error) {
		data, err := fetchChunk(ctx, s, store, ref)
		if err != nil {
			return nil, &ChunkError{Backup: m.ID, Chunk: ref.ID, Err: err}
		}
		return data, nil
	}
	sink := func(data []byte) error {
		whole.Write(data)
		if _, err := spill.Write(data); err != nil {
			return fmt.Errorf("spill file: %w", err)
		}
		return nil
	}
	if err := ordered(ctx, depth(), next, work, sink); err != nil {
		return fail(err)
	}
	if got := hex.EncodeToString(whole.Sum(nil)); got != m.SHA256 {
		return fail(fmt.Errorf("the stream's sha256 is %s, the manifest's %s: %w", got, m.SHA256, ErrCorrupt))
	}
	if _, err := spill.Seek(0, io.SeekStart); err != nil {
		return fail(fmt.Errorf("spill file: %w", err))
	}
	if n, err := io.Copy(w, spill); err != nil {
		return fail(fmt.Errorf("write the stream at byte %d: %w", n, err))
	}
	return nil
}

// fetchChunk fetches one chunk and verifies it against its reference.
func fetchChunk(ctx context.Context, s *sealer, store ChunkStore, ref ChunkRef) ([]byte, error) {
	object, err := store.Get(ctx, ref.ID)
	if err != nil {
		return nil, err
	}
	if int64(len(object)) != ref.Stored {
		return nil, fmt.Errorf("%d bytes stored, the manifest says %d: %w", len(object), ref.Stored, ErrCorrupt)
	}
	data, err := s.open(ref.ID, object, len(chunkAAD), int(ref.Size))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != ref.Size {
		return nil, fmt.Errorf("%d bytes, the manifest says %d: %w", len(data), ref.Size, ErrCorrupt)
	}
	return data, nil
}
