package backup_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"
	"time"

	"pgregory.net/rapid"

	"github.com/hatchery/hatchery/internal/backup"
	"github.com/hatchery/hatchery/internal/backup/backuptest"
)

var (
	clusterKey = bytes.Repeat([]byte{7}, backup.KeySize)
	dataVolume = backup.VolumeID{Namespace: "default", Project: "shop", Volume: "data"}
	created    = time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC)
)

func volumeKey(t testing.TB, cluster []byte, v backup.VolumeID) backup.VolumeKey {
	t.Helper()
	k, err := backup.DeriveVolumeKey(cluster, v)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// volume is a synthetic volume's tar stream: files files of size bytes each,
// pseudo-random content from seed; a file in rewritten has the content of
// that version instead.
type volume struct {
	seed      uint64
	files     int
	size      int
	rewritten map[int]uint64
}

// reader streams the volume's tar, never holding more than one file.
func (v volume) reader() io.Reader {
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		buf := make([]byte, v.size)
		for i := range v.files {
			_, _ = rand.NewChaCha8(seed32(v.seed, uint64(i), v.rewritten[i])).Read(buf)
			hdr := &tar.Header{Name: fmt.Sprintf("data/%04d.bin", i), Mode: 0o644, Size: int64(v.size), ModTime: created}
			if err := tw.WriteHeader(hdr); err != nil {
				pw.CloseWithError(err)
				return
			}
			if _, err := tw.Write(buf); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(tw.Close())
	}()
	return pr
}

func seed32(parts ...uint64) [32]byte {
	var s [32]byte
	for i, p := range parts {
		for b := range 8 {
			s[i*8+b] = byte(p >> (8 * b))
		}
	}
	return s
}

// rewrite returns v with n files, chosen at random, rewritten.
func (v volume) rewrite(n int, seed uint64) volume {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := v
	out.rewritten = map[int]uint64{}
	for _, i := range rng.Perm(v.files)[:n] {
		out.rewritten[i] = 1
	}
	return out
}

func backupBytes(t *testing.T, data []byte, key backup.VolumeKey, store backup.Store) (backup.Manifest, backup.Stats) {
	t.Helper()
	m, st, err := backup.Backup(t.Context(), bytes.NewReader(data), key, store, created)
	if err != nil {
		t.Fatalf("Backup: %v", err)
	}
	return m, st
}

func restoreBytes(t *testing.T, m backup.Manifest, key backup.VolumeKey, store backup.ChunkStore) ([]byte, error) {
	t.Helper()
	var out bytes.Buffer
	err := backup.Restore(t.Context(), m, key, store, &out, t.TempDir())
	return out.Bytes(), err
}

func TestRestoreGivesBackWhatWasBackedUp(t *testing.T) {
	key := volumeKey(t, clusterKey, dataVolume)
	rapid.Check(t, func(rt *rapid.T) {
		// Files of random sizes, some repeating another's content (so
		// chunks repeat within one stream), some compressible.
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		var contents [][]byte
		for i := range rapid.IntRange(0, 8).Draw(rt, "files") {
			var data []byte
			switch rapid.IntRange(0, 2).Draw(rt, "kind") {
			case 0:
				data = make([]byte, rapid.IntRange(0, 200<<10).Draw(rt, "size"))
				rand.NewChaCha8(seed32(uint64(i), rapid.Uint64().Draw(rt, "seed"))).Read(data)
			case 1:
				data = bytes.Repeat([]byte(rapid.StringN(1, 20, -1).Draw(rt, "text")), rapid.IntRange(0, 20000).Draw(rt, "repeat"))
			case 2:
				if len(contents) > 0 {
					data = contents[rapid.IntRange(0, len(contents)-1).Draw(rt, "copy")]
				}
			}
			contents = append(contents, data)
			if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprint(i), Mode: 0o600, Size: int64(len(data))}); err != nil {
				rt.Fatal(err)
			}
			tw.Write(data)
		}
		tw.Close()
		store := backuptest.NewMem()
		m, st, err := backup.Backup(t.Context(), bytes.NewReader(buf.Bytes()), key, store, created)
		if err != nil {
			rt.Fatalf("Backup: %v", err)
		}
		if st.Bytes != int64(buf.Len()) || m.Size != int64(buf.Len()) {
			rt.Fatalf("backed up %d bytes (manifest %d), the stream has %d", st.Bytes, m.Size, buf.Len())
		}
		opened, err := backup.OpenManifest(t.Context(), store, m.ID, key)
		if err != nil {
			rt.Fatalf("OpenManifest: %v", err)
		}
		var out bytes.Buffer
		if err := backup.Restore(t.Context(), opened, key, store, &out, t.TempDir()); err != nil {
			rt.Fatalf("Restore: %v", err)
		}
		if !bytes.Equal(out.Bytes(), buf.Bytes()) {
			rt.Fatalf("restored %d bytes differ from the %d backed up", out.Len(), buf.Len())
		}
	})
}

func TestTheSameContentTwiceStoresNoNewChunk(t *testing.T) {
	key := volumeKey(t, clusterKey, dataVolume)
	data, _ := io.ReadAll(volume{seed: 1, files: 40, size: 50 << 10}.reader())
	store := backuptest.NewMem()
	first, st1 := backupBytes(t, data, key, store)
	if st1.NewChunks != st1.Chunks || st1.Chunks < 5 {
		t.Fatalf("first backup: %d new of %d chunks, want all of several", st1.NewChunks, st1.Chunks)
	}
	puts := store.Puts
	second, st2 := backupBytes(t, data, key, store)
	if st2.NewChunks != 0 || store.Puts != puts {
		t.Errorf("second backup of the same content sent %d chunks (%d puts)", st2.NewChunks, store.Puts-puts)
	}
	if first.ID != second.ID {
		t.Errorf("the same content at the same time gave manifests %s and %s", first.ID, second.ID)
	}
	if st2.StoredBytes != st1.StoredBytes || st2.SentBytes >= st1.SentBytes/100 {
		t.Errorf("second backup: stored %d (first %d), sent %d", st2.StoredBytes, st1.StoredBytes, st2.SentBytes)
	}
}

func TestOtherVolumesSealTheSameContentDifferently(t *testing.T) {
	data, _ := io.ReadAll(volume{seed: 2, files: 10, size: 50 << 10}.reader())
	store := backuptest.NewMem()
	m1, _ := backupBytes(t, data, volumeKey(t, clusterKey, dataVolume), store)
	other := dataVolume
	other.Volume = "cache"
	_, st := backupBytes(t, data, volumeKey(t, clusterKey, other), store)
	if st.NewChunks != st.Chunks {
		t.Errorf("another volume's backup of the same content reused %d of %d chunks of the first (%d)", st.Chunks-st.NewChunks, st.Chunks, len(m1.Chunks))
	}
}

func TestVolumeKeysDifferAndAreStable(t *testing.T) {
	secret := func(cluster []byte, v backup.VolumeID) string { return string(volumeKey(t, cluster, v).Secret()) }
	base := secret(clusterKey, dataVolume)
	if base != secret(clusterKey, dataVolume) {
		t.Error("the same volume's key differs between two derivations")
	}
	others := []backup.VolumeID{
		{Namespace: "staging", Project: "shop", Volume: "data"},
		{Namespace: "default", Project: "shop2", Volume: "data"},
		{Namespace: "default", Project: "shop", Volume: "data2"},
		// length prefixes: moving a character between parts is another volume
		{Namespace: "default", Project: "sho", Volume: "pdata"},
	}
	seen := map[string]backup.VolumeID{base: dataVolume}
	for _, v := range others {
		s := secret(clusterKey, v)
		if prev, ok := seen[s]; ok {
			t.Errorf("%s and %s have the same key", v, prev)
		}
		seen[s] = v
	}
	if secret(bytes.Repeat([]byte{8}, backup.KeySize), dataVolume) == base {
		t.Error("two cluster keys give one volume the same key")
	}
	// A fixed vector: changing the derivation would orphan every backup.
	if got := fmt.Sprintf("%x", base[:8]); got != "d8970beb7ce477df" {
		t.Errorf("the derivation changed: key starts %s", got)
	}
	handed, err := backup.NewVolumeKey(dataVolume, volumeKey(t, clusterKey, dataVolume).Secret())
	if err != nil || string(handed.Secret()) != base || handed.Volume() != dataVolume {
		t.Errorf("a key handed over as its secret differs: %v", err)
	}
	if _, _, err := backup.Backup(t.Context(), bytes.NewReader(nil), backup.VolumeKey{}, backuptest.NewMem(), created); err == nil {
		t.Error("a zero VolumeKey was accepted")
	}
	if _, err := backup.DeriveVolumeKey(clusterKey[:16], dataVolume); err == nil {
		t.Error("a 16-byte cluster key was accepted")
	}
	if _, err := backup.DeriveVolumeKey(clusterKey, backup.VolumeID{Namespace: "default", Project: "shop"}); err == nil {
		t.Error("a volume ID without a volume was accepted")
	}
}

// failingRestore backs up a small volume, lets damage change the store, and
// returns the restore's error, checking it wrote nothing.
func failingRestore(t *testing.T, damage func(m backup.Manifest, store *backuptest.Mem), key backup.VolumeKey) (backup.Manifest, error) {
	t.Helper()
	data, _ := io.ReadAll(volume{seed: 3, files: 12, size: 50 << 10}.reader())
	store := backuptest.NewMem()
	m, _ := backupBytes(t, data, volumeKey(t, clusterKey, dataVolume), store)
	damage(m, store)
	out, err := restoreBytes(t, m, key, store)
	if err == nil {
		t.Fatal("the restore succeeded")
	}
	if len(out) != 0 {
		t.Errorf("the failed restore wrote %d bytes", len(out))
	}
	return m, err
}

func TestARestoreFailsNamingTheChunkAndWritesNothing(t *testing.T) {
	key := volumeKey(t, clusterKey, dataVolume)
	for _, tc := range []struct {
		name   string
		damage func([]byte) []byte
		want   error
	}{
		{"when a chunk is missing", func([]byte) []byte { return nil }, backup.ErrNotFound},
		{"when a chunk has a flipped bit", func(b []byte) []byte { b[len(b)/2] ^= 1; return b }, backup.ErrCorrupt},
		{"when a chunk is cut short", func(b []byte) []byte { return b[:len(b)-1] }, backup.ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var bad string
			m, err := failingRestore(t, func(m backup.Manifest, store *backuptest.Mem) {
				bad = m.Chunks[len(m.Chunks)-2].ID
				data, _ := store.Get(t.Context(), bad)
				store.Set(bad, tc.damage(data))
			}, key)
			var ce *backup.ChunkError
			if !errors.As(err, &ce) || ce.Chunk != bad || ce.Backup != m.ID || !errors.Is(err, tc.want) {
				t.Fatalf("error %v; want a ChunkError naming backup %s and chunk %s, wrapping %v", err, m.ID, bad, tc.want)
			}
			t.Log(err)
		})
	}
	t.Run("when a chunk is another chunk of the backup, resealed as its ID's hash", func(t *testing.T) {
		// A store that answers one stored chunk for another fails the ID
		// check: the content does not hash to the ID asked for.
		_, err := failingRestore(t, func(m backup.Manifest, store *backuptest.Mem) {
			other, _ := store.Get(t.Context(), m.Chunks[0].ID)
			store.Set(m.Chunks[1].ID, other)
		}, key)
		if !errors.Is(err, backup.ErrCorrupt) {
			t.Fatalf("error %v, want ErrCorrupt", err)
		}
	})
	t.Run("with the key of another cluster", func(t *testing.T) {
		_, err := failingRestore(t, func(backup.Manifest, *backuptest.Mem) {}, volumeKey(t, bytes.Repeat([]byte{9}, backup.KeySize), dataVolume))
		var ce *backup.ChunkError
		if !errors.As(err, &ce) || !errors.Is(err, backup.ErrCorrupt) {
			t.Fatalf("error %v, want a ChunkError wrapping ErrCorrupt", err)
		}
	})
	t.Run("with the key of another volume", func(t *testing.T) {
		other := dataVolume
		other.Volume = "cache"
		_, err := failingRestore(t, func(backup.Manifest, *backuptest.Mem) {}, volumeKey(t, clusterKey, other))
		if !errors.Is(err, backup.ErrWrongVolume) {
			t.Fatalf("error %v, want ErrWrongVolume", err)
		}
	})
}

func TestAManifestOpensOnlyWithItsVolumesKey(t *testing.T) {
	data, _ := io.ReadAll(volume{seed: 4, files: 3, size: 10 << 10}.reader())
	store := backuptest.NewMem()
	m, _ := backupBytes(t, data, volumeKey(t, clusterKey, dataVolume), store)
	other := dataVolume
	other.Project = "blog"
	if _, err := backup.OpenManifest(t.Context(), store, m.ID, volumeKey(t, clusterKey, other)); !errors.Is(err, backup.ErrWrongVolume) {
		t.Errorf("another volume's key: %v, want ErrWrongVolume", err)
	}
	if _, err := backup.OpenManifest(t.Context(), store, m.ID, volumeKey(t, bytes.Repeat([]byte{9}, backup.KeySize), dataVolume)); !errors.Is(err, backup.ErrCorrupt) {
		t.Errorf("another cluster's key: %v, want ErrCorrupt", err)
	}
	object, _ := store.GetManifest(t.Context(), m.ID)
	object[len(object)-1] ^= 1
	store.Set(m.ID, object)
	if _, err := backup.OpenManifest(t.Context(), store, m.ID, volumeKey(t, clusterKey, dataVolume)); !errors.Is(err, backup.ErrCorrupt) {
		t.Errorf("a damaged manifest: %v, want ErrCorrupt", err)
	}
}

func TestTheClusterKeyAloneListsEveryBackup(t *testing.T) {
	store := backuptest.NewMem()
	other := backup.VolumeID{Namespace: "default", Project: "blog", Volume: "db"}
	var ids []string
	for i, v := range []backup.VolumeID{dataVolume, other, dataVolume} {
		data, _ := io.ReadAll(volume{seed: uint64(i), files: 5, size: 20 << 10}.reader())
		m, _, err := backup.Backup(t.Context(), bytes.NewReader(data), volumeKey(t, clusterKey, v), store, created.Add(time.Duration(i)*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	// A damaged manifest is named, and hides no other.
	damaged := ids[1]
	object, _ := store.GetManifest(t.Context(), damaged)
	object[len(object)-1] ^= 1
	store.Set(damaged, object)

	list, err := backup.ListBackups(t.Context(), store, clusterKey)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte(damaged)) {
		t.Errorf("error %v, want one naming the damaged backup %s", err, damaged)
	}
	if len(list) != 2 || list[0].ID != ids[0] || list[1].ID != ids[2] {
		t.Fatalf("listed %d backups, want the two undamaged, oldest first", len(list))
	}
	for _, m := range list {
		if _, err := restoreBytes(t, m, volumeKey(t, clusterKey, m.Volume), store); err != nil {
			t.Errorf("restore %s: %v", m.ID, err)
		}
	}
}

// incrementalRatio backs up v, then v with a hundredth of its files
// rewritten, and returns the bytes the second sent over the first's.
func incrementalRatio(tb testing.TB, v volume) float64 {
	key := volumeKey(tb, clusterKey, dataVolume)
	store := backuptest.NewMem()
	ctx := tb.Context()
	_, first, err := backup.Backup(ctx, v.reader(), key, store, created)
	if err != nil {
		tb.Fatal(err)
	}
	_, second, err := backup.Backup(ctx, v.rewrite(v.files/100, 42).reader(), key, store, created.Add(time.Hour))
	if err != nil {
		tb.Fatal(err)
	}
	ratio := float64(second.SentBytes) / float64(first.SentBytes)
	tb.Logf("%d files of %d KiB, %d rewritten: the first backup sent %d bytes in %d chunks, the second %d bytes in %d chunks: %.2f %%",
		v.files, v.size>>10, v.files/100, first.SentBytes, first.Chunks, second.SentBytes, second.NewChunks, 100*ratio)
	return ratio
}

// The bound at a fifth of its size (400 files of 100 KiB, 4
// rewritten: the same share of files, the same file size); 200 MB is
// BenchmarkIncremental's.
func TestIncrementalBackupSendsLittle(t *testing.T) {
	if r := incrementalRatio(t, volume{seed: 5, files: 400, size: 100 << 10}); r > 0.05 {
		t.Errorf("the second backup sent %.2f %% of the first's bytes, the bound is 5 %%", 100*r)
	}
}

func TestTheInMemoryStoreKeepsTheStoreContract(t *testing.T) {
	backuptest.Conformance(t, backuptest.NewMem())
}

// A stream that breaks off (a dead agent, a failed archive read) leaves no
// manifest: nothing is listed as a backup.
func TestABrokenStreamLeavesNoBackup(t *testing.T) {
	store := backuptest.NewMem()
	broken := io.MultiReader(io.LimitReader(volume{seed: 10, files: 20, size: 100 << 10}.reader(), 1<<20), iotest.ErrReader(errBroken))
	_, _, err := backup.Backup(t.Context(), broken, volumeKey(t, clusterKey, dataVolume), store, created)
	if err == nil || !errors.Is(err, errBroken) {
		t.Fatalf("Backup of a broken stream: %v, want the read error", err)
	}
	if ids, _ := store.ListManifests(t.Context()); len(ids) != 0 {
		t.Errorf("the failed backup left %d manifests", len(ids))
	}
}

var errBroken = errors.New("the archive read broke off")
