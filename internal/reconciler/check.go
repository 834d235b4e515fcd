package reconciler

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
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

// discovered collects what the Graph interface says about one key.
type discovered struct {
	res     *resource.Desired
	parents []edge // each parent once, with the strongest condition asked of it
	refs    []resource.Ref
}

type edge struct {
	parent string
	cond   resource.Condition
}

// addParent records an edge, keeping a condition beyond "created" if the
// parent was already there with one, and reports whether the parent is new.
// (A resource has a handful of parents: a slice beats a map.)
func (d *discovered) addParent(parent string, cond resource.Condition) bool {
	for i := range d.parents {
		if d.parents[i].parent == parent {
			if d.parents[i].cond == resource.ConditionCreated {
				d.parents[i].cond = cond
			}
			return false
		}
	}
	d.parents = append(d.parents, edge{parent: parent, cond: cond})
	return true
}

// checkGraph discovers the graph from its leaves and refuses it, listing every
// problem found, if it has a cycle, a duplicate, a resource of an unknown type,
// an edge or reference to a missing resource, a reference to an undeclared
// output, or a condition the parent's provider cannot check.
func checkGraph(g Graph, reg Registry) (*checkedGraph, error) {
	var errs []error
	found := map[string]*discovered{}
	dup := map[string]bool{}
	var queue []string

	duplicate := func(key string) {
		if !dup[key] {
			dup[key] = true
			errs = append(errs, &graph.DuplicateError{Key: key})
		}
	}
	// visit records one sighting of a resource; the same key seen again must be
	// the same resource (an implementation may hand out copies).
	visit := func(r *resource.Desired) {
		key := r.Key()
		if d, ok := found[key]; ok {
			if d.res != r && !sameDesired(d.res, r) {
				duplicate(key)
			}
			return
		}
		found[key] = &discovered{res: r}
		queue = append(queue, key)
	}

	leaves := map[string]bool{}
	for _, r := range g.LeafResources() {
		if r == nil {
			errs = append(errs, errors.New("graph holds a nil resource"))
			continue
		}
		if leaves[r.Key()] {
			duplicate(r.Key())
		}
		leaves[r.Key()] = true
		visit(r)
	}
	for len(queue) > 0 {
		key := queue[0]
		queue = queue[1:]
		d := found[key]
		for _, p := range g.ParentResources(key) {
			if p == nil {
				errs = append(errs, fmt.Errorf("%s: graph holds a nil parent", key))
				continue
			}
			if !d.addParent(p.Key(), resource.ConditionCreated) {
				duplicate(p.Key()) // listed twice among one resource's parents
			}
			visit(p)
		}
		for _, dep := range g.DependenciesOf(key) {
			d.addParent(dep.Parent, dep.Condition)
		}
		refs, err := resource.Refs(d.res.Inputs)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
		}
		d.refs = refs
		for _, ref := range refs {
			d.addParent(ref.Key, resource.ConditionCreated)
		}
	}

	cg := &checkedGraph{byKey: make(map[string]*node, len(found))}
	keys := make([]string, 0, len(found))
	for k := range found {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		n := &node{key: k, res: found[k].res, templated: resource.Templated(found[k].res.Inputs)}
		if p, ok := reg[n.res.Type]; ok {
			n.provider = p
		} else {
			errs = append(errs, &UnknownTypeError{Key: k, Type: n.res.Type, Known: reg.Types()})
		}
		cg.byKey[k] = n
	}
	for _, k := range keys {
		errs = append(errs, linkParents(cg, cg.byKey[k], found[k])...)
	}
	if err := cg.sort(); err != nil {
		errs = append(errs, err)
	} else {
		cg.computeHeights()
	}
	if v, ok := g.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidGraph, errors.Join(errs...))
	}
	return cg, nil
}

// linkParents connects n to its parents and checks the references and
// conditions on each edge against the parent's schema.
func linkParents(cg *checkedGraph, n *node, d *discovered) []error {
	var errs []error
	slices.SortFunc(d.parents, func(a, b edge) int { return strings.Compare(a.parent, b.parent) })
	for _, e := range d.parents {
		p, ok := cg.byKey[e.parent]
		if !ok {
			errs = append(errs, &graph.MissingError{Child: n.key, Parent: e.parent, Ref: refTo(d.refs, e.parent)})
			continue
		}
		n.parents = append(n.parents, p)
		p.children = append(p.children, n) // keys visited in order: stays sorted
		if e.cond == resource.ConditionCreated || p.provider == nil {
			continue
		}
		supported := p.provider.Schema().Conditions
		if !slices.Contains(supported, e.cond) {
			errs = append(errs, &ConditionError{Parent: e.parent, Child: n.key, Condition: e.cond, Supported: supported})
			continue
		}
		n.waits = append(n.waits, readiness{parent: p, cond: e.cond})
	}
	for _, ref := range d.refs {
		p, ok := cg.byKey[ref.Key]
		if !ok || p.provider == nil {
			continue // reported above
		}
		declared := p.provider.Schema().Outputs
		if !slices.Contains(declared, ref.Output) {
			errs = append(errs, &UnknownOutputError{Child: n.key, Ref: ref.String(), Declared: slices.Sorted(slices.Values(declared))})
		}
	}
	return errs
}

// refTo returns the first reference to key, as written, or "" if the edge
// came from a dependency alone.
func refTo(refs []resource.Ref, key string) string {
	for _, r := range refs {
		if r.Key == key {
			return r.String()
		}
	}
	return ""
}

// sort orders the nodes parents first (Kahn's algorithm, ties by key), or
// returns the path of one cycle.
func (cg *checkedGraph) sort() error {
	pending := make(map[*node]int, len(cg.byKey))
	var ready []*node
	for _, n := range sortedNodes(cg.byKey) {
		pending[n] = len(n.parents)
		if len(n.parents) == 0 {
			ready = append(ready, n)
		}
	}
	for len(ready) > 0 {
		n := ready[0]
		ready = ready[1:]
		n.index = len(cg.nodes)
		cg.nodes = append(cg.nodes, n)
		for _, c := range n.children {
			if pending[c]--; pending[c] == 0 {
				ready = append(ready, c)
			}
		}
	}
	if len(cg.nodes) == len(cg.byKey) {
		return nil
	}
	return &graph.CycleError{Path: findCycle(cg.byKey, pending)}
}

// findCycle follows parent edges among the nodes left unsorted (each has a
// parent on a cycle or behind one) until a key repeats. The path reads in
// dependency order: each entry depends on the next.
func findCycle(nodes map[string]*node, pending map[*node]int) []string {
	var n *node
	for _, c := range sortedNodes(nodes) {
		if pending[c] > 0 {
			n = c
			break
		}
	}
	pos := map[*node]int{}
	var path []string
	for {
		if i, seen := pos[n]; seen {
			return append(slices.Clone(path[i:]), n.key)
		}
		pos[n] = len(path)
		path = append(path, n.key)
		for _, p := range n.parents {
			if pending[p] > 0 {
				n = p
				break
			}
		}
	}
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

func sortedNodes(m map[string]*node) []*node {
	out := make([]*node, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[k])
	}
	return out
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
