//go:build docker

package agent

import (
	"context"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/backup/backuptest"
	"github.com/hatchery/hatchery/internal/contract"
)

// The agent's figures for issue 30 on the real Docker Engine (make bench):
// each against a baseline measured in the same run, never an absolute time.
// Run once each (-benchtime 1x): a volume of hundreds of MB is the unit.

// mixedFiles returns files of about total bytes, their sizes spread from
// 1 KiB to 4 MiB (log-uniform: many small files, most bytes in large ones),
// half the bytes compressible text and half random, in 16 directories.
func mixedFiles(total int64, seed uint64) []genFile {
	rng := mrand.New(mrand.NewPCG(seed, 30))
	var files []genFile
	var compressible, random int64
	for sum := int64(0); sum < total; {
		size := min(int64(1<<(10+rng.IntN(13)))+rng.Int64N(1<<10), total-sum)
		g := genFile{name: fmt.Sprintf("dir%02d/file%05d", len(files)%16, len(files)), size: size, seed: rng.Uint64(), compressible: compressible < random}
		if g.compressible {
			compressible += size
		} else {
			random += size
		}
		files = append(files, g)
		sum += size
	}
	// The writer wants each directory's files together.
	byDir := make([][]genFile, 16)
	for i, g := range files {
		byDir[i%16] = append(byDir[i%16], g)
	}
	files = files[:0]
	for _, d := range byDir {
		files = append(files, d...)
	}
	return files
}

// timed runs fn and returns how long it took, failing tb on its error.
func timed(tb testing.TB, fn func() error) time.Duration {
	tb.Helper()
	start := time.Now()
	if err := fn(); err != nil {
		tb.Fatal(err)
	}
	return time.Since(start)
}

func mbps(n int64, d time.Duration) float64 { return float64(n) / (1 << 20) / d.Seconds() }

// BenchmarkVolumeThroughput: the agent's backup of a 256 MB volume of mixed
// files (half compressible) against a plain read of the same volume's tar
// stream through the same archive API (goal: a ratio of at least 0.5), and
// its restore into a fresh volume against a plain archive PUT of the same
// tar stream. A ratio is the baseline's time over the agent's (1 is as fast
// as the plain copy).
func BenchmarkVolumeThroughput(b *testing.B) {
	f := newVolumeEnv(b)
	vol := f.volume("mixed")
	f.write(vol, mixedFiles(256<<20, 9))
	ctx := b.Context()
	// The tar stream as the archive API gives it, for the plain PUT; the
	// read also warms the page cache for both reads measured.
	saved := filepath.Join(b.TempDir(), "volume.tar")
	err := f.e.ReadVolume(ctx, f.image, vol, func(r io.Reader) error {
		out, err := os.Create(saved)
		if err != nil {
			return err
		}
		defer out.Close()
		_, err = io.Copy(out, r)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	task := backupTask(vol, figKey())
	task.Egg = ""
	for b.Loop() {
		// The four are measured in turn, throughputRounds times, and each
		// keeps its fastest: the machine's other load slows a round at
		// random, and the agent's side (which needs more CPU than the
		// plain copy) more than the baseline.
		var read int64
		var readTime, backupTime, putTime, restoreTime time.Duration
		var backupCPU, restoreCPU time.Duration
		for round := range throughputRounds {
			readTime = fastest(readTime, timed(b, func() error {
				return f.e.ReadVolume(ctx, f.image, vol, func(r io.Reader) (err error) {
					read, err = io.Copy(io.Discard, r)
					return err
				})
			}))
			store := backuptest.NewMem()
			var st contract.VolumeTaskStatus
			cpu := processCPU()
			backupTime = fastest(backupTime, timed(b, func() error {
				task.ID = fmt.Sprintf("b%d", round)
				st = f.runTask(store, task)
				return nil
			}))
			backupCPU = fastest(backupCPU, processCPU()-cpu)
			if st.Bytes != read {
				b.Fatalf("the backup read %d bytes of the stream, the plain read %d", st.Bytes, read)
			}
			plain := f.volume(fmt.Sprintf("plain%d", round))
			putTime = fastest(putTime, timed(b, func() error {
				tarStream, err := os.Open(saved)
				if err != nil {
					return err
				}
				defer tarStream.Close()
				return f.e.WriteVolume(ctx, f.image, plain, tarStream)
			}))
			cpu = processCPU()
			restoreTime = fastest(restoreTime, timed(b, func() error {
				f.runTask(store, restoreTask(task, st.Manifest, f.s.Name(fmt.Sprintf("restored%d", round))))
				return nil
			}))
			restoreCPU = fastest(restoreCPU, processCPU()-cpu)
		}
		b.ReportMetric(mbps(read, readTime), "read-MB/s")
		b.ReportMetric(mbps(read, backupTime), "backup-MB/s")
		b.ReportMetric(readTime.Seconds()/backupTime.Seconds(), "backup/read")
		b.ReportMetric(backupCPU.Seconds()/(float64(read)/(1<<30)), "backup-CPU-s/GB")
		b.ReportMetric(mbps(read, putTime), "put-MB/s")
		b.ReportMetric(mbps(read, restoreTime), "restore-MB/s")
		b.ReportMetric(putTime.Seconds()/restoreTime.Seconds(), "restore/put")
		b.ReportMetric(restoreCPU.Seconds()/(float64(read)/(1<<30)), "restore-CPU-s/GB")
		b.Logf("%d MB tar stream, fastest of %d rounds: read %s, backup %s (this process's CPU %s), plain PUT %s, restore %s (CPU %s)",
			read>>20, throughputRounds, readTime.Round(time.Millisecond), backupTime.Round(time.Millisecond), backupCPU.Round(time.Millisecond),
			putTime.Round(time.Millisecond), restoreTime.Round(time.Millisecond), restoreCPU.Round(time.Millisecond))
	}
	b.StopTimer()
}

// throughputRounds is how many times BenchmarkVolumeThroughput measures
// each of its four.
const throughputRounds = 3

// fastest is the shorter of best (zero: none yet) and d.
func fastest(best, d time.Duration) time.Duration {
	if best == 0 || d < best {
		return d
	}
	return best
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkVolumeIncremental: the incremental test's ratio (200 MB, 20 of
// 2,000 files rewritten) as a figure; the bound is 5 %.
func BenchmarkVolumeIncremental(b *testing.B) {
	f := newVolumeEnv(b)
	for b.Loop() {
		first, second := incrementalFigure(b, f)
		r := float64(second.SentBytes) / float64(first.SentBytes)
		b.ReportMetric(100*r, "sent-%")
		if r > 0.05 {
			b.Errorf("the second backup sent %.2f %% of the first's bytes, the bound is 5 %%", 100*r)
		}
	}
}

// discardStore keeps manifests and throws chunks away (saying each is
// missing, so every one is sealed and sent): the memory benchmark measures
// the agent, not an in-memory store holding the volume.
type discardStore struct {
	*backuptest.Mem
}

func (discardStore) Put(context.Context, string, []byte) error { return nil }
func (discardStore) Missing(_ context.Context, ids []string) ([]string, error) {
	return ids, nil
}

// vmRSS is the process's resident set now (/proc/self/status VmRSS), in
// bytes.
func vmRSS() (uint64, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("read the process's status: %w", err)
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmRSS %q: %w", rest, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/self/status")
}

// rssPeak samples VmRSS every 10 ms until stop is called, and returns its
// peak above the start. VmHWM cannot be reset, and the volume's writing
// before has raised it already; the start is taken once the heap is
// collected and returned to the system.
func rssPeak(tb testing.TB) (stop func() (peak, start uint64)) {
	runtime.GC()
	debug.FreeOSMemory()
	base, err := vmRSS()
	if err != nil {
		tb.Fatal(err)
	}
	var high atomic.Uint64
	high.Store(base)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			if rss, err := vmRSS(); err == nil && rss > high.Load() {
				high.Store(rss)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	return func() (uint64, uint64) {
		close(done)
		wg.Wait()
		return high.Load() - base, base
	}
}

// BenchmarkVolumeBackupMemory: the process's resident memory at its peak
// above its start while the agent backs up a 1 GB volume of mixed files;
// the goal is at most 100 MB. The agent's code (the Docker client reading
// the archive, the chunker, the sealing pipeline) runs in this process.
func BenchmarkVolumeBackupMemory(b *testing.B) {
	f := newVolumeEnv(b)
	vol := f.volume("large")
	f.write(vol, mixedFiles(1<<30, 11))
	task := backupTask(vol, figKey())
	task.Egg = ""
	for b.Loop() {
		stop := rssPeak(b)
		start := time.Now()
		st := f.runTask(discardStore{backuptest.NewMem()}, task)
		took := time.Since(start)
		peak, base := stop()
		b.ReportMetric(float64(peak)/(1<<20), "peak-RSS-above-start-MB")
		b.ReportMetric(mbps(st.Bytes, took), "backup-MB/s")
		b.Logf("backed up %d MB in %d chunks in %s: RSS %.1f MB at the start, peak %.1f MB above it",
			st.Bytes>>20, st.Chunks, took.Round(time.Millisecond), float64(base)/(1<<20), float64(peak)/(1<<20))
		if peak > 100<<20 {
			b.Errorf("the resident memory peaked %d MB above its start, the goal is at most 100 MB", peak>>20)
		}
	}
}
