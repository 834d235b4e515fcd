package reconciler_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/graph"
	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/reconciler/reconcilertest"
	"github.com/hatchery/hatchery/internal/resource"
)

const project = "default/shop"

// env is a reconciler wired to fakes: one World, providers for egg, volume
// and network, in-memory storage and sources, and retries without delay.
type env struct {
	world   *reconcilertest.World
	store   *reconcilertest.Storage
	sources *reconcilertest.Sources
	egg     *reconcilertest.Provider
	volume  *reconcilertest.Provider
	network *reconcilertest.Provider
	r       *reconciler.Reconciler
}

// tb is what the helpers need of *testing.T and *rapid.T alike.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// newEnv returns an env logging to t.
func newEnv(t testing.TB) *env { return newEnvLogging(zaptest.NewLogger(t)) }

// quietEnv returns an env that discards its logs, for property runs making
// thousands of operations.
func quietEnv() *env { return newEnvLogging(zap.NewNop()) }

func newEnvLogging(logger *zap.Logger) *env {
	world := reconcilertest.NewWorld()
	e := &env{
		world:   world,
		store:   reconcilertest.NewStorage(),
		sources: reconcilertest.NewSources(),
		egg: world.Provider(resource.Egg, reconciler.Schema{
			Outputs:    []string{"address", "hosts"},
			Conditions: []resource.Condition{resource.ConditionHealthy, resource.ConditionCompleted},
		}),
		volume:  world.Provider(resource.Volume, reconciler.Schema{Outputs: []string{"name", "host"}}),
		network: world.Provider(resource.Network, reconciler.Schema{Outputs: []string{"name"}}),
	}
	var ids atomic.Int64
	e.r = &reconciler.Reconciler{
		Resources: e.store,
		Source:    e.sources,
		Registry:  reconciler.Registry{resource.Egg: e.egg, resource.Volume: e.volume, resource.Network: e.network},
		IDGen:     reconciler.IDGeneratorFunc(func() string { return fmt.Sprintf("id-%d", ids.Add(1)) }),
		Logger:    logger,
		Backoff:   func() backoff.BackOff { return backoff.WithMaxRetries(&backoff.ZeroBackOff{}, 3) },
	}
	return e
}

func (e *env) apply(t tb, g reconciler.Graph) reconciler.Result {
	t.Helper()
	res, err := e.r.Reconcile(context.Background(), project, g)
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return res
}

// records returns the project's records as key -> record.
func (e *env) records(t tb, project string) map[string]*resource.Deployed {
	t.Helper()
	recs, err := e.store.ListResources(context.Background(), project)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*resource.Deployed{}
	for _, r := range recs {
		out[r.Key()] = r
	}
	return out
}

func egg(name string, inputs map[string]any) *resource.Desired {
	return &resource.Desired{Type: resource.Egg, Name: name, Inputs: inputs}
}

func volume(name string) *resource.Desired {
	return &resource.Desired{Type: resource.Volume, Name: name, Inputs: map[string]any{"driver": "local"}}
}

func dep(parent, child string, cond resource.Condition) *resource.Dependency {
	return &resource.Dependency{Parent: parent, Child: child, Condition: cond}
}

func mustGraph(t tb, rs []*resource.Desired, deps ...*resource.Dependency) *graph.Graph {
	t.Helper()
	g, err := graph.New(rs, deps)
	if err != nil {
		t.Fatalf("graph: %v", err)
	}
	return g
}

// actions returns key -> action of a result.
func actions(res reconciler.Result) map[string]reconciler.Action {
	out := map[string]reconciler.Action{}
	for _, r := range res.Resources {
		out[r.Key] = r.Action
	}
	return out
}

// callsOf returns the keys a world's log shows for op, in start order.
func callsOf(w *reconcilertest.World, op reconcilertest.Op) []string {
	var keys []string
	for _, c := range w.Calls() {
		if c.Op == op {
			keys = append(keys, c.Key)
		}
	}
	return keys
}

// lastEnd returns, per key, the end tick of its last create/update/delete.
func firstStartAndLastEnd(w *reconcilertest.World) (start, end map[string]int) {
	start, end = map[string]int{}, map[string]int{}
	for _, c := range w.Calls() {
		if c.Op == reconcilertest.OpReady {
			continue
		}
		if _, ok := start[c.Key]; !ok {
			start[c.Key] = c.Start
		}
		end[c.Key] = max(end[c.Key], c.End)
	}
	return start, end
}

// fakeGraph implements reconciler.Graph from plain maps, so tests can hand
// the reconciler graphs that graph.New would refuse.
type fakeGraph struct {
	leaves  []*resource.Desired
	parents map[string][]*resource.Desired
	deps    map[string][]*resource.Dependency
}

func (g *fakeGraph) LeafResources() []*resource.Desired { return g.leaves }
func (g *fakeGraph) ParentResources(child string) []*resource.Desired {
	return g.parents[child]
}
func (g *fakeGraph) DependenciesOf(child string) []*resource.Dependency { return g.deps[child] }

// listingGraph adds graph.Graph's Resources method to a fakeGraph: every
// resource, whether a leaf reaches it or not.
type listingGraph struct {
	*fakeGraph
	all []*resource.Desired
}

func (g listingGraph) Resources() []*resource.Desired { return g.all }

// gate lets a test hold provider calls until it says go.
type gate struct {
	once sync.Once
	ch   chan struct{}
}

func newGate() *gate                  { return &gate{ch: make(chan struct{})} }
func (g *gate) open()                 { g.once.Do(func() { close(g.ch) }) }
func (g *gate) wait() <-chan struct{} { return g.ch }

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
