// Package blob is the control plane's content-addressed store of source blobs
// (build contexts). Storage is the contract every store keeps (blobtest checks
// it); Store keeps blobs as files on disk under their SHA-256 digest, for a
// server on SQLite, and the PostgreSQL store keeps them as chunk rows, so
// every server on one database serves every blob.
//
// Invariants of Store:
//   - A blob's file holds exactly the bytes whose digest names it: an upload is
//     streamed to a temporary file, hashed on the way, and renamed into place
//     only when its digest matches and it is within the size limit. A failed
//     upload leaves nothing behind.
//   - A stored blob is durable: the file and its directory are fsynced before
//     Put returns.
//   - A blob is collected only when nothing references it and it has not been
//     uploaded or asked for (Touch) within the grace period, so a client that
//     was just told "the server has it" can still use it.
package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Errors callers branch on, with errors.Is.
var (
	ErrNotFound       = errors.New("blob not found")
	ErrBadDigest      = errors.New(`bad digest: want "sha256:" and 64 lowercase hex digits`)
	ErrDigestMismatch = errors.New("content does not match its digest")
	ErrTooLarge       = errors.New("blob too large")
)

const prefix = "sha256:"

// ParseDigest checks a digest, "sha256:<64 lowercase hex digits>", and returns
// its hex part.
func ParseDigest(digest string) (string, error) {
	h, ok := strings.CutPrefix(digest, prefix)
	if !ok || len(h) != 2*sha256.Size || strings.ToLower(h) != h {
		return "", fmt.Errorf("%q: %w", digest, ErrBadDigest)
	}
	if _, err := hex.DecodeString(h); err != nil {
		return "", fmt.Errorf("%q: %w", digest, ErrBadDigest)
	}
	return h, nil
}

// Reader reads a stored blob; it seeks, so ranges can be served.
type Reader = io.ReadSeekCloser

// Storage is what a blob store promises, whatever keeps the bytes:
//   - a blob becomes visible only once all of its content is stored and its
//     digest checked: a failed, aborted or mismatched upload is never served
//     and leaves nothing a reader sees;
//   - concurrent uploads of one digest store it once; each of them succeeds;
//   - reads stream: neither Put nor a Reader holds the whole blob in memory;
//   - Collect removes only what is unreferenced and past its grace, and a
//     Touch that returned before it started keeps a blob.
type Storage interface {
	// Put stores the content read from r under digest, reading at most
	// limit bytes. A blob already stored is touched and r is not read;
	// created reports whether the blob is new. ErrBadDigest,
	// ErrDigestMismatch, ErrTooLarge or a read error store nothing.
	Put(ctx context.Context, digest string, r io.Reader, limit int64) (info Info, created bool, err error)
	// Stat describes a stored blob, or returns ErrNotFound.
	Stat(ctx context.Context, digest string) (Info, error)
	// Touch restarts a stored blob's grace period and describes it, or
	// returns ErrNotFound.
	Touch(ctx context.Context, digest string) (Info, error)
	// Open opens a stored blob for reading, or returns ErrNotFound. The
	// Reader may use ctx until it is closed.
	Open(ctx context.Context, digest string) (Reader, Info, error)
	// HasSource reports whether a blob is stored (reconciler.SourceStorage).
	HasSource(ctx context.Context, digest string) (bool, error)
	// List describes every stored blob, sorted by digest.
	List(ctx context.Context) ([]Info, error)
	// Collect removes every blob that is not referenced and was last
	// uploaded or touched more than grace ago, and returns what it removed.
	Collect(ctx context.Context, referenced []string, grace time.Duration) ([]Info, error)
	// Bytes returns the size of every stored blob, added up.
	Bytes(ctx context.Context) (int64, error)
}

var _ Storage = (*Store)(nil)

// Info describes a stored blob.
type Info struct {
	Digest string
	Size   int64
	// ModTime is when it was last uploaded or touched: its grace period runs from there.
	ModTime time.Time
}

// Store keeps blobs under a directory.
type Store struct {
	dir string
	now func() time.Time

	// mu orders the moments a blob appears, is touched or is removed, so that
	// a collection never removes a blob that was just uploaded or touched. It
	// is not held while an upload streams.
	mu    sync.Mutex
	bytes atomic.Int64 // the size of every stored blob, added up
}

// Open opens the store in dir, creating it if needed, and removes the
// temporary files of uploads a crash interrupted.
func Open(dir string) (*Store, error) {
	s := &Store{dir: dir, now: time.Now}
	if err := os.RemoveAll(s.tmpDir()); err != nil {
		return nil, fmt.Errorf("blob store %s: clear interrupted uploads: %w", dir, err)
	}
	for _, d := range []string{s.tmpDir(), filepath.Join(dir, "sha256")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("blob store %s: %w", dir, err)
		}
	}
	blobs, err := s.list()
	if err != nil {
		return nil, err
	}
	for _, b := range blobs {
		s.bytes.Add(b.Size)
	}
	return s, nil
}

func (s *Store) tmpDir() string { return filepath.Join(s.dir, "tmp") }

func (s *Store) path(hexDigest string) string {
	return filepath.Join(s.dir, "sha256", hexDigest[:2], hexDigest)
}

// Bytes returns the size of every stored blob, added up.
func (s *Store) Bytes(context.Context) (int64, error) { return s.bytes.Load(), nil }

// Put stores the content read from r under digest (see Storage.Put).
func (s *Store) Put(ctx context.Context, digest string, r io.Reader, limit int64) (info Info, created bool, err error) {
	h, err := ParseDigest(digest)
	if err != nil {
		return Info{}, false, err
	}
	if info, err := s.Touch(ctx, digest); err == nil {
		return info, false, nil
	}
	tmp, err := os.CreateTemp(s.tmpDir(), "upload-*")
	if err != nil {
		return Info{}, false, fmt.Errorf("put %s: %w", digest, err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed into place
	defer tmp.Close()

	hash := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, hash), io.LimitReader(r, limit+1))
	switch {
	case err != nil:
		return Info{}, false, fmt.Errorf("put %s: read content: %w", digest, err)
	case ctx.Err() != nil:
		return Info{}, false, fmt.Errorf("put %s: %w", digest, ctx.Err())
	case n > limit:
		return Info{}, false, fmt.Errorf("put %s: more than %d bytes: %w", digest, limit, ErrTooLarge)
	case hex.EncodeToString(hash.Sum(nil)) != h:
		return Info{}, false, fmt.Errorf("put %s: %w (got sha256:%x)", digest, ErrDigestMismatch, hash.Sum(nil))
	}
	if err := tmp.Sync(); err != nil {
		return Info{}, false, fmt.Errorf("put %s: %w", digest, err)
	}
	if err := tmp.Close(); err != nil {
		return Info{}, false, fmt.Errorf("put %s: %w", digest, err)
	}
	return s.install(digest, h, tmp.Name(), n)
}

// install moves a verified upload into place, durably.
func (s *Store) install(digest, h, tmp string, size int64) (Info, bool, error) {
	final := s.path(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	if fi, err := os.Stat(final); err == nil { // a concurrent upload of the same content won
		return Info{Digest: digest, Size: fi.Size(), ModTime: fi.ModTime()}, false, nil
	}
	if err := os.MkdirAll(filepath.Dir(final), 0o700); err != nil {
		return Info{}, false, fmt.Errorf("put %s: %w", digest, err)
	}
	now := s.now()
	if err := os.Chtimes(tmp, now, now); err != nil {
		return Info{}, false, fmt.Errorf("put %s: %w", digest, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return Info{}, false, fmt.Errorf("put %s: %w", digest, err)
	}
	for _, d := range []string{filepath.Dir(final), filepath.Dir(filepath.Dir(final))} {
		if err := syncDir(d); err != nil {
			return Info{}, false, fmt.Errorf("put %s: %w", digest, err)
		}
	}
	s.bytes.Add(size)
	return Info{Digest: digest, Size: size, ModTime: now}, true, nil
}

// Stat describes a stored blob, or returns ErrNotFound.
func (s *Store) Stat(_ context.Context, digest string) (Info, error) {
	return s.stat(digest)
}

func (s *Store) stat(digest string) (Info, error) {
	h, err := ParseDigest(digest)
	if err != nil {
		return Info{}, err
	}
	fi, err := os.Stat(s.path(h))
	if errors.Is(err, fs.ErrNotExist) {
		return Info{}, fmt.Errorf("%s: %w", digest, ErrNotFound)
	}
	if err != nil {
		return Info{}, fmt.Errorf("stat %s: %w", digest, err)
	}
	return Info{Digest: digest, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

// Touch restarts a stored blob's grace period and describes it, or returns
// ErrNotFound. Telling a client that the server has a blob goes through
// Touch, so the blob stays for the apply that follows.
func (s *Store) Touch(_ context.Context, digest string) (Info, error) {
	h, err := ParseDigest(digest)
	if err != nil {
		return Info{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if err := os.Chtimes(s.path(h), now, now); errors.Is(err, fs.ErrNotExist) {
		return Info{}, fmt.Errorf("%s: %w", digest, ErrNotFound)
	} else if err != nil {
		return Info{}, fmt.Errorf("touch %s: %w", digest, err)
	}
	return s.stat(digest)
}

// Open opens a stored blob for reading, or returns ErrNotFound.
func (s *Store) Open(_ context.Context, digest string) (Reader, Info, error) {
	h, err := ParseDigest(digest)
	if err != nil {
		return nil, Info{}, err
	}
	f, err := os.Open(s.path(h))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, Info{}, fmt.Errorf("%s: %w", digest, ErrNotFound)
	}
	if err != nil {
		return nil, Info{}, fmt.Errorf("open %s: %w", digest, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, Info{}, fmt.Errorf("open %s: %w", digest, err)
	}
	return f, Info{Digest: digest, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

// HasSource reports whether a blob is stored: the reconciler's SourceStorage.
func (s *Store) HasSource(_ context.Context, digest string) (bool, error) {
	_, err := s.stat(digest)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// List describes every stored blob, sorted by digest.
func (s *Store) List(context.Context) ([]Info, error) {
	return s.list()
}

func (s *Store) list() ([]Info, error) {
	var out []Info
	root := filepath.Join(s.dir, "sha256")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		digest := prefix + d.Name()
		if _, err := ParseDigest(digest); err != nil {
			return nil // not ours
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, Info{Digest: digest, Size: fi.Size(), ModTime: fi.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list blobs: %w", err)
	}
	return out, nil
}

// Collect removes every blob that is not referenced and was last uploaded or
// touched more than grace ago, and returns what it removed.
func (s *Store) Collect(ctx context.Context, referenced []string, grace time.Duration) ([]Info, error) {
	keep := make(map[string]bool, len(referenced))
	for _, d := range referenced {
		keep[d] = true
	}
	blobs, err := s.list()
	if err != nil {
		return nil, err
	}
	var removed []Info
	for _, b := range blobs {
		if err := ctx.Err(); err != nil {
			return removed, err
		}
		if keep[b.Digest] {
			continue
		}
		ok, err := s.removeIfStale(b.Digest, grace)
		if err != nil {
			return removed, err
		}
		if ok {
			removed = append(removed, b)
		}
	}
	return removed, nil
}

// removeIfStale removes a blob not touched within grace, judged under the
// lock so that a concurrent Touch either comes first (and keeps it) or finds
// it gone.
func (s *Store) removeIfStale(digest string, grace time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	info, err := s.stat(digest)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil || s.now().Sub(info.ModTime) <= grace {
		return false, err
	}
	h, _ := ParseDigest(digest)
	if err := os.Remove(s.path(h)); err != nil {
		return false, fmt.Errorf("collect %s: %w", digest, err)
	}
	s.bytes.Add(-info.Size)
	return true, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
