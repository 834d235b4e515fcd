package provider

import (
	"context"

	"github.com/hatchery/hatchery/internal/desired"
	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/resource"
)

// eggProvider places eggs and writes their workloads.
type eggProvider struct{ s *Set }

func (eggProvider) Schema() reconciler.Schema {
	return reconciler.Schema{
		Outputs:    outputsOf(resource.Egg),
		Conditions: []resource.Condition{resource.ConditionHealthy, resource.ConditionCompleted},
	}
}

func (eggProvider) Diff(deployed, desired map[string]any) []string {
	return reconciler.DiffInputs(deployed, desired)
}

// Create places the egg and writes its workloads; an egg an earlier attempt
// placed already keeps its slots.
func (p eggProvider) Create(ctx context.Context, project string, r *resource.Deployed) (map[string]any, error) {
	e, err := desired.NewEgg(project, r.Name, r.Inputs, r.Source, 0)
	if err != nil {
		return nil, err
	}
	return p.s.PlaceEgg(ctx, project, e, nil)
}

// Update places the egg at its new inputs, keeping its revision, and
// remembers the inputs it had when its spec changes (what auto-revert puts
// back).
func (p eggProvider) Update(ctx context.Context, project string, prev, next *resource.Deployed) (map[string]any, error) {
	rev := desired.RevisionOf(prev.Outputs)
	e, err := desired.NewEgg(project, next.Name, next.Inputs, next.Source, rev)
	if err != nil {
		return nil, err
	}
	previous := desired.PreviousOf(prev.Outputs)
	if old, err := desired.NewEgg(project, prev.Name, prev.Inputs, prev.Source, rev); err == nil && old.SpecHash() != e.SpecHash() {
		previous = &desired.Previous{Inputs: resource.Clone(prev.Inputs), Source: prev.Source}
	}
	return p.s.PlaceEgg(ctx, project, e, previous)
}

// Delete removes the egg's workloads from every host.
func (p eggProvider) Delete(ctx context.Context, project string, r *resource.Deployed) error {
	return p.s.RemoveEgg(ctx, project, r.Name)
}

// Ready checks the egg's replicas in its hosts' latest reports.
func (p eggProvider) Ready(ctx context.Context, project string, r *resource.Deployed, cond resource.Condition) (bool, string, error) {
	return p.s.EggReady(ctx, project, r, cond)
}
