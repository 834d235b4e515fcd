package converge

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

// benchHost returns a desired state of n workloads of 10 replicas and the
// host's 10n containers: one per slot, 10% stale (alone in their slot, so Diff
// plans surge-limited starts) and 5% crashed (restarts), with the history of a
// host that has run a while.
func benchHost(n int) (contract.DesiredState, []containers.Container, *History) {
	d := contract.DesiredState{HostID: host}
	var actual []containers.Container
	h := NewHistory()
	for i := range n {
		w := wl(fmt.Sprintf("egg-%04d", i), 10, func(w *contract.WorkloadSpec) {
			w.Env = map[string]string{"REGION": "eu", "LOG": "info"}
			w.Command = []string{"/app", "--port", "8080"}
			w.Health.HTTP = "/healthz"
		})
		d.Workloads = append(d.Workloads, w)
		hash := contract.SpecHash(w)
		for slot := range 10 {
			k := i*10 + slot
			id := fmt.Sprintf("c%06d", k)
			state, spec := contract.StateRunning, hash
			switch {
			case k%10 == 3:
				spec = old
			case k%20 == 7:
				state = contract.StateCrashed
			}
			actual = append(actual, ctr(id, w, slot, spec, state))
			h.Containers[id] = ContainerHistory{HealthySince: t0.Add(-time.Hour), HealthyStart: t0.Add(-time.Minute)}
		}
	}
	return d, actual, h
}

// BenchmarkDiff measures Diff per container on 100 and 1,000 workloads of 10
// slots, and how it scales: scaling = cost(10,000 containers) / (10 ×
// cost(1,000)), 1 when linear.
func BenchmarkDiff(b *testing.B) {
	for _, n := range []int{100, 1000} {
		d, actual, h := benchHost(n)
		b.Run(fmt.Sprintf("%dx10", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = Diff(d, actual, h, t0)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(actual)), "ns/container")
		})
	}
	b.Run("scaling", func(b *testing.B) {
		// Medians of the two sizes timed side by side: the machine is shared,
		// and a median shrugs off the iterations a neighbour slowed down.
		ds, small, hs := benchHost(100)
		dl, large, hl := benchHost(1000)
		_, _ = Diff(ds, small, hs, t0), Diff(dl, large, hl, t0) // warm up
		var costSmall, costLarge []time.Duration
		for b.Loop() {
			// Several rounds per iteration, so that even -benchtime 3x
			// gives the medians enough samples.
			for range 5 {
				start := time.Now()
				_ = Diff(ds, small, hs, t0)
				costSmall = append(costSmall, time.Since(start))
				start = time.Now()
				_ = Diff(dl, large, hl, t0)
				costLarge = append(costLarge, time.Since(start))
			}
		}
		s, l := median(costSmall), median(costLarge)
		b.ReportMetric(float64(l)/(10*float64(s)), "scaling")
		b.ReportMetric(float64(s.Nanoseconds())/float64(len(small)), "ns/container-1k")
		b.ReportMetric(float64(l.Nanoseconds())/float64(len(large)), "ns/container-10k")
	})
}

func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}
