package compose

import (
	"context"
	"testing"

	"github.com/hatchery/hatchery/internal/spec"
	"github.com/hatchery/hatchery/internal/testutil/cputest"
)

// TestMappingCostsAtMostFourHatchYAMLLoads guards the Compose load ratio of
// BenchmarkLoadVersusHatchYAML in every test run, on a project small enough
// to load in a test: this package's own part of loading 500 Compose
// services (the mapping, spec.Marshal and spec.Parse of its result) costs at
// most 4 times loading a hatch.yaml of as many eggs. It measured 2.2 to 2.6
// (CPU times of the same run, each the fastest of 5 rounds, garbage
// collection left out: the benchmark's figure, which charges each part its
// collection, is about 2 at 10,000); a mapping that did its work twice, or
// asked every service about each, is above.
func TestMappingCostsAtMostFourHatchYAMLLoads(t *testing.T) {
	const services, rounds, bound = 500, 5, 4.0
	composeFile, hatchFile := writeBenchProject(t, services)
	files := []string{composeFile}
	cp, findings, err := loadCompose(context.Background(), files, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mapErr, hatchErr error
	cost := cputest.Fastest(t, rounds,
		func() { _, mapErr = fromCompose(cp, findings, files, Options{}) },
		func() { _, hatchErr = spec.Load(hatchFile, spec.Options{}) })
	if mapErr != nil || hatchErr != nil {
		t.Fatalf("mapping: %v; hatch.yaml: %v", mapErr, hatchErr)
	}
	ratio := float64(cost[0]) / float64(cost[1])
	t.Logf("%d services: mapping %v, hatch.yaml %v, ratio %.2f", services, cost[0], cost[1], ratio)
	if ratio > bound {
		t.Errorf("mapping %d Compose services took %.2f times loading a hatch.yaml of as many eggs, above the bound of %.0f",
			services, ratio, bound)
	}
}
