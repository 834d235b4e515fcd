// Package blobtest is the conformance suite of blob.Storage: every blob store
// (the file store, the PostgreSQL store) runs it, so they keep one contract.
package blobtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/blob"
)

// Harness is one fresh, empty store and what the suite needs to look behind it.
type Harness struct {
	Store blob.Storage
	// Age makes every stored blob's last upload or touch d earlier, as if
	// d had passed.
	Age func(t *testing.T, d time.Duration)
	// Leftovers counts what unfinished uploads left in the store's backing
	// (temporary files, chunk rows no blob owns): zero once none is running.
	Leftovers func(t *testing.T) int
}

// Digest is the digest of content.
func Digest(content []byte) string {
	sum := sha256.Sum256(content)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Random returns n bytes that do not compress, from seed.
func Random(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n - n%8; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// Run runs the suite; open returns a fresh, empty store for each test.
// Large blobs span several of the PostgreSQL store's 1 MiB chunks.
func Run(t *testing.T, open func(t *testing.T) Harness) {
	t.Run("PutThenOpenGivesTheContentBack", func(t *testing.T) { putThenOpen(t, open(t)) })
	t.Run("FailedUploadsKeepNothing", func(t *testing.T) { failedUploads(t, open) })
	t.Run("AnUploadInProgressIsInvisible", func(t *testing.T) { inProgressInvisible(t, open(t)) })
	t.Run("ContentOfExactlyTheLimitIsAccepted", func(t *testing.T) { exactLimit(t, open(t)) })
	t.Run("LargeBlobsStreamAcrossChunksAndSeek", func(t *testing.T) { largeBlob(t, open(t)) })
	t.Run("ConcurrentUploadsOfOneDigestStoreItOnce", func(t *testing.T) { concurrentUploads(t, open(t)) })
	t.Run("CollectRemovesOnlyUnreferencedBlobsPastTheirGrace", func(t *testing.T) { collect(t, open(t)) })
	t.Run("MissingBlobs", func(t *testing.T) { missing(t, open(t)) })
}

// failingReader fails the test if anything reads it.
type failingReader struct{ t *testing.T }

func (r failingReader) Read([]byte) (int, error) {
	r.t.Error("the body of an upload of a stored blob was read")
	return 0, io.ErrUnexpectedEOF
}

// brokenReader gives its bytes, then an error, as a dropped connection does.
type brokenReader struct{ r io.Reader }

func (b *brokenReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

func readAll(t *testing.T, s blob.Storage, digest string) []byte {
	t.Helper()
	r, _, err := s.Open(t.Context(), digest)
	if err != nil {
		t.Fatalf("Open %s: %v", digest, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %s: %v", digest, err)
	}
	return b
}

func assertEmpty(t *testing.T, h Harness) {
	t.Helper()
	if blobs, err := h.Store.List(t.Context()); err != nil || len(blobs) != 0 {
		t.Fatalf("List = %v, %v; want nothing stored", blobs, err)
	}
	if n, err := h.Store.Bytes(t.Context()); err != nil || n != 0 {
		t.Fatalf("Bytes = %d, %v; want 0", n, err)
	}
	if n := h.Leftovers(t); n != 0 {
		t.Fatalf("%d leftovers of failed uploads", n)
	}
}

func putThenOpen(t *testing.T, h Harness) {
	s := h.Store
	content := []byte("FROM scratch\n")
	d := Digest(content)
	info, created, err := s.Put(t.Context(), d, bytes.NewReader(content), 1<<20)
	if err != nil || !created || info.Size != int64(len(content)) || info.Digest != d {
		t.Fatalf("Put = %+v, %v, %v", info, created, err)
	}
	r, got, err := s.Open(t.Context(), d)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(body, content) || got.Size != int64(len(content)) {
		t.Fatalf("Open gave %q, %v (%+v)", body, err, got)
	}
	if st, err := s.Stat(t.Context(), d); err != nil || st.Size != int64(len(content)) {
		t.Fatalf("Stat = %+v, %v", st, err)
	}
	if has, err := s.HasSource(t.Context(), d); !has || err != nil {
		t.Fatalf("HasSource = %v, %v", has, err)
	}
	if list, err := s.List(t.Context()); err != nil || len(list) != 1 || list[0].Digest != d || list[0].Size != int64(len(content)) {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if n, err := s.Bytes(t.Context()); err != nil || n != int64(len(content)) {
		t.Fatalf("Bytes = %d, %v; want %d", n, err, len(content))
	}
	// A second upload of the same content is not read at all.
	if _, created, err := s.Put(t.Context(), d, failingReader{t}, 1<<20); err != nil || created {
		t.Fatalf("second Put = %v, %v; want not created", created, err)
	}
	if n, _ := s.Bytes(t.Context()); n != int64(len(content)) {
		t.Fatalf("Bytes = %d after a repeated upload", n)
	}
	if n := h.Leftovers(t); n != 0 {
		t.Fatalf("%d leftovers after successful uploads", n)
	}
}

func failedUploads(t *testing.T, open func(t *testing.T) Harness) {
	small := []byte(strings.Repeat("x", 100))
	big := Random(2<<20+17, 1) // over two chunks
	tests := []struct {
		name   string
		digest string
		body   io.Reader
		limit  int64
		want   error
	}{
		{"content that does not match its digest", Digest([]byte("other")), bytes.NewReader(small), 1000, blob.ErrDigestMismatch},
		{"a large content that does not match its digest", Digest(big[1:]), bytes.NewReader(big), 4 << 20, blob.ErrDigestMismatch},
		{"content over the limit", Digest(small), bytes.NewReader(small), 99, blob.ErrTooLarge},
		{"a large content over the limit", Digest(big), bytes.NewReader(big), 2 << 20, blob.ErrTooLarge},
		{"a connection dropped mid-upload", Digest(small), &brokenReader{bytes.NewReader(small[:50])}, 1000, io.ErrUnexpectedEOF},
		{"a connection dropped after two chunks", Digest(big), &brokenReader{bytes.NewReader(big[:2<<20+1])}, 4 << 20, io.ErrUnexpectedEOF},
		{"a digest with upper-case hex", strings.ToUpper(Digest(small)), bytes.NewReader(small), 1000, blob.ErrBadDigest},
		{"a digest of another algorithm", "sha512:" + strings.Repeat("a", 64), bytes.NewReader(small), 1000, blob.ErrBadDigest},
		{"a short digest", "sha256:abc", bytes.NewReader(small), 1000, blob.ErrBadDigest},
		{"a path in the digest", "sha256:../../" + strings.Repeat("a", 58), bytes.NewReader(small), 1000, blob.ErrBadDigest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := open(t)
			if _, _, err := h.Store.Put(t.Context(), tt.digest, tt.body, tt.limit); !errors.Is(err, tt.want) {
				t.Fatalf("Put: %v, want %v", err, tt.want)
			}
			assertEmpty(t, h)
		})
	}
}

// pausingReader gives its first n bytes, then says so on paused and waits
// for release: what it reads from release ends the upload (nil: EOF).
type pausingReader struct {
	r       io.Reader
	n       int
	paused  chan struct{}
	release chan error
}

func (p *pausingReader) Read(b []byte) (int, error) {
	if p.n == 0 {
		if p.paused != nil {
			close(p.paused)
			p.paused = nil
			if err := <-p.release; err != nil {
				return 0, err
			}
		}
		return p.r.Read(b)
	}
	if len(b) > p.n {
		b = b[:p.n]
	}
	n, err := p.r.Read(b)
	p.n -= n
	return n, err
}

// An upload that has stored several chunks is not seen until it completes;
// one cancelled there leaves nothing.
func inProgressInvisible(t *testing.T, h Harness) {
	s := h.Store
	content := Random(3<<20+5, 2)
	d := Digest(content)
	for _, finish := range []string{"cancelled", "completed"} {
		t.Run(finish, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			paused := make(chan struct{}) // pr's field is the uploader's to clear
			pr := &pausingReader{r: bytes.NewReader(content), n: 2<<20 + 100, paused: paused, release: make(chan error, 1)}
			done := make(chan error, 1)
			go func() {
				_, _, err := s.Put(ctx, d, pr, 8<<20)
				done <- err
			}()
			select {
			case <-paused:
			case err := <-done:
				t.Fatalf("Put ended before its content did: %v", err)
			}
			if _, err := s.Stat(t.Context(), d); !errors.Is(err, blob.ErrNotFound) {
				t.Fatalf("Stat of an upload in progress: %v, want not found", err)
			}
			if _, _, err := s.Open(t.Context(), d); !errors.Is(err, blob.ErrNotFound) {
				t.Fatalf("Open of an upload in progress: %v, want not found", err)
			}
			if has, err := s.HasSource(t.Context(), d); has || err != nil {
				t.Fatalf("HasSource of an upload in progress = %v, %v", has, err)
			}
			if list, err := s.List(t.Context()); err != nil || len(list) != 0 {
				t.Fatalf("List during an upload = %v, %v", list, err)
			}
			if finish == "cancelled" {
				cancel()
				pr.release <- context.Canceled
				if err := <-done; err == nil {
					t.Fatal("a cancelled upload succeeded")
				}
				assertEmpty(t, h)
				return
			}
			pr.release <- nil
			if err := <-done; err != nil {
				t.Fatalf("Put: %v", err)
			}
			if got := readAll(t, s, d); !bytes.Equal(got, content) {
				t.Fatalf("read back %d bytes, not the %d uploaded", len(got), len(content))
			}
		})
	}
}

func exactLimit(t *testing.T, h Harness) {
	content := []byte(strings.Repeat("y", 64))
	if _, _, err := h.Store.Put(t.Context(), Digest(content), bytes.NewReader(content), 64); err != nil {
		t.Fatalf("Put at the limit: %v", err)
	}
	big := Random(1<<20, 3) // exactly one chunk
	if _, _, err := h.Store.Put(t.Context(), Digest(big), bytes.NewReader(big), 1<<20); err != nil {
		t.Fatalf("Put of one full chunk at the limit: %v", err)
	}
	if got := readAll(t, h.Store, Digest(big)); !bytes.Equal(got, big) {
		t.Fatal("a blob of exactly one chunk did not read back")
	}
}

func largeBlob(t *testing.T, h Harness) {
	s := h.Store
	content := Random(5<<20+123, 4)
	d := Digest(content)
	// Handed over in odd pieces, as a network body is.
	if _, created, err := s.Put(t.Context(), d, io.MultiReader(bytes.NewReader(content[:7]),
		bytes.NewReader(content[7:1<<20+3]), bytes.NewReader(content[1<<20+3:])), 6<<20); err != nil || !created {
		t.Fatalf("Put = %v, %v", created, err)
	}
	if got := readAll(t, s, d); !bytes.Equal(got, content) {
		t.Fatalf("read back %d bytes, not the %d uploaded", len(got), len(content))
	}
	r, info, err := s.Open(t.Context(), d)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if info.Size != int64(len(content)) {
		t.Fatalf("Open says %d bytes, want %d", info.Size, len(content))
	}
	if end, err := r.Seek(0, io.SeekEnd); err != nil || end != int64(len(content)) {
		t.Fatalf("Seek to the end = %d, %v", end, err)
	}
	// Ranges across chunk boundaries, as http.ServeContent reads them.
	for _, rg := range [][2]int64{{1<<20 - 10, 1<<20 + 10}, {0, 1}, {3<<20 + 1, 5<<20 + 1}, {int64(len(content)) - 5, int64(len(content))}} {
		if _, err := r.Seek(rg[0], io.SeekStart); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, rg[1]-rg[0])
		if _, err := io.ReadFull(r, got); err != nil || !bytes.Equal(got, content[rg[0]:rg[1]]) {
			t.Fatalf("range %d-%d: %v, or not the content", rg[0], rg[1], err)
		}
	}
	if n, err := r.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Fatalf("read at the end = %d, %v; want EOF", n, err)
	}
}

func concurrentUploads(t *testing.T, h Harness) {
	s := h.Store
	content := Random(2<<20+999, 5)
	d := Digest(content)
	const n = 6
	var wg sync.WaitGroup
	created := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			var info blob.Info
			info, created[i], errs[i] = s.Put(t.Context(), d, bytes.NewReader(content), 4<<20)
			if errs[i] == nil && info.Size != int64(len(content)) {
				errs[i] = errors.New("wrong size reported")
			}
		})
	}
	wg.Wait()
	nCreated := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("upload %d: %v", i, errs[i])
		}
		if created[i] {
			nCreated++
		}
	}
	if nCreated != 1 {
		t.Fatalf("%d uploads say they created the blob, want exactly 1", nCreated)
	}
	if list, err := s.List(t.Context()); err != nil || len(list) != 1 {
		t.Fatalf("List = %+v, %v; want the one blob", list, err)
	}
	if b, _ := s.Bytes(t.Context()); b != int64(len(content)) {
		t.Fatalf("Bytes = %d, want %d", b, len(content))
	}
	if got := readAll(t, s, d); !bytes.Equal(got, content) {
		t.Fatal("the blob does not read back")
	}
	if left := h.Leftovers(t); left != 0 {
		t.Fatalf("%d leftovers of the uploads that lost", left)
	}
}

func collect(t *testing.T, h Harness) {
	s := h.Store
	put := func(c string) string {
		d := Digest([]byte(c))
		if _, _, err := s.Put(t.Context(), d, strings.NewReader(c), 100); err != nil {
			t.Fatal(err)
		}
		return d
	}
	big := Random(2<<20+1, 6)
	if _, _, err := s.Put(t.Context(), Digest(big), bytes.NewReader(big), 4<<20); err != nil {
		t.Fatal(err)
	}
	referenced, old, touched := put("referenced"), put("old"), put("touched")
	h.Age(t, 50*time.Minute)
	recent := put("recent")
	if _, err := s.Touch(t.Context(), touched); err != nil {
		t.Fatal(err)
	}
	h.Age(t, 20*time.Minute) // referenced, old, big and touched-at-upload are 70 minutes old

	removed, err := s.Collect(t.Context(), []string{referenced}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, r := range removed {
		got[r.Digest] = r.Size
	}
	if len(got) != 2 || got[old] != int64(len("old")) || got[Digest(big)] != int64(len(big)) {
		t.Fatalf("removed %+v, want the old unreferenced blobs", removed)
	}
	for _, d := range []string{referenced, touched, recent} {
		if _, err := s.Stat(t.Context(), d); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
	for _, d := range []string{old, Digest(big)} {
		if _, err := s.Stat(t.Context(), d); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("Stat of a collected blob: %v", err)
		}
		if _, _, err := s.Open(t.Context(), d); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("Open of a collected blob: %v", err)
		}
	}
	if want := int64(len("referenced") + len("touched") + len("recent")); func() int64 { n, _ := s.Bytes(t.Context()); return n }() != want {
		t.Fatalf("Bytes after collection, want %d", want)
	}
	if left := h.Leftovers(t); left != 0 {
		t.Fatalf("collection left %d pieces of removed blobs", left)
	}
	// A collected blob can be uploaded again.
	if _, created, err := s.Put(t.Context(), Digest(big), bytes.NewReader(big), 4<<20); err != nil || !created {
		t.Fatalf("Put after collection = %v, %v", created, err)
	}
	if got := readAll(t, s, Digest(big)); !bytes.Equal(got, big) {
		t.Fatal("a blob uploaded again does not read back")
	}
}

func missing(t *testing.T, h Harness) {
	s := h.Store
	d := Digest([]byte("nothing"))
	if _, err := s.Stat(t.Context(), d); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("Stat: %v", err)
	}
	if _, err := s.Touch(t.Context(), d); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("Touch: %v", err)
	}
	if _, _, err := s.Open(t.Context(), d); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("Open: %v", err)
	}
	if has, err := s.HasSource(t.Context(), d); has || err != nil {
		t.Errorf("HasSource = %v, %v", has, err)
	}
	for _, bad := range []string{"md5:x", "sha256:" + strings.Repeat("A", 64)} {
		if _, err := s.HasSource(t.Context(), bad); !errors.Is(err, blob.ErrBadDigest) {
			t.Errorf("HasSource of %q: %v", bad, err)
		}
		if _, _, err := s.Open(t.Context(), bad); !errors.Is(err, blob.ErrBadDigest) {
			t.Errorf("Open of %q: %v", bad, err)
		}
		if _, err := s.Touch(t.Context(), bad); !errors.Is(err, blob.ErrBadDigest) {
			t.Errorf("Touch of %q: %v", bad, err)
		}
	}
}
