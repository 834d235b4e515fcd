package provider

import (
	"fmt"
	"maps"
	"slices"

	"github.com/cenkalti/backoff/v4"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

// ConflictError reports a route or published port that a workload of another
// project (or namespace) holds on a host: both belong to the whole host.
type ConflictError struct {
	Claim  string // "port 8088", "route shop.localhost/api"
	Host   string // the host's name
	Holder string // the holding workload, namespace/project/egg
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%s is held on host %s by egg %s: pick another, or remove it there first", e.Claim, e.Host, e.Holder)
}

// projectOf is a workload's "<namespace>/<project>".
func projectOf(w contract.WorkloadSpec) string { return resource.Project(w.Namespace, w.Project) }

// routeOf returns the contract's form of a route: "/" is the whole host.
func routeOf(r inputs.Route) contract.Route {
	path := r.Path
	if path == "/" {
		path = ""
	}
	return contract.Route{Host: r.Host, PathPrefix: path}
}

func routeClaim(r contract.Route) string { return "route " + r.Host + r.PathPrefix }

// checkPorts refuses specs (host -> workload entry) whose published ports
// another project holds on the same host. Conflicts are permanent: retrying
// does not free the port.
func (v *view) checkPorts(project string, specs map[string]contract.WorkloadSpec) error {
	for _, host := range slices.Sorted(maps.Keys(specs)) {
		for _, p := range specs[host].Ports {
			if holder, ok := v.portHolder(host, project, p.HostPort); ok {
				return backoff.Permanent(&ConflictError{Claim: fmt.Sprintf("port %d", p.HostPort), Host: v.name(host), Holder: holder})
			}
		}
	}
	return nil
}

// portHolder returns the workload of another project holding port on host.
func (v *view) portHolder(host, project string, port int) (string, bool) {
	d, ok := v.states[host]
	if !ok {
		return "", false
	}
	for _, w := range d.Workloads {
		if projectOf(w) == project {
			continue
		}
		for _, p := range w.Ports {
			if p.HostPort == port {
				return w.ID(), true
			}
		}
	}
	return "", false
}

// routeHolder returns the workload of another project holding the route on host.
func (v *view) routeHolder(host, project string, r contract.Route) (string, bool) {
	d, ok := v.states[host]
	if !ok {
		return "", false
	}
	for _, w := range d.Workloads {
		if projectOf(w) != project && slices.Contains(w.Routes, r) {
			return w.ID(), true
		}
	}
	return "", false
}

// checkRoute refuses a route another project holds on one of hosts.
func (v *view) checkRoute(project string, r contract.Route, hosts []string) error {
	for _, host := range hosts {
		if holder, ok := v.routeHolder(host, project, r); ok {
			return backoff.Permanent(&ConflictError{Claim: routeClaim(r), Host: v.name(host), Holder: holder})
		}
	}
	return nil
}
