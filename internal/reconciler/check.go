package reconciler

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hatchery/hatchery/internal/graph"
	"github.com/hatchery/hatchery/internal/resource"
)

// UnknownTypeError reports a resource whose type has no provider.
type UnknownTypeError struct {
	Key   string
	Type  resource.Kind
	Known []resource.Kind // the registered types, sorted
}

func (e *UnknownTypeError) Error() string {
	known := make([]string, len(e.Known))
	for i, k := range e.Known {
		known[i] = string(k)
	}
	return fmt.Sprintf("%s: unknown type %q (known types: %s)", e.Key, e.Type, strings.Join(known, ", "))
}

// UnknownOutputError reports a reference to an output its resource's type
// does not declare.
type UnknownOutputError struct {
	Child    string
	Ref      string
	Declared []string // the outputs the referenced type declares, sorted
}

func (e *UnknownOutputError) Error() string {
	declared := "none"
	if len(e.Declared) > 0 {
		declared = strings.Join(e.Declared, ", ")
	}
	return fmt.Sprintf("%s references %s, an output its type does not declare (declared: %s)", e.Child, e.Ref, declared)
}

// ConditionError reports a dependency condition the parent's type cannot check.
type ConditionError struct {
	Parent, Child string
	Condition     resource.Condition
	Supported     []resource.Condition
}

func (e *ConditionError) Error() string {
	supported := []string{"created"}
	for _, c := range e.Supported {
		supported = append(supported, string(c))
	}
	return fmt.Sprintf("%s depends on %s with condition %q, which %s cannot report (supported: %s)",
		e.Child, e.Parent, e.Condition, e.Parent, strings.Join(supported, ", "))
}

// checkedGraph is the desired graph as the reconciler walks it: discovered
// through the Graph interface, checked, and indexed. It is immutable.
type checkedGraph struct {
	nodes []*node // topological: parents first, ties broken by key
	byKey map[string]*node
}

// node is one desired resource with its edges.
type node struct {
	index     int // position in checkedGraph.nodes
	key       string
	res       *resource.Desired
	provider  Provider
	parents   []*node // sorted by key, each once
	children  []*node // sorted by key
	templated bool    // whether resolving changes its inputs (references, escapes)
	// waits are the parents whose readiness this node needs, beyond created.
	waits []readiness
	// height counts the resources on the longest chain from this one down
	// through its dependents, itself included: the critical-path priority.
	height int
}

type readiness struct {
	parent *node
	cond   resource.Condition
}

// parentKeys returns the keys recorded as Deployed.Parents.
func (n *node) parentKeys() []string {
	keys := make([]string, len(n.parents))
	for i, p := range n.parents {
		keys[i] = p.key
	}
	return keys
}

// discovery is what the Graph interface says, gathered for graph.New: every
// resource seen (a key seen with two different resources twice) and every
// edge.
type discovery struct {
	found     map[string]*resource.Desired
	resources []*resource.Desired
	deps      []*resource.Dependency
	errs      []error
}

// discover walks g from its leaves, and from every resource if g lists them
// (graph.Graph does: a cycle no leaf reaches is then seen too).
func discover(g Graph) *discovery {
	d := &discovery{found: map[string]*resource.Desired{}}
	var queue []string
	// visit records one sighting of a resource; the same key seen again must
	// be the same resource (an implementation may hand out copies).
	visit := func(r *resource.Desired) {
		key := r.Key()
		if prev, ok := d.found[key]; ok {
			if prev != r && !sameDesired(prev, r) {
				d.resources = append(d.resources, r) // graph.New reports the duplicate
			}
			return
		}
		d.found[key] = r
		d.resources = append(d.resources, r)
		queue = append(queue, key)
	}
	// listed checks a list for nil entries and keys listed twice, which are
	// duplicates too.
	listed := func(nilErr func() error, rs []*resource.Desired) []*resource.Desired {
		seen := make(map[string]bool, len(rs))
		out := make([]*resource.Desired, 0, len(rs))
		for _, r := range rs {
			if r == nil {
				d.errs = append(d.errs, nilErr())
				continue
			}
			if seen[r.Key()] {
				d.resources = append(d.resources, r)
			}
			seen[r.Key()] = true
			out = append(out, r)
		}
		return out
	}
	nilLeaf := func() error { return errors.New("graph holds a nil resource") }
	for _, r := range listed(nilLeaf, g.LeafResources()) {
		visit(r)
	}
	if all, ok := g.(interface{ Resources() []*resource.Desired }); ok {
		for _, r := range all.Resources() {
			if r != nil {
				visit(r)
			}
		}
	}
	for len(queue) > 0 {
		key := queue[0]
		queue = queue[1:]
		nilParent := func() error { return fmt.Errorf("%s: graph holds a nil parent", key) }
		for _, p := range listed(nilParent, g.ParentResources(key)) {
			d.deps = append(d.deps, &resource.Dependency{Parent: p.Key(), Child: key})
			visit(p)
		}
		for _, dep := range g.DependenciesOf(key) {
			d.deps = append(d.deps, &resource.Dependency{Parent: dep.Parent, Child: key, Condition: dep.Condition})
		}
	}
	return d
}

// checkGraph discovers the graph from its leaves, checks its shape with
// graph.New (the one check of a graph's shape: duplicates, edges and
// references to missing resources, cycles with their path) and its content
// against the registry, and refuses it, listing every problem found, if
// either fails: a resource of an unknown type, a reference to an undeclared
// output, a condition the parent's provider cannot check.
func checkGraph(g Graph, reg Registry) (*checkedGraph, error) {
	d := discover(g)
	errs := d.errs
	checked, err := graph.New(d.resources, d.deps)
	if err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, checkContent(d, reg)...)
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidGraph, errors.Join(errs...))
	}

	order := checked.Resources()
	cg := &checkedGraph{nodes: make([]*node, len(order)), byKey: make(map[string]*node, len(order))}
	for i, r := range order {
		n := &node{index: i, key: r.Key(), res: r, provider: reg[r.Type], templated: resource.Templated(r.Inputs)}
		cg.nodes[i] = n
		cg.byKey[n.key] = n
	}
	for _, n := range cg.nodes {
		for _, dep := range checked.DependenciesOf(n.key) {
			p := cg.byKey[dep.Parent]
			n.parents = append(n.parents, p)
			if dep.Condition != resource.ConditionCreated {
				n.waits = append(n.waits, readiness{parent: p, cond: dep.Condition})
			}
		}
		for _, c := range checked.Children(n.key) {
			n.children = append(n.children, cg.byKey[c])
		}
	}
	cg.computeHeights()
	return cg, nil
}

// checkContent checks what the graph's shape does not say, against the
// registry: each resource's type, the outputs its references name, and the
// conditions asked of each parent.
func checkContent(d *discovery, reg Registry) []error {
	var errs []error
	providerOf := func(key string) Provider {
		if r, ok := d.found[key]; ok {
			return reg[r.Type]
		}
		return nil
	}
	for _, key := range slices.Sorted(maps.Keys(d.found)) {
		r := d.found[key]
		if _, ok := reg[r.Type]; !ok {
			errs = append(errs, &UnknownTypeError{Key: key, Type: r.Type, Known: reg.Types()})
		}
		refs, _ := resource.Refs(r.Inputs) // a malformed one is graph.New's to report
		for _, ref := range refs {
			p := providerOf(ref.Key)
			if p == nil {
				continue // missing or of an unknown type: reported already
			}
			if declared := p.Schema().Outputs; !slices.Contains(declared, ref.Output) {
				errs = append(errs, &UnknownOutputError{Child: key, Ref: ref.String(), Declared: slices.Sorted(slices.Values(declared))})
			}
		}
	}
	reported := map[resource.Dependency]bool{}
	for _, dep := range d.deps {
		p := providerOf(dep.Parent)
		if dep.Condition == resource.ConditionCreated || p == nil || reported[*dep] {
			continue
		}
		reported[*dep] = true
		if supported := p.Schema().Conditions; !slices.Contains(supported, dep.Condition) {
			errs = append(errs, &ConditionError{Parent: dep.Parent, Child: dep.Child, Condition: dep.Condition, Supported: supported})
		}
	}
	return errs
}

func (cg *checkedGraph) computeHeights() {
	for i := len(cg.nodes) - 1; i >= 0; i-- {
		n := cg.nodes[i]
		n.height = 1
		for _, c := range n.children {
			n.height = max(n.height, c.height+1)
		}
	}
}

func sameDesired(a, b *resource.Desired) bool {
	return a.Type == b.Type && a.Name == b.Name && a.Source == b.Source && resource.Equal(a.Inputs, b.Inputs)
}

// unwanted is a deployed record no desired resource matches, to be deleted.
type unwanted struct {
	index    int // position in state.unwanted
	rec      *resource.Deployed
	provider Provider
	// blockedBy are the unwanted records that depend on this one: they are
	// deleted first. unblocks are the unwanted parents this one's deletion
	// lets go.
	blockedBy []*unwanted
	unblocks  []*unwanted
	height    int // longest chain of deletes it leads to, itself included
}

// orderDeletes picks the deployed records the desired graph no longer has and
// orders them children first, by the parents recorded on each. A record whose
// type has no provider any more cannot be deleted: that refuses the run before
// anything changes.
func orderDeletes(records []*resource.Deployed, cg *checkedGraph, reg Registry) ([]*unwanted, error) {
	byKey := map[string]*unwanted{}
	var errs []error
	for _, rec := range records {
		if _, wanted := cg.byKey[rec.Key()]; wanted {
			continue
		}
		p, ok := reg[rec.Type]
		if !ok {
			errs = append(errs, &UnknownTypeError{Key: rec.Key(), Type: rec.Type, Known: reg.Types()})
			continue
		}
		byKey[rec.Key()] = &unwanted{rec: rec, provider: p}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("cannot delete: %w", errors.Join(errs...))
	}
	keys := slices.Sorted(maps.Keys(byKey))
	for _, k := range keys {
		u := byKey[k]
		for _, pk := range slices.Sorted(slices.Values(u.rec.Parents)) {
			if p, ok := byKey[pk]; ok && p != u && !slices.Contains(p.blockedBy, u) {
				p.blockedBy = append(p.blockedBy, u)
				u.unblocks = append(u.unblocks, p)
			}
		}
	}
	// Kahn's algorithm again; records caught in a cycle of recorded parents
	// (which only a corrupted store could hold) go last, in key order.
	pending := map[*unwanted]int{}
	var ready, order []*unwanted
	for _, k := range keys {
		u := byKey[k]
		if pending[u] = len(u.blockedBy); pending[u] == 0 {
			ready = append(ready, u)
		}
	}
	for len(ready) > 0 {
		u := ready[0]
		ready = ready[1:]
		order = append(order, u)
		for _, p := range u.unblocks {
			if pending[p]--; pending[p] == 0 {
				ready = append(ready, p)
			}
		}
	}
	if len(order) < len(keys) {
		var stuck []string
		for _, k := range keys {
			if pending[byKey[k]] > 0 {
				stuck = append(stuck, k)
			}
		}
		return nil, fmt.Errorf("cannot order deletes: the recorded parents of %s form a cycle", strings.Join(stuck, ", "))
	}
	for i := len(order) - 1; i >= 0; i-- {
		u := order[i]
		u.index = i
		u.height = 1
		for _, p := range u.unblocks {
			u.height = max(u.height, p.height+1)
		}
	}
	return order, nil
}
