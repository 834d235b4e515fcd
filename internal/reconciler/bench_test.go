package reconciler_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/graph"
	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/reconciler/reconcilertest"
	"github.com/hatchery/hatchery/internal/resource"
)

// sleepProvider takes a fixed time per operation and records how long each
// one really took, so that a benchmark can compute the best makespan any
// scheduler could have reached with those very durations.
type sleepProvider struct {
	op time.Duration

	mu   sync.Mutex // guards took
	took map[string]time.Duration
}

func (p *sleepProvider) Schema() reconciler.Schema {
	return reconciler.Schema{Outputs: []string{"address"}}
}
func (p *sleepProvider) Diff(a, b map[string]any) []string { return reconciler.DiffInputs(a, b) }
func (p *sleepProvider) Create(_ context.Context, _ string, r *resource.Deployed) (map[string]any, error) {
	start := time.Now()
	time.Sleep(p.op)
	took := time.Since(start)
	p.mu.Lock()
	p.took[r.Key()] += took
	p.mu.Unlock()
	return map[string]any{"address": r.Name + ":80"}, nil
}
func (p *sleepProvider) Update(ctx context.Context, project string, _, next *resource.Deployed) (map[string]any, error) {
	return p.Create(ctx, project, next)
}
func (p *sleepProvider) Delete(context.Context, string, *resource.Deployed) error { return nil }
func (p *sleepProvider) Ready(context.Context, string, *resource.Deployed, resource.Condition) (bool, string, error) {
	return true, "", nil
}

// bound is the least makespan possible for the measured durations on
// `slots` parallel slots: no schedule beats the longest path through the
// graph, nor the total work spread evenly over the slots.
func bound(g *graph.Graph, took map[string]time.Duration, slots int) time.Duration {
	var total time.Duration
	longest := map[string]time.Duration{} // longest path ending at a resource, itself included
	var critical time.Duration
	for _, r := range g.Resources() { // parents first
		var before time.Duration
		for _, p := range g.ParentResources(r.Key()) {
			before = max(before, longest[p.Key()])
		}
		longest[r.Key()] = before + took[r.Key()]
		critical = max(critical, longest[r.Key()])
		total += took[r.Key()]
	}
	return max(critical, total/time.Duration(slots))
}

// randomDAG: n resources, each depending by reference on up to 3 resources
// listed before it, chosen uniformly.
func randomDAG(rng *rand.Rand, n int) []*resource.Desired {
	rs := make([]*resource.Desired, n)
	for i := range rs {
		inputs := map[string]any{"image": fmt.Sprintf("app:%d", i)}
		for k := rng.IntN(4); k > 0 && i > 0; k-- {
			j := rng.IntN(i)
			inputs[fmt.Sprintf("p%d", j)] = "${egg/r" + fmt.Sprint(j) + ".address}"
		}
		rs[i] = egg(fmt.Sprintf("r%d", i), inputs)
	}
	return rs
}

// chainBesideLeaves: `leaves` independent resources listed first (so they are
// ready first), then a chain of `chain` resources, each needing the previous.
func chainBesideLeaves(leaves, chain int) []*resource.Desired {
	var rs []*resource.Desired
	for i := range leaves {
		rs = append(rs, egg(fmt.Sprintf("a%04d", i), nil))
	}
	for i := range chain {
		var inputs map[string]any
		if i > 0 {
			inputs = map[string]any{"prev": fmt.Sprintf("${egg/z%04d.address}", i-1)}
		}
		rs = append(rs, egg(fmt.Sprintf("z%04d", i), inputs))
	}
	return rs
}

// makespan creates every resource of g from nothing and returns how long the
// whole Reconcile took and the bound for the durations its operations took.
func makespan(b *testing.B, g *graph.Graph, fifo bool) (took, best time.Duration) {
	const slots = 10
	p := &sleepProvider{op: time.Millisecond, took: map[string]time.Duration{}}
	r := &reconciler.Reconciler{
		Resources:   reconcilertest.NewStorage(),
		Registry:    reconciler.Registry{resource.Egg: p},
		Concurrency: slots,
	}
	reconciler.SetFIFO(r, fifo)
	start := time.Now()
	if _, err := r.Reconcile(context.Background(), project, g); err != nil {
		b.Fatal(err)
	}
	took = time.Since(start)
	return took, bound(g, p.took, slots)
}

// BenchmarkReconcile measures how close the walk comes to the best possible
// makespan (makespan/bound, from the measured operation durations) and what
// critical-path priority buys over readiness order (vs-fifo) on the same graphs.
func BenchmarkReconcile(b *testing.B) {
	cases := []struct {
		name  string
		graph func(i int) []*resource.Desired
	}{
		{"random", func(i int) []*resource.Desired { return randomDAG(rand.New(rand.NewPCG(uint64(i), 7)), 2000) }},
		{"chain", func(int) []*resource.Desired { return chainBesideLeaves(1800, 200) }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var cp, cpBound, fifo time.Duration
			for i := 0; b.Loop(); i++ {
				g := mustGraph(b, c.graph(i))
				took, best := makespan(b, g, false)
				cp += took
				cpBound += best
				b.StopTimer()
				took, _ = makespan(b, g, true)
				fifo += took
				b.StartTimer()
			}
			b.ReportMetric(float64(cp)/float64(cpBound), "makespan/bound")
			b.ReportMetric(float64(cp)/float64(fifo), "vs-fifo")
		})
	}
}

// BenchmarkReconcileNoop measures a run in which nothing changed: 10,000
// resources matched against their records, references resolved, no
// provider call.
func BenchmarkReconcileNoop(b *testing.B) {
	const n = 10000
	e := quietEnv()
	g := mustGraph(b, noopGraph(n))
	e.apply(b, g)
	b.ResetTimer()
	for b.Loop() {
		res, err := e.r.Reconcile(context.Background(), project, g)
		if err != nil || res.Count(reconciler.ActionUnchanged) != n {
			b.Fatalf("noop run: %d unchanged, %v", res.Count(reconciler.ActionUnchanged), err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/resource")
	if calls := e.world.CountCalls(); calls != n {
		b.Fatalf("%d provider calls in all, want the %d creates of the setup", calls, n)
	}
}

// noopGraph is a random DAG whose resources look like eggs: an image, a
// replica count, a few labels and an environment referencing parents.
func noopGraph(n int) []*resource.Desired {
	rng := rand.New(rand.NewPCG(1, 2))
	rs := make([]*resource.Desired, n)
	for i := range rs {
		env := map[string]any{"MODE": "production"}
		for k := rng.IntN(3); k > 0 && i > 0; k-- {
			j := rng.IntN(i)
			env[fmt.Sprintf("UPSTREAM_%d", j)] = fmt.Sprintf("http://${egg/r%d.address}/", j)
		}
		rs[i] = egg(fmt.Sprintf("r%d", i), map[string]any{
			"image":    fmt.Sprintf("registry.local/app:%d", i),
			"replicas": 1 + i%3,
			"labels":   map[string]any{"team": "core", "tier": "web"},
			"env":      env,
		})
	}
	return rs
}
