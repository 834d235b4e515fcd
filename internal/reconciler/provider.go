package reconciler

import (
	"context"
	"maps"
	"slices"

	"github.com/hatchery/hatchery/internal/resource"
)

// Provider manages the resources of one type (resource.Egg, resource.Volume...). It is the
// contract between the reconciler and the real world.
//
// Every operation may be retried, after a failure, a crash or a cancel, so each
// must be idempotent:
//   - Create makes the object identified by r.ID. If an object with that ID
//     already exists (an earlier attempt got that far), it adopts it and
//     brings it to r's inputs instead of making a second one.
//   - Update brings the object with next.ID to next's inputs; doing it twice is
//     the same as doing it once.
//   - Delete removes the object with prev.ID; an object that is already gone is
//     a success.
//
// An error wrapped with backoff.Permanent is not retried. Providers get copies
// of the records and may keep them.
//
// The methods are called concurrently, for different resources at once.
type Provider interface {
	// Schema describes the type: the outputs children may reference and the
	// readiness conditions Ready can check. The reconciler refuses a graph that
	// asks for anything else before it calls any provider.
	Schema() Schema

	// Diff compares the inputs a resource was last applied with to the inputs
	// now desired (both with references resolved) and returns the names of the
	// top-level inputs that differ, sorted; none means the deployed resource
	// matches and nothing is done. It must be pure: Plan calls it too. DiffInputs
	// is the usual implementation; a provider may ignore fields that need no
	// change or treat a default and its absence alike.
	Diff(deployed, desired map[string]any) []string

	// Create makes the resource r (r.ID chosen by the reconciler and already
	// persisted in a pending record; r.Inputs resolved) and returns its outputs.
	Create(ctx context.Context, project string, r *resource.Deployed) (outputs map[string]any, err error)

	// Update changes the resource from prev (as recorded) to next (same ID, new
	// inputs or source) and returns its outputs.
	Update(ctx context.Context, project string, prev, next *resource.Deployed) (outputs map[string]any, err error)

	// Delete removes the resource r.
	Delete(ctx context.Context, project string, r *resource.Deployed) error

	// Ready reports whether r meets cond, one of Schema().Conditions, and if not
	// why (for an egg and resource.ConditionHealthy: "1/3 replicas healthy at the
	// new spec"). The reconciler polls it with backoff while a child waits and
	// fails the child with the last reason if the backoff gives up. An error
	// means the check itself failed (retried); a permanent one means the
	// condition can never be met (a one-shot job that failed).
	Ready(ctx context.Context, project string, r *resource.Deployed, cond resource.Condition) (ready bool, reason string, err error)
}

// Schema describes a resource type to the reconciler.
type Schema struct {
	// Outputs lists the outputs the type declares, the only ones a reference
	// ${type/name.output} may name.
	Outputs []string
	// Conditions lists the readiness conditions, beyond the always-supported
	// resource.ConditionCreated, that Ready can check for this type.
	Conditions []resource.Condition
}

// Registry maps a resource type to its provider. It is built by hand where the
// control plane is wired (no package-level registration) and read-only once
// handed to a Reconciler.
type Registry map[resource.Kind]Provider

// Types returns the registered types, sorted.
func (r Registry) Types() []resource.Kind {
	return slices.Sorted(maps.Keys(r))
}

// DiffInputs returns the sorted names of the top-level inputs whose values
// differ between a and b, with resource.Equal's meaning: values compare by
// their canonical JSON form (so 1 and 1.0 match, and map key order never
// matters). A key missing on one side differs from any value, even null, on
// the other.
func DiffInputs(a, b map[string]any) []string {
	var changed []string
	for k, va := range a {
		vb, ok := b[k]
		if !ok || !equalValue(va, vb) {
			changed = append(changed, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			changed = append(changed, k)
		}
	}
	slices.Sort(changed)
	return changed
}

// equalValue compares two JSON-compatible values as resource.Equal would,
// without encoding them: a run in which nothing changed compares every input
// of every resource, so this is the reconciler's hottest path. Unless both
// values are of the plain kinds JSON decodes to (or Go ints), it goes the long
// way, through resource.Equal.
func equalValue(a, b any) bool {
	if na, nb := isNull(a), isNull(b); na || nb {
		if na && nb {
			return true
		}
		if plain(a) && plain(b) {
			return false
		}
		return canonicalEqual(a, b)
	}
	switch a := a.(type) {
	case string:
		if bs, ok := b.(string); ok {
			return a == bs
		}
	case bool:
		if bb, ok := b.(bool); ok {
			return a == bb
		}
	case map[string]any:
		if bm, ok := b.(map[string]any); ok {
			if len(a) != len(bm) {
				return false
			}
			for k, va := range a {
				vb, ok := bm[k]
				if !ok || !equalValue(va, vb) {
					return false
				}
			}
			return true
		}
	case []any:
		if bl, ok := b.([]any); ok {
			if len(a) != len(bl) {
				return false
			}
			for i := range a {
				if !equalValue(a[i], bl[i]) {
					return false
				}
			}
			return true
		}
	default:
		fa, okA := number(a)
		fb, okB := number(b)
		if okA && okB {
			return fa == fb // JSON decodes every number as a float64
		}
	}
	if plain(a) && plain(b) {
		return false // two plain values of different kinds
	}
	return canonicalEqual(a, b)
}

// isNull reports whether v encodes as JSON null: nil, or a nil map or slice.
func isNull(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case map[string]any:
		return v == nil
	case []any:
		return v == nil
	}
	return false
}

// plain reports whether v is of a kind equalValue compares directly.
func plain(v any) bool {
	switch v.(type) {
	case nil, string, bool, map[string]any, []any:
		return true
	}
	_, ok := number(v)
	return ok
}

func canonicalEqual(a, b any) bool {
	return resource.Equal(map[string]any{"v": a}, map[string]any{"v": b})
}

// number converts the numeric types whose JSON form decodes back to the same
// float64. (A float32 is formatted at 32-bit precision, so it goes the long way.)
func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case int32:
		return float64(n), true
	case uint:
		return float64(n), true
	case uint64:
		return float64(n), true
	case uint32:
		return float64(n), true
	}
	return 0, false
}
