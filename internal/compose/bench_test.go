package compose

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/spec"
)

// benchServices is the size of the project both loaders load.
const benchServices = 10_000

// writeBenchProject writes one project of n services twice, as a
// compose.yaml and as a hatch.yaml: each service with an image, a published
// port, a variable and, but for the first, a dependency on the first. (A chain
// of dependencies would measure compose-go's cycle search, quadratic in the
// chain's length.)
func writeBenchProject(tb testing.TB, n int) (compose, hatch string) {
	tb.Helper()
	var c, h strings.Builder
	c.WriteString("name: bench\nservices:\n")
	h.WriteString("project: bench\neggs:\n")
	for i := range n {
		fmt.Fprintf(&c, "  s%d:\n    image: app:1\n    ports: [\"%d:80\"]\n    environment: {N: \"%d\"}\n", i, 10000+i, i)
		fmt.Fprintf(&h, "  s%d:\n    image: app:1\n    ports: [\"%d:80\"]\n    env: {N: \"%d\"}\n", i, 10000+i, i)
		if i > 0 {
			c.WriteString("    depends_on: [s0]\n")
			h.WriteString("    depends_on: [s0]\n")
		}
	}
	dir := tb.TempDir()
	compose, hatch = filepath.Join(dir, "compose.yaml"), filepath.Join(dir, "hatch.yaml")
	if err := os.WriteFile(compose, []byte(c.String()), 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(hatch, []byte(h.String()), 0o600); err != nil {
		tb.Fatal(err)
	}
	return compose, hatch
}

// BenchmarkLoadVersusHatchYAML loads 10,000 Compose services and the same
// 10,000 eggs written as a hatch.yaml, in the same run. compose/hatch is the
// ratio of their times; compose-go/hatch is compose-go's part of it (its
// loading alone, before any of ours), and mapping/hatch the rest: the
// mapping, spec.Marshal and spec.Parse of the result, which is this
// package's own cost, bounded by 2 (it parses one hatch.yaml, so it cannot
// be below 1). The mapping once asked every service about each (quadratic:
// 10,000 services took 16 s).
func BenchmarkLoadVersusHatchYAML(b *testing.B) {
	composeFile, hatchFile := writeBenchProject(b, benchServices)
	var composeTime, composeGoTime, hatchTime time.Duration
	for b.Loop() {
		start := time.Now()
		if _, _, err := loadCompose(context.Background(), []string{composeFile}, Options{}); err != nil {
			b.Fatal(err)
		}
		composeGoTime += time.Since(start)
		start = time.Now()
		p, err := Load(context.Background(), []string{composeFile}, Options{})
		composeTime += time.Since(start)
		if err != nil || len(p.Eggs) != benchServices {
			b.Fatalf("compose: %v", err)
		}
		start = time.Now()
		hp, err := spec.Load(hatchFile, spec.Options{})
		hatchTime += time.Since(start)
		if err != nil || len(hp.Eggs) != benchServices {
			b.Fatalf("hatch.yaml: %v", err)
		}
	}
	ratio := func(d time.Duration) float64 { return float64(d) / float64(hatchTime) }
	b.ReportMetric(ratio(composeTime), "compose/hatch")
	b.ReportMetric(ratio(composeGoTime), "compose-go/hatch")
	mapping := composeTime - composeGoTime
	b.ReportMetric(ratio(mapping), "mapping/hatch")
	b.ReportMetric(float64(hatchTime.Milliseconds())/float64(b.N), "hatch-ms/op")
	if r := ratio(mapping); r > 2 {
		b.Errorf("mapping %d Compose services took %.2f times loading a hatch.yaml of as many eggs, above the bound of 2", benchServices, r)
	}
}
