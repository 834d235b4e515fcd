package converge

import (
	"testing"

	"github.com/hatchery/hatchery/internal/testutil/cputest"
)

// TestDiffScalesLinearly guards BenchmarkDiff's scaling figure in every
// test run: Diff of 10,000 containers costs at most twice per container what
// it costs for 1,000. A Diff quadratic in the containers is about 10; the
// linear one measured 1.0 to 1.2, and 1.4 to 1.5 under the race detector
// (which CI uses), whose bookkeeping grows with the memory touched. Both
// sizes are timed in the same run, by CPU time, each keeping its fastest of
// several rounds, so that neither the machine's speed nor its other work
// moves the ratio.
func TestDiffScalesLinearly(t *testing.T) {
	const rounds, bound = 15, 2.0
	ds, small, hs := benchHost(100)
	dl, large, hl := benchHost(1000)
	cost := cputest.Fastest(t, rounds,
		func() { _ = Diff(ds, small, hs, t0) },
		func() { _ = Diff(dl, large, hl, t0) })
	perSmall := float64(cost[0]) / float64(len(small))
	perLarge := float64(cost[1]) / float64(len(large))
	t.Logf("Diff: %.0f ns/container for %d containers, %.0f for %d", perSmall, len(small), perLarge, len(large))
	if scaling := perLarge / perSmall; scaling > bound {
		t.Errorf("Diff of %d containers costs %.2f times per container what %d cost, above the bound of %.1f",
			len(large), scaling, len(small), bound)
	}
}
