// Package graph builds and checks a project's resource graph: a DAG of desired
// resources keyed "type/name" whose edges say which resource needs which.
//
// A Graph is immutable once built and safe for concurrent reads. New refuses a
// graph with duplicate keys, edges to missing resources or cycles, so everything
// downstream (the reconciler, the CLI's graph output) can rely on a valid DAG.
package graph

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/hatchery/hatchery/internal/resource"
)

// DuplicateError reports two resources with the same type and name.
type DuplicateError struct{ Key string }

func (e *DuplicateError) Error() string { return fmt.Sprintf("%s is defined twice", e.Key) }

// MissingError reports an edge (a dependency or a reference) to a resource that
// is not in the graph.
type MissingError struct {
	Child  string
	Parent string
	// Ref is the reference that named the parent, if the edge came from one.
	Ref string
}

func (e *MissingError) Error() string {
	if e.Ref != "" {
		return fmt.Sprintf("%s references %s, but %s is not defined", e.Child, e.Ref, e.Parent)
	}
	return fmt.Sprintf("%s depends on %s, which is not defined", e.Child, e.Parent)
}

// CycleError reports a dependency cycle by its path, first key repeated last.
type CycleError struct{ Path []string }

func (e *CycleError) Error() string {
	return "dependency cycle: " + strings.Join(e.Path, " -> ")
}

// Graph is a checked DAG of desired resources.
type Graph struct {
	nodes    map[string]*resource.Desired
	deps     map[string][]*resource.Dependency // child -> its edges, sorted by parent
	children map[string][]string               // parent -> child keys, sorted
	order    []string                          // topological: parents before children
}

// New builds a graph from resources and explicit dependencies. Every reference
// in a resource's inputs (resource.Refs) is an edge too, with the created
// condition, unless an explicit dependency on that parent already says more.
// It returns every problem it finds, joined, each one a *DuplicateError,
// *MissingError or *CycleError.
func New(resources []*resource.Desired, deps []*resource.Dependency) (*Graph, error) {
	g := &Graph{
		nodes:    make(map[string]*resource.Desired, len(resources)),
		deps:     make(map[string][]*resource.Dependency),
		children: make(map[string][]string),
	}
	var errs []error
	for _, r := range resources {
		if _, dup := g.nodes[r.Key()]; dup {
			errs = append(errs, &DuplicateError{Key: r.Key()})
			continue
		}
		g.nodes[r.Key()] = r
	}

	edges := map[[2]string]*resource.Dependency{}
	addEdge := func(d *resource.Dependency, ref string) {
		if _, ok := g.nodes[d.Parent]; !ok {
			errs = append(errs, &MissingError{Child: d.Child, Parent: d.Parent, Ref: ref})
			return
		}
		k := [2]string{d.Child, d.Parent}
		if prev, ok := edges[k]; ok {
			if prev.Condition == resource.ConditionCreated {
				prev.Condition = d.Condition
			}
			return
		}
		e := *d
		edges[k] = &e
	}
	for _, d := range deps {
		if _, ok := g.nodes[d.Child]; !ok {
			errs = append(errs, &MissingError{Child: d.Child, Parent: d.Parent})
			continue
		}
		addEdge(d, "")
	}
	for _, key := range sortedKeys(g.nodes) {
		refs, err := resource.Refs(g.nodes[key].Inputs)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
			continue
		}
		for _, ref := range refs {
			addEdge(&resource.Dependency{Parent: ref.Key, Child: key}, ref.String())
		}
	}
	for _, e := range edges {
		g.deps[e.Child] = append(g.deps[e.Child], e)
		g.children[e.Parent] = append(g.children[e.Parent], e.Child)
	}
	for k := range g.deps {
		sort.Slice(g.deps[k], func(i, j int) bool { return g.deps[k][i].Parent < g.deps[k][j].Parent })
	}
	for k := range g.children {
		sort.Strings(g.children[k])
	}
	if err := g.sort(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return g, nil
}

// sort computes a deterministic topological order (Kahn's algorithm, ties by
// key), or the path of one cycle.
func (g *Graph) sort() error {
	indegree := make(map[string]int, len(g.nodes))
	for key := range g.nodes {
		indegree[key] = len(g.deps[key])
	}
	var ready []string
	for _, key := range sortedKeys(g.nodes) {
		if indegree[key] == 0 {
			ready = append(ready, key)
		}
	}
	for len(ready) > 0 {
		key := ready[0]
		ready = ready[1:]
		g.order = append(g.order, key)
		for _, child := range g.children[key] {
			indegree[child]--
			if indegree[child] == 0 {
				ready = append(ready, child)
			}
		}
	}
	if len(g.order) == len(g.nodes) {
		return nil
	}
	return &CycleError{Path: g.findCycle(indegree)}
}

// findCycle follows parent edges among the nodes left with a positive
// in-degree (each has a parent in a cycle or behind one) until a key repeats.
func (g *Graph) findCycle(indegree map[string]int) []string {
	var start string
	for _, key := range sortedKeys(g.nodes) {
		if indegree[key] > 0 {
			start = key
			break
		}
	}
	pos := map[string]int{}
	var path []string
	for key := start; ; {
		if i, seen := pos[key]; seen {
			cycle := append([]string(nil), path[i:]...)
			// Report it in dependency order: each entry depends on the next.
			return append(cycle, key)
		}
		pos[key] = len(path)
		path = append(path, key)
		for _, d := range g.deps[key] {
			if indegree[d.Parent] > 0 {
				key = d.Parent
				break
			}
		}
	}
}

// Len is the number of resources.
func (g *Graph) Len() int { return len(g.nodes) }

// Resource returns the resource with the given key.
func (g *Graph) Resource(key string) (*resource.Desired, bool) {
	r, ok := g.nodes[key]
	return r, ok
}

// Resources returns every resource in topological order: parents first, ties
// broken by key, the same order on every call.
func (g *Graph) Resources() []*resource.Desired {
	out := make([]*resource.Desired, len(g.order))
	for i, key := range g.order {
		out[i] = g.nodes[key]
	}
	return out
}

// LeafResources returns the resources nothing depends on, sorted by key. Walking
// ParentResources from them reaches every resource of the graph.
func (g *Graph) LeafResources() []*resource.Desired {
	var out []*resource.Desired
	for _, key := range g.order {
		if len(g.children[key]) == 0 {
			out = append(out, g.nodes[key])
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out
}

// ParentResources returns the resources child depends on, sorted by key.
func (g *Graph) ParentResources(child string) []*resource.Desired {
	deps := g.deps[child]
	out := make([]*resource.Desired, len(deps))
	for i, d := range deps {
		out[i] = g.nodes[d.Parent]
	}
	return out
}

// DependenciesOf returns child's edges, sorted by parent.
func (g *Graph) DependenciesOf(child string) []*resource.Dependency {
	return g.deps[child]
}

// Children returns the keys of the resources that depend on key, sorted.
func (g *Graph) Children(key string) []string { return g.children[key] }

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
