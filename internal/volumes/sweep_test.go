package volumes

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/backup"
	"github.com/hatchery/hatchery/internal/backup/s3store"
	"github.com/hatchery/hatchery/internal/blob"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/store/sqlite"
	"github.com/hatchery/hatchery/internal/testutil/s3test"
)

// s3Harness is a harness whose backup store is a bucket of a real
// SeaweedFS (skipped without bin/weed).
func s3Harness(t *testing.T) (*harness, *s3store.Store) {
	t.Helper()
	srv := s3test.Start(t)
	bucket, err := s3store.New(s3store.Config{URL: "s3://" + srv.Bucket + "/sweep", Endpoint: srv.Endpoint,
		Credentials: s3store.Credentials{AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "hatch.db"), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b, err := blob.Open(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	h := harnessOn(t, st, b, "srv-a")
	h.svc.deps.Store = bucket
	return h, bucket
}

func chunkIDs(t *testing.T, b *s3store.Store) []string {
	t.Helper()
	list, err := b.ListChunks(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range list {
		ids = append(ids, c.ID)
	}
	slices.Sort(ids)
	return ids
}

// Forgetting a backup in a bucket deletes its manifest; the sweep deletes
// the chunks only it listed once past the grace, never those of a kept
// backup nor, while a backup is in progress, any written since it began;
// the kept backup still restores byte for byte.
func TestForgetAndSweepABucket(t *testing.T) {
	h, bucket := s3Harness(t)
	ctx := t.Context()
	vol := backup.VolumeID{Namespace: "default", Project: "shop", Volume: "data"}
	key, err := backup.DeriveVolumeKey(h.key, vol)
	if err != nil {
		t.Fatal(err)
	}
	shared := make([]byte, 2<<20)
	rand.Read(shared)
	onlyA := make([]byte, 2<<20)
	rand.Read(onlyA)
	streamA := append(slices.Clone(shared), onlyA...)
	streamB := append(slices.Clone(shared), bytes.Repeat([]byte("b"), 100_000)...)
	mA, _, err := backup.Backup(ctx, bytes.NewReader(streamA), key, bucket, h.clock.now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	mB, _, err := backup.Backup(ctx, bytes.NewReader(streamB), key, bucket, h.clock.now())
	if err != nil {
		t.Fatal(err)
	}
	orphan := []byte("a chunk of a backup that failed")
	sum := sha256.Sum256(orphan)
	if err := bucket.Put(ctx, hex.EncodeToString(sum[:]), orphan); err != nil {
		t.Fatal(err)
	}
	before := chunkIDs(t, bucket)

	list, err := h.svc.List(ctx, project, "data")
	if err != nil || len(list) != 2 || list[0].Manifest != mB.ID || list[1].Manifest != mA.ID || !list[0].FromStore {
		t.Fatalf("List = %+v, %v; want backups %s and %s from the store", list, err, short(mB.ID), short(mA.ID))
	}
	if _, err := h.svc.Forget(ctx, project, mA.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	if ids, _ := bucket.ListManifests(ctx); !slices.Equal(ids, []string{mB.ID}) {
		t.Fatalf("manifests in the bucket after forgetting %s: %v, want only %s", short(mA.ID), ids, short(mB.ID))
	}
	if list, _ := h.svc.List(ctx, project, "data"); len(list) != 1 || list[0].Manifest != mB.ID {
		t.Fatalf("List after forget = %+v, want only %s", list, short(mB.ID))
	}

	// Within the grace, nothing goes.
	if n, err := h.svc.Sweep(ctx, time.Hour); err != nil || n != 0 {
		t.Fatalf("sweep within the grace deleted %d chunks (%v), want 0", n, err)
	}
	// A backup in progress that began before the chunks were written
	// keeps them all, however late the sweep.
	open := store.VolumeTask{ID: newID(), Kind: string(contract.TaskBackup), Project: project, Volume: "data", Host: "h1",
		Trigger: api.TriggerManual, CreatedAt: h.clock.now(), State: store.TaskPending}
	if err := h.st.CreateVolumeTask(ctx, open, nil); err != nil {
		t.Fatal(err)
	}
	h.clock.advance(3 * time.Hour)
	if n, err := h.svc.Sweep(ctx, time.Hour); err != nil || n != 0 {
		t.Fatalf("sweep during a backup in progress deleted %d chunks (%v), want 0", n, err)
	}
	if err := h.st.ReleaseVolumeTask(ctx, open.ID, h.clock.now()); err != nil {
		t.Fatal(err)
	}
	n, err := h.svc.Sweep(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	after := chunkIDs(t, bucket)
	var want []string
	for _, c := range mB.Chunks {
		want = append(want, c.ID)
	}
	slices.Sort(want)
	want = slices.Compact(want)
	if !slices.Equal(after, want) {
		t.Fatalf("chunks after the sweep: %d, want exactly the kept backup's %d", len(after), len(want))
	}
	t.Logf("sweep deleted %d of %d chunks; %d kept", n, len(before), len(after))
	if n != len(before)-len(after) || n < 2 {
		t.Fatalf("sweep says %d deleted, the bucket lost %d (want at least A's own chunk and the orphan)", n, len(before)-len(after))
	}

	// The kept backup restores, from a new service reading the bucket.
	var out bytes.Buffer
	m, err := backup.OpenManifest(ctx, bucket, mB.ID, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := backup.Restore(ctx, m, key, bucket, &out, t.TempDir()); err != nil || !bytes.Equal(out.Bytes(), streamB) {
		t.Fatalf("restore of the kept backup after the sweep: %v (same bytes: %v)", err, bytes.Equal(out.Bytes(), streamB))
	}
}

// A manifest that does not open with the cluster's key stops the sweep:
// another cluster's chunks under the same prefix are not deleted.
func TestSweepStopsOnAManifestItCannotOpen(t *testing.T) {
	h, bucket := s3Harness(t)
	ctx := t.Context()
	other := bytes.Repeat([]byte{7}, backup.KeySize)
	key, err := backup.DeriveVolumeKey(other, backup.VolumeID{Namespace: "default", Project: "shop", Volume: "data"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := backup.Backup(ctx, bytes.NewReader(bytes.Repeat([]byte("x"), 300_000)), key, bucket, h.clock.now()); err != nil {
		t.Fatal(err)
	}
	before := chunkIDs(t, bucket)
	h.clock.advance(3 * time.Hour)
	if n, err := h.svc.Sweep(ctx, time.Hour); err == nil || n != 0 {
		t.Fatalf("sweep with a foreign manifest: %d deleted, %v; want an error and none", n, err)
	}
	if after := chunkIDs(t, bucket); !slices.Equal(after, before) {
		t.Fatalf("chunks %d → %d after a refused sweep", len(before), len(after))
	}
}
