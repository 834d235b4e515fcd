package provider

import (
	"context"
	"slices"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
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

// attach puts the route on its egg's workloads, on every host running it,
// after checking that no other project holds it anywhere, and takes it off
// any other workload of the project (the route moved to another egg).
func (p routeProvider) attach(ctx context.Context, project string, r *resource.Deployed) (map[string]any, error) {
	in, err := decode[inputs.Route](r.Key(), r.Inputs)
	if err != nil {
		return nil, err
	}
	route, err := routeOf(in, p.s.acme)
	if err != nil {
		return nil, err
	}
	var cert *contract.Certificate
	if route.TLS == contract.TLSSecret {
		c, err := p.s.userCertificate(ctx, project, in)
		if err != nil {
			return nil, err
		}
		cert = &c
	}
	id, err := workloadID(project, in.Egg)
	if err != nil {
		return nil, err
	}
	err = p.s.states.update(ctx, func(v *view) error {
		if err := v.checkRoute(project, route); err != nil {
			return err
		}
		if err := v.checkTLS(project, route); err != nil {
			return err
		}
		if cert != nil {
			v.setCertificate(*cert)
		}
		v.editProject(project, func(w *contract.WorkloadSpec) {
			w.Routes = slices.DeleteFunc(w.Routes, route.Same)
			if w.ID() == id {
				w.Routes = append(w.Routes, route)
				sortRoutes(w.Routes)
			}
		})
		return nil
	})
	if err == nil && route.TLS == contract.TLSAuto && p.s.onAuto != nil {
		p.s.onAuto()
	}
	return map[string]any{}, err
}

// Delete takes the route off the project's workloads.
func (p routeProvider) Delete(ctx context.Context, project string, r *resource.Deployed) error {
	in, err := decode[inputs.Route](r.Key(), r.Inputs)
	if err != nil {
		return err
	}
	route, err := routeOf(in, p.s.acme)
	if err != nil {
		return err
	}
	return p.s.states.update(ctx, func(v *view) error {
		v.editProject(project, func(w *contract.WorkloadSpec) {
			w.Routes = slices.DeleteFunc(w.Routes, route.Same)
		})
		return nil
	})
}

func (routeProvider) Ready(context.Context, string, *resource.Deployed, resource.Condition) (bool, string, error) {
	return true, "", nil
}

// editProject runs edit on every workload entry of the project.
func (v *view) editProject(project string, edit func(w *contract.WorkloadSpec)) {
	for _, d := range v.states {
		for i := range d.Workloads {
			if projectOf(d.Workloads[i]) == project {
				d.Workloads[i].Routes = slices.Clone(d.Workloads[i].Routes)
				edit(&d.Workloads[i])
			}
		}
	}
}

func sortRoutes(rs []contract.Route) {
	slices.SortFunc(rs, func(a, b contract.Route) int {
		if a.Host != b.Host {
			if a.Host < b.Host {
				return -1
			}
			return 1
		}
		switch {
		case a.PathPrefix < b.PathPrefix:
			return -1
		case a.PathPrefix > b.PathPrefix:
			return 1
		}
		return 0
	})
}
