package blob

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/reconciler"
)

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func openStore(t *testing.T) (*Store, *time.Time) {
	t.Helper()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	return s, &now
}

// failingReader fails the test if anything reads it.
type failingReader struct{ t *testing.T }

func (r failingReader) Read([]byte) (int, error) {
	r.t.Error("the body of an upload of a stored blob was read")
	return 0, io.ErrUnexpectedEOF
}

// brokenReader gives some bytes, then an error, as a dropped connection does.
type brokenReader struct{ sent bool }

func (r *brokenReader) Read(p []byte) (int, error) {
	if r.sent {
		return 0, io.ErrUnexpectedEOF
	}
	r.sent = true
	return copy(p, "partial"), nil
}

func assertNoUploadsLeft(t *testing.T, s *Store) {
	t.Helper()
	left, _ := os.ReadDir(s.tmpDir())
	if len(left) != 0 {
		t.Fatalf("%d temporary files left behind", len(left))
	}
}

func TestPutThenOpenGivesTheContentBack(t *testing.T) {
	s, _ := openStore(t)
	content := []byte("FROM scratch\n")
	d := digestOf(content)
	info, created, err := s.Put(t.Context(), d, bytes.NewReader(content), 1<<20)
	if err != nil || !created || info.Size != int64(len(content)) {
		t.Fatalf("Put = %+v, %v, %v", info, created, err)
	}
	f, got, err := s.Open(d)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	body, _ := io.ReadAll(f)
	if !bytes.Equal(body, content) || got.Size != int64(len(content)) {
		t.Fatalf("Open gave %q (%+v)", body, got)
	}
	if has, err := s.HasSource(t.Context(), d); !has || err != nil {
		t.Fatalf("HasSource = %v, %v", has, err)
	}
	if s.Bytes() != int64(len(content)) {
		t.Fatalf("Bytes = %d, want %d", s.Bytes(), len(content))
	}
	// A second upload of the same content is not read at all.
	if _, created, err := s.Put(t.Context(), d, failingReader{t}, 1<<20); err != nil || created {
		t.Fatalf("second Put = %v, %v; want not created", created, err)
	}
	if s.Bytes() != int64(len(content)) {
		t.Fatalf("Bytes = %d after a repeated upload", s.Bytes())
	}
	assertNoUploadsLeft(t, s)
}

func TestFailedUploadsKeepNothing(t *testing.T) {
	content := []byte(strings.Repeat("x", 100))
	tests := []struct {
		name   string
		digest string
		body   io.Reader
		limit  int64
		want   error
	}{
		{"content that does not match its digest", digestOf([]byte("other")), bytes.NewReader(content), 1000, ErrDigestMismatch},
		{"content over the limit", digestOf(content), bytes.NewReader(content), 99, ErrTooLarge},
		{"a connection dropped mid-upload", digestOf(content), &brokenReader{}, 1000, io.ErrUnexpectedEOF},
		{"a digest with upper-case hex", strings.ToUpper(digestOf(content)), bytes.NewReader(content), 1000, ErrBadDigest},
		{"a digest of another algorithm", "sha512:" + strings.Repeat("a", 64), bytes.NewReader(content), 1000, ErrBadDigest},
		{"a short digest", "sha256:abc", bytes.NewReader(content), 1000, ErrBadDigest},
		{"a path in the digest", "sha256:../../" + strings.Repeat("a", 58), bytes.NewReader(content), 1000, ErrBadDigest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := openStore(t)
			if _, _, err := s.Put(t.Context(), tt.digest, tt.body, tt.limit); !errors.Is(err, tt.want) {
				t.Fatalf("Put: %v, want %v", err, tt.want)
			}
			if blobs, _ := s.List(); len(blobs) != 0 || s.Bytes() != 0 {
				t.Fatalf("stored %v (%d bytes) after a failed upload", blobs, s.Bytes())
			}
			assertNoUploadsLeft(t, s)
		})
	}
}

func TestContentOfExactlyTheLimitIsAccepted(t *testing.T) {
	s, _ := openStore(t)
	content := []byte(strings.Repeat("y", 64))
	if _, _, err := s.Put(t.Context(), digestOf(content), bytes.NewReader(content), 64); err != nil {
		t.Fatalf("Put at the limit: %v", err)
	}
}

func TestCollectRemovesOnlyUnreferencedBlobsPastTheirGrace(t *testing.T) {
	s, now := openStore(t)
	put := func(c string) string {
		d := digestOf([]byte(c))
		if _, _, err := s.Put(t.Context(), d, strings.NewReader(c), 100); err != nil {
			t.Fatal(err)
		}
		return d
	}
	referenced, old, touched := put("referenced"), put("old"), put("touched")
	*now = now.Add(50 * time.Minute)
	recent := put("recent")
	if _, err := s.Touch(touched); err != nil {
		t.Fatal(err)
	}
	*now = now.Add(20 * time.Minute) // referenced, old and touched-at-upload are 70 minutes old

	removed, err := s.Collect(t.Context(), []string{referenced}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0].Digest != old {
		t.Fatalf("removed %+v, want only the old unreferenced blob", removed)
	}
	for _, d := range []string{referenced, touched, recent} {
		if _, err := s.Stat(d); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
	if _, err := s.Stat(old); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Stat of the collected blob: %v", err)
	}
	if want := int64(len("referenced") + len("touched") + len("recent")); s.Bytes() != want {
		t.Fatalf("Bytes = %d, want %d", s.Bytes(), want)
	}
}

func TestReopenCountsBlobsAndClearsInterruptedUploads(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Put(t.Context(), digestOf([]byte("abc")), strings.NewReader("abc"), 10); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.tmpDir(), "upload-crashed"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if s.Bytes() != 3 {
		t.Fatalf("Bytes after reopen = %d, want 3", s.Bytes())
	}
	assertNoUploadsLeft(t, s)
}

func TestMissingBlobs(t *testing.T) {
	s, _ := openStore(t)
	d := digestOf([]byte("nothing"))
	if _, err := s.Stat(d); !errors.Is(err, ErrNotFound) {
		t.Errorf("Stat: %v", err)
	}
	if _, err := s.Touch(d); !errors.Is(err, ErrNotFound) {
		t.Errorf("Touch: %v", err)
	}
	if _, _, err := s.Open(d); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open: %v", err)
	}
	if has, err := s.HasSource(t.Context(), d); has || err != nil {
		t.Errorf("HasSource = %v, %v", has, err)
	}
	if _, err := s.HasSource(t.Context(), "md5:x"); !errors.Is(err, ErrBadDigest) {
		t.Errorf("HasSource of a bad digest: %v", err)
	}
}

var _ reconciler.SourceStorage = (*Store)(nil)
