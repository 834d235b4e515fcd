package desired

import (
	"context"
	"slices"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

// AttachRoute puts the deployed route on its egg's workloads, on every host
// running it, after checking that no other project holds it (or its
// hostname's TLS settings) anywhere, and takes it off any other workload of
// the project (the route moved to another egg). It returns the route as
// the hosts serve it.
func (s *States) AttachRoute(ctx context.Context, project string, r *resource.Deployed) (contract.Route, error) {
	in, err := decode[inputs.Route](r.Key(), r.Inputs)
	if err != nil {
		return contract.Route{}, err
	}
	route, err := routeOf(in, s.acme)
	if err != nil {
		return contract.Route{}, err
	}
	var cert *contract.Certificate
	if route.TLS == contract.TLSSecret {
		c, err := s.userCertificate(ctx, project, in)
		if err != nil {
			return contract.Route{}, err
		}
		cert = &c
	}
	id, err := workloadID(project, in.Egg)
	if err != nil {
		return contract.Route{}, err
	}
	err = s.update(ctx, func(v *view) error {
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
	return route, err
}

// DetachRoute takes the deployed route off the project's workloads.
func (s *States) DetachRoute(ctx context.Context, project string, r *resource.Deployed) error {
	in, err := decode[inputs.Route](r.Key(), r.Inputs)
	if err != nil {
		return err
	}
	route, err := routeOf(in, s.acme)
	if err != nil {
		return err
	}
	return s.update(ctx, func(v *view) error {
		v.editProject(project, func(w *contract.WorkloadSpec) {
			w.Routes = slices.DeleteFunc(w.Routes, route.Same)
		})
		return nil
	})
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
