//go:build docker

package agent

import (
	"archive/tar"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"path"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/backup"
	"github.com/hatchery/hatchery/internal/backup/backuptest"
	"github.com/hatchery/hatchery/internal/contract"
)

// The figures of issue 30 at the agent's level: volumes of hundreds of MB
// written through the archive API, backed up and restored by the agent's
// own taskRunner (helper container, CopyFromContainer, backup.Backup) into
// backuptest's in-memory store. Its helpers on volumeEnv (which benchmarks
// use too) stream a volume's content instead of holding it: a 1 GB volume
// must not sit in the benchmark's memory.

// genFile is a file of a generated volume: its content is a function of
// seed, random bytes or, if compressible, text of 16 letters (which
// compresses to about half).
type genFile struct {
	name         string
	size         int64
	seed         uint64
	compressible bool
}

// content writes the file's content to w in blocks of 64 KiB.
func (g genFile) content(w io.Writer) error {
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], g.seed)
	rng := mrand.NewChaCha8(seed)
	buf := make([]byte, 64<<10)
	for left := g.size; left > 0; {
		n := int(min(left, int64(len(buf))))
		block := buf[:n]
		_, _ = rng.Read(block)
		if g.compressible {
			for i, b := range block {
				block[i] = "abcdefghijklmnop"[b&15]
				if i%64 == 63 {
					block[i] = '\n'
				}
			}
		}
		if _, err := w.Write(block); err != nil {
			return err
		}
		left -= int64(n)
	}
	return nil
}

// write streams files (names relative to the volume's root, in order, each
// directory's files together) into vol through the archive API, as a tar
// made on the fly: the directories' entries first, then the files.
func (f *volumeEnv) write(vol string, files []genFile) {
	f.t.Helper()
	ctx := f.t.Context()
	c, err := f.s.Client.ContainerCreate(ctx, &container.Config{Image: f.image, Labels: f.s.Labels(nil)},
		&container.HostConfig{Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: vol, Target: "/data"}}}, nil, nil, "")
	if err != nil {
		f.t.Fatal(err)
	}
	defer f.s.Client.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	pr, pw := io.Pipe()
	var wg sync.WaitGroup
	wg.Go(func() {
		tw := tar.NewWriter(pw)
		seen := map[string]bool{}
		now := time.Now()
		err := func() error {
			for _, g := range files {
				if dir := path.Dir(g.name); dir != "." && !seen[dir] {
					seen[dir] = true
					if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755, ModTime: now}); err != nil {
						return err
					}
				}
				if err := tw.WriteHeader(&tar.Header{Name: g.name, Mode: 0o644, Size: g.size, ModTime: now, Uid: 1000, Gid: 1000}); err != nil {
					return err
				}
				if err := g.content(tw); err != nil {
					return err
				}
			}
			return tw.Close()
		}()
		pw.CloseWithError(err)
	})
	err = f.s.Client.CopyToContainer(ctx, c.ID, "/data", pr, container.CopyToContainerOptions{})
	pr.CloseWithError(io.ErrClosedPipe) // ends the writer if Docker stopped reading early
	wg.Wait()
	if err != nil {
		f.t.Fatalf("write %d files into volume %s: %v", len(files), vol, err)
	}
}

// runTask runs one task through a taskRunner of this adapter on store and
// returns its final status.
func (f *volumeEnv) runTask(store backup.Store, task contract.VolumeTask) contract.VolumeTaskStatus {
	f.t.Helper()
	var mu sync.Mutex
	var st contract.VolumeTaskStatus
	r := &taskRunner{docker: f.e, store: store, image: f.image, spillDir: f.t.TempDir(), now: time.Now,
		pollEvery: 100 * time.Millisecond, log: zaptest.NewLogger(f.t, zaptest.Level(zap.WarnLevel)),
		set: func(fn func(*contract.VolumeTaskStatus)) { mu.Lock(); fn(&st); mu.Unlock() }}
	err := r.run(f.t.Context(), task)
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		f.t.Fatalf("%s task on volume %s: %v (status %+v)", task.Kind, task.Volume.DockerName, err, st)
	}
	return st
}

// figKey is a random volume key.
func figKey() contract.SecretValue {
	b := make([]byte, backup.KeySize)
	_, _ = crand.Read(b)
	return contract.SecretValue(hex.EncodeToString(b))
}

// The size for the incremental bound: 200 MB in 2,000 files of
// 100 KB, 20 of them rewritten.
const (
	incrementalFiles     = 2000
	incrementalFileSize  = 100 << 10
	incrementalRewritten = 20
)

// incrementalFigure backs up a volume of 2,000 random files of 100 KB
// through the agent, rewrites 20 of them (one at random in each twentieth of
// the volume, so they are spread over it) with new random content, backs it
// up again into the same store, and returns both backups' statuses.
func incrementalFigure(tb testing.TB, f *volumeEnv) (first, second contract.VolumeTaskStatus) {
	tb.Helper()
	vol := f.volume("incremental")
	files := make([]genFile, incrementalFiles)
	for i := range files {
		files[i] = genFile{name: fmt.Sprintf("d%02d/f%04d.bin", i/200, i), size: incrementalFileSize, seed: uint64(i)}
	}
	f.write(vol, files)
	store := backuptest.NewMem()
	task := backupTask(vol, figKey())
	task.Egg = "" // no hooks
	first = f.runTask(store, task)

	rng := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 30))
	stride := incrementalFiles / incrementalRewritten
	var rewritten []genFile
	for k := range incrementalRewritten {
		g := files[k*stride+rng.IntN(stride)]
		g.seed = 1<<32 + rng.Uint64()>>1
		rewritten = append(rewritten, g)
	}
	f.write(vol, rewritten)
	task.ID = "b2"
	second = f.runTask(store, task)
	tb.Logf("%d files of %d KiB, %d rewritten: the first backup sent %d bytes in %d chunks, the second %d bytes in %d new chunks: %.2f %%",
		incrementalFiles, incrementalFileSize>>10, incrementalRewritten, first.SentBytes, first.Chunks,
		second.SentBytes, second.NewChunks, 100*float64(second.SentBytes)/float64(first.SentBytes))
	return first, second
}

// The bound on the agent's real copy path: rewriting 1 % of a
// 200 MB volume's files re-sends at most 5 % of the first backup's bytes.
func TestDockerAnIncrementalBackupOfTheAgentSendsAtMostFivePercent(t *testing.T) {
	start := time.Now()
	f := newVolumeEnv(t)
	first, second := incrementalFigure(t, f)
	if first.Bytes < incrementalFiles*incrementalFileSize || first.SentBytes < incrementalFiles*incrementalFileSize {
		t.Fatalf("the first backup read %d bytes and sent %d: want the whole volume, at least %d", first.Bytes, first.SentBytes, incrementalFiles*incrementalFileSize)
	}
	// Random content does not compress: the rewritten files alone are
	// this many bytes sent, which proves the rewrite reached the volume.
	if floor := int64(incrementalRewritten * incrementalFileSize); second.SentBytes < floor || second.NewChunks < incrementalRewritten {
		t.Fatalf("the second backup sent %d bytes in %d new chunks: want at least the %d rewritten files' %d bytes", second.SentBytes, second.NewChunks, incrementalRewritten, floor)
	}
	if ratio := float64(second.SentBytes) / float64(first.SentBytes); ratio > 0.05 {
		t.Errorf("the second backup sent %.2f %% of the first's bytes (%d of %d), the bound is 5 %%", 100*ratio, second.SentBytes, first.SentBytes)
	}
	t.Logf("took %s", time.Since(start).Round(100*time.Millisecond))
}
