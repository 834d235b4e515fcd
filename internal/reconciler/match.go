package reconciler

import (
	"fmt"
	"maps"
	"slices"

	"github.com/hatchery/hatchery/internal/resource"
)

// This file is the matching both Reconcile and Plan run: pure functions of
// the desired resource, its parents' outputs and its deployed record.

// decide compares a desired resource, with its inputs resolved, to its
// deployed record. Inputs named in unknown hold values only known after apply
// (Plan's view of a parent still to be created): they count as changed and are
// left out of the provider's comparison. A pending record is a create that was
// never confirmed, so it is created again (with its ID).
func decide(n *node, resolved map[string]any, unknown []string, prev *resource.Deployed) (Action, []string) {
	if prev == nil || prev.Pending {
		return ActionCreate, nil
	}
	old := prev.Inputs
	if len(unknown) > 0 {
		old, resolved = maps.Clone(old), maps.Clone(resolved)
		for _, k := range unknown {
			delete(old, k)
			delete(resolved, k)
		}
	}
	changed := slices.Clone(n.provider.Diff(old, resolved))
	if prev.Source != n.res.Source {
		changed = append(changed, "source")
	}
	changed = append(changed, unknown...)
	if len(changed) == 0 {
		return ActionUnchanged, nil
	}
	slices.Sort(changed)
	return ActionUpdate, slices.Compact(changed)
}

// resolve replaces the references in n's inputs with its parents' outputs,
// all known (Reconcile's view: every parent has succeeded). Inputs without
// references are returned as they are, not copied: callers never modify them.
func resolve(n *node, outputs func(parent string) map[string]any) (map[string]any, error) {
	if !n.templated {
		return n.res.Inputs, nil // nothing to resolve: spare the copy
	}
	return resource.Resolve(n.res.Inputs, func(ref resource.Ref) (any, error) {
		v, ok := outputs(ref.Key)[ref.Output]
		if !ok {
			return nil, fmt.Errorf("%s has no output %q", ref.Key, ref.Output)
		}
		return v, nil
	})
}

// resolvePartly is resolve for Plan, where a parent's outputs may be unknown
// (outputs returns ok false). An input that references an unknown output is
// kept as written and named in unknown; the others are resolved.
func resolvePartly(n *node, outputs func(parent string) (map[string]any, bool)) (resolved map[string]any, unknown []string, err error) {
	resolved = make(map[string]any, len(n.res.Inputs))
	for _, k := range slices.Sorted(maps.Keys(n.res.Inputs)) {
		field := map[string]any{k: n.res.Inputs[k]}
		refs, err := resource.Refs(field)
		if err != nil {
			return nil, nil, err
		}
		known := true
		for _, ref := range refs {
			out, ok := outputs(ref.Key)
			if _, has := out[ref.Output]; !ok || !has {
				known = false
				break
			}
		}
		if !known {
			resolved[k] = resource.Clone(field)[k]
			unknown = append(unknown, k)
			continue
		}
		r, err := resource.Resolve(field, func(ref resource.Ref) (any, error) {
			out, _ := outputs(ref.Key)
			return out[ref.Output], nil
		})
		if err != nil {
			return nil, nil, err
		}
		resolved[k] = r[k]
	}
	return resolved, unknown, nil
}

// sameParents reports whether a record's parents are the node's current ones.
func sameParents(recorded []string, n *node) bool {
	if len(recorded) != len(n.parents) {
		return false
	}
	sorted := recorded // as this reconciler writes them
	if !slices.IsSorted(recorded) {
		sorted = slices.Sorted(slices.Values(recorded))
	}
	for i, p := range n.parents {
		if sorted[i] != p.key {
			return false
		}
	}
	return true
}
