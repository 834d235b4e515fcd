package desired

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

// ConflictError reports a route or published port that a workload of another
// project (or namespace) holds. Both are claims on the whole cluster: every
// host's ingress answers every route and published port, wherever the
// replicas behind it run.
type ConflictError struct {
	Claim  string // "port 8088", "route shop.localhost/api"
	Holder string // the holding workload, namespace/project/egg
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%s is held by egg %s (routes and published ports are claims on the whole cluster): "+
		"pick another, or remove it from that egg first", e.Claim, e.Holder)
}

// projectOf is a workload's "<namespace>/<project>".
func projectOf(w contract.WorkloadSpec) string { return resource.Project(w.Namespace, w.Project) }

// routeOf returns the contract's form of a route: "/" is the whole host.
func routeOf(r inputs.Route, acme bool) (contract.Route, error) {
	path := r.Path
	if path == "/" {
		path = ""
	}
	out := contract.Route{Host: r.Host, PathPrefix: path, TLS: tlsMode(r, acme), HSTS: r.HSTS}
	if out.TLS == contract.TLSOff {
		out.HSTS = false // HSTS over plain HTTP means nothing
	}
	if r.UpstreamTimeout != "" {
		d, err := time.ParseDuration(r.UpstreamTimeout)
		if err != nil || d <= 0 {
			return contract.Route{}, backoff.Permanent(fmt.Errorf("route %s%s: upstream_timeout %q is not a positive duration (30s)", r.Host, r.Path, r.UpstreamTimeout))
		}
		out.UpstreamTimeout = d
	}
	return out, nil
}

func routeClaim(r contract.Route) string { return "route " + r.Host + r.PathPrefix }

// checkPorts refuses published ports that another project holds on any host.
// Conflicts are permanent: retrying does not free the port.
func (v *view) checkPorts(project string, ports []contract.PublishedPort) error {
	for _, p := range ports {
		if holder, ok := v.portHolder(project, p.HostPort); ok {
			return backoff.Permanent(&ConflictError{Claim: fmt.Sprintf("port %d", p.HostPort), Holder: holder})
		}
	}
	return nil
}

// checkRoute refuses a route another project holds on any host.
func (v *view) checkRoute(project string, r contract.Route) error {
	if holder, ok := v.routeHolder(project, r); ok {
		return backoff.Permanent(&ConflictError{Claim: routeClaim(r), Holder: holder})
	}
	return nil
}

// portHolder returns the workload of another project publishing port, on
// whichever host (the first by host ID, so the answer is stable).
func (v *view) portHolder(project string, port int) (string, bool) {
	return v.holder(project, func(w contract.WorkloadSpec) bool {
		return slices.ContainsFunc(w.Ports, func(p contract.PublishedPort) bool { return p.HostPort == port })
	})
}

// routeHolder returns the workload of another project holding the route, on
// whichever host.
func (v *view) routeHolder(project string, r contract.Route) (string, bool) {
	return v.holder(project, func(w contract.WorkloadSpec) bool { return slices.ContainsFunc(w.Routes, r.Same) })
}

// holder returns the first workload of another project for which holds is
// true, hosts in ID order.
func (v *view) holder(project string, holds func(contract.WorkloadSpec) bool) (string, bool) {
	for _, host := range slices.Sorted(maps.Keys(v.states)) {
		for _, w := range v.states[host].Workloads {
			if projectOf(w) != project && holds(w) {
				return w.ID(), true
			}
		}
	}
	return "", false
}
