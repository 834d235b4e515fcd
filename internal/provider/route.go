package provider

import (
	"context"
	"slices"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/resource"
)

// routeProvider attaches routes to their egg's workloads.
type routeProvider struct{ s *Set }

func (routeProvider) Schema() reconciler.Schema {
	return reconciler.Schema{Outputs: outputsOf(resource.Route)}
}

// Diff ignores hosts: the input only orders the route after its egg, and the
// egg carries its routes wherever it runs, so a move needs no route update.
func (routeProvider) Diff(deployed, desired map[string]any) []string {
	return slices.DeleteFunc(reconciler.DiffInputs(deployed, desired), func(k string) bool { return k == "hosts" })
}

func (p routeProvider) Create(ctx context.Context, project string, r *resource.Deployed) (map[string]any, error) {
	return p.attach(ctx, project, r)
}

func (p routeProvider) Update(ctx context.Context, project string, _, next *resource.Deployed) (map[string]any, error) {
	return p.attach(ctx, project, next)
}

// attach puts the route on its egg's workloads (desired.States.AttachRoute)
// and, when it is served with TLSAuto, has the ACME client obtain its
// certificate now.
func (p routeProvider) attach(ctx context.Context, project string, r *resource.Deployed) (map[string]any, error) {
	route, err := p.s.AttachRoute(ctx, project, r)
	if err == nil && route.TLS == contract.TLSAuto && p.s.onAuto != nil {
		p.s.onAuto()
	}
	return map[string]any{}, err
}

// Delete takes the route off the project's workloads.
func (p routeProvider) Delete(ctx context.Context, project string, r *resource.Deployed) error {
	return p.s.DetachRoute(ctx, project, r)
}

func (routeProvider) Ready(context.Context, string, *resource.Deployed, resource.Condition) (bool, string, error) {
	return true, "", nil
}
