package agent

import (
	"net"
	"strconv"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/converge"
	"github.com/hatchery/hatchery/internal/ingress"
)

// Router is the host's ingress as the agent feeds it: the routing table after
// every converge, and containers that died as soon as Docker says so.
// *ingress.Ingress is one.
type Router interface {
	Update(t ingress.Table) error
	Gone(containerID string)
}

var _ Router = (*ingress.Ingress)(nil)

// routingTable is the ingress table for the desired workloads that have
// routes or published ports: each with its local containers that run, in
// the pool or not (see inPool). A container whose address is not known yet
// is left out. history is the converge engine's memory of each container's
// health. Pure.
func routingTable(desired contract.DesiredState, actual []containers.Container, history *converge.History) ingress.Table {
	byWorkload := make(map[string][]containers.Container)
	for _, c := range actual {
		if c.Placeholder() || c.State != contract.StateRunning || !containers.Owned(c.Labels, desired.HostID) {
			continue
		}
		byWorkload[c.WorkloadID] = append(byWorkload[c.WorkloadID], c)
	}
	var t ingress.Table
	seen := make(map[string]bool)
	for _, w := range desired.Workloads {
		if seen[w.ID()] || (len(w.Routes) == 0 && len(w.Ports) == 0) {
			continue
		}
		seen[w.ID()] = true
		port := servingPort(w)
		e := ingress.Egg{Name: w.ID(), DrainTimeout: w.DrainTimeout()}
		for _, r := range w.Routes {
			e.Routes = append(e.Routes, ingress.Route{Host: r.Host, PathPrefix: r.PathPrefix})
		}
		for _, p := range w.Ports {
			e.Ports = append(e.Ports, ingress.Port{Published: p.HostPort, Target: p.ContainerPort})
		}
		// Containers of every spec hash are backends: during a roll the old
		// one serves until it is drained.
		for _, c := range byWorkload[w.ID()] {
			if c.IP == "" || port == 0 {
				continue
			}
			e.Backends = append(e.Backends, ingress.Backend{
				ContainerID: c.ID,
				Addr:        net.JoinHostPort(c.IP, strconv.Itoa(port)),
				Healthy:     inPool(c, history, w.HealthRetries()),
			})
		}
		t.Eggs = append(t.Eggs, e)
	}
	return t
}

// inPool says whether a container takes traffic. It joins once it passes a
// health check, and then stays until it has failed retries checks in a row,
// the point where the converge engine counts it unhealthy and restarts it.
// Leaving at the first failed check would let one slow probe round on a busy
// host take every replica out at once and answer 503 for an egg that serves
// (seen in the e2e load tests); a backend that really stopped answering
// leaves sooner anyway, on its failed dial or its die event.
func inPool(c containers.Container, history *converge.History, retries int) bool {
	if c.Healthy {
		return true
	}
	if history == nil {
		return false
	}
	// HealthyStart is the start of the last incarnation seen healthy: a
	// container restarted since then is booting and waits for a pass.
	seen := history.Containers[c.ID].HealthyStart
	return !seen.IsZero() && seen.Equal(c.StartedAt) && c.FailingStreak < retries
}

// servingPort is the port HTTP routes reach in the workload's containers:
// its port, else the first published port's target.
func servingPort(w contract.WorkloadSpec) int {
	if w.Port > 0 {
		return w.Port
	}
	for _, p := range w.Ports {
		if p.ContainerPort > 0 {
			return p.ContainerPort
		}
	}
	return 0
}
