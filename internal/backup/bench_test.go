package backup_test

import (
	"context"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/backup"
	"github.com/hatchery/hatchery/internal/backup/backuptest"
)

// discardStore stores manifests and throws chunks away: a backup's cost
// without a store's.
type discardStore struct {
	*backuptest.Mem
}

func (discardStore) Put(context.Context, string, []byte) error { return nil }
func (discardStore) Missing(_ context.Context, ids []string) ([]string, error) {
	return ids, nil
}

// heapPeak samples the heap until stop is called, and returns its peak
// above the heap at the start.
func heapPeak() (stop func() uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > base && ms.HeapInuse-base > peak.Load() {
				peak.Store(ms.HeapInuse - base)
			}
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak.Load()
	}
}

// peakRSS is the process's resident high-water mark (VmHWM), in bytes.
func peakRSS() uint64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// backupHeap backs up v into a store that discards chunks and returns the
// heap's peak above where it started.
func backupHeap(tb testing.TB, v volume) uint64 {
	stop := heapPeak()
	_, st, err := backup.Backup(tb.Context(), v.reader(), volumeKey(tb, clusterKey, dataVolume), discardStore{backuptest.NewMem()}, created)
	peak := stop()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Logf("backed up %d MB in %d chunks with a heap peak of %.1f MB", st.Bytes>>20, st.Chunks, float64(peak)/(1<<20))
	return peak
}

// Memory stays bounded by the chunks in flight, not the volume: a 128 MB
// stream here must not take half as much heap (measured: under 40 MB);
// BenchmarkBackupMemory's 1 GB, at most 100 MB.
func TestABackupsMemoryIsBoundedWhateverTheVolumesSize(t *testing.T) {
	if peak := backupHeap(t, volume{seed: 6, files: 1280, size: 100 << 10}); peak > 64<<20 {
		t.Errorf("the heap peaked %d MB above its start backing up 128 MB, the bound is 64 MB", peak>>20)
	}
}

// BenchmarkBackupMemory: the heap's peak during a 1 GB backup, and the
// process's peak RSS after it.
func BenchmarkBackupMemory(b *testing.B) {
	for b.Loop() {
		peak := backupHeap(b, volume{seed: 7, files: 10240, size: 100 << 10})
		b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
		b.ReportMetric(float64(peakRSS())/(1<<20), "peak-RSS-MB")
		if peak > 100<<20 {
			b.Errorf("the heap peaked %d MB above its start, the bound is 100 MB", peak>>20)
		}
	}
}

// BenchmarkIncremental: the bound at its size, 200 MB of 2,000 files
// with 20 rewritten.
func BenchmarkIncremental(b *testing.B) {
	for b.Loop() {
		r := incrementalRatio(b, volume{seed: 8, files: 2000, size: 100 << 10})
		b.ReportMetric(100*r, "sent-%")
		if r > 0.05 {
			b.Errorf("the second backup sent %.2f %% of the first's bytes, the bound is 5 %%", 100*r)
		}
	}
}

// BenchmarkThroughput: backup and restore of a 200 MB tar stream against a
// plain io.Copy of the same stream, in the same run (ratios of throughput:
// 1 is as fast as the copy).
func BenchmarkThroughput(b *testing.B) {
	v := volume{seed: 9, files: 2000, size: 100 << 10}
	key := volumeKey(b, clusterKey, dataVolume)
	timed := func(f func() error) time.Duration {
		start := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for b.Loop() {
		copyTime := timed(func() error { _, err := io.Copy(io.Discard, v.reader()); return err })
		store := backuptest.NewMem()
		var m backup.Manifest
		backupTime := timed(func() (err error) {
			m, _, err = backup.Backup(b.Context(), v.reader(), key, store, created)
			return err
		})
		restoreTime := timed(func() error { return backup.Restore(b.Context(), m, key, store, io.Discard, b.TempDir()) })
		mbps := func(d time.Duration) float64 { return float64(m.Size) / (1 << 20) / d.Seconds() }
		b.ReportMetric(mbps(copyTime), "copy-MB/s")
		b.ReportMetric(mbps(backupTime), "backup-MB/s")
		b.ReportMetric(mbps(restoreTime), "restore-MB/s")
		b.ReportMetric(copyTime.Seconds()/backupTime.Seconds(), "backup/copy")
		b.ReportMetric(copyTime.Seconds()/restoreTime.Seconds(), "restore/copy")
	}
}
