package reconciler

import (
	"context"

	"github.com/hatchery/hatchery/internal/resource"
)

// Plan is what Reconcile would do, worked out without side effects: the same
// matching, with no provider operation and no write.
type Plan struct {
	Project string
	// Changes lists every desired resource parents first (ties by key), then
	// every deployed resource no longer wanted, children first.
	Changes []Change
}

// Change is the planned action for one resource.
type Change struct {
	Key string // "type/name"
	// ID is the deployed (or pending) ID; empty for a create that will get a
	// new one.
	ID string
	// Action is create, update, delete or unchanged.
	Action Action
	// Changed lists, for an update, the top-level inputs that differ ("source"
	// for the source blob), sorted; unknown inputs count as changed.
	Changed []string
	// Unknown lists the inputs whose value is known only after apply, because
	// they reference an output of a resource that is yet to be created, as
	// Terraform shows "(known after apply)". Sorted.
	Unknown []string
	// Inputs are the desired inputs with every known reference resolved;
	// unknown ones are left as written. For a delete, the recorded inputs.
	Inputs map[string]any
}

// Count returns how many changes have the action.
func (p Plan) Count(a Action) int {
	n := 0
	for _, c := range p.Changes {
		if c.Action == a {
			n++
		}
	}
	return n
}

// HasChanges reports whether applying the plan would do anything.
func (p Plan) HasChanges() bool { return p.Count(ActionUnchanged) < len(p.Changes) }

// Plan works out what Reconcile would do to project for graph, refusing a bad
// graph the same way. Outputs of parents still to be created are unknown and
// make the inputs that reference them unknown; an update is assumed to keep
// its outputs (if it does not, Reconcile updates the children that use them).
func (r *Reconciler) Plan(ctx context.Context, project string, graph Graph) (Plan, error) {
	st, err := r.prepare(ctx, project, graph)
	if err != nil {
		return Plan{Project: project}, err
	}
	return st.plan()
}

func (st *state) plan() (Plan, error) {
	p := Plan{Project: st.project, Changes: make([]Change, 0, len(st.graph.nodes)+len(st.unwanted))}
	// known holds the outputs of the resources whose outputs are known before
	// apply: those unchanged or updated.
	known := make(map[string]map[string]any, len(st.graph.nodes))
	for _, n := range st.graph.nodes {
		prev := st.deployed[n.key]
		resolved, unknown, err := resolvePartly(n, func(parent string) (map[string]any, bool) {
			out, ok := known[parent]
			return out, ok
		})
		if err != nil {
			return Plan{Project: st.project}, err
		}
		action, changed := decide(n, resolved, unknown, prev)
		c := Change{Key: n.key, Action: action, Changed: changed, Unknown: unknown, Inputs: resolved}
		if prev != nil {
			c.ID = prev.ID
			if !prev.Pending {
				known[n.key] = prev.Outputs
			}
		}
		p.Changes = append(p.Changes, c)
	}
	for _, u := range st.unwanted {
		p.Changes = append(p.Changes, Change{Key: u.rec.Key(), ID: u.rec.ID, Action: ActionDelete, Inputs: resource.Clone(u.rec.Inputs)})
	}
	return p, nil
}
