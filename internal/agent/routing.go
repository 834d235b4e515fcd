package agent

import (
	"fmt"
	"net"
	"strconv"

	"go.uber.org/zap"

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
	// SetProblem makes the host's /healthz answer 503 with reason (""
	// clears it): what an operator must fix on this host.
	SetProblem(reason string)
	// Challenges are the tokens of the ACME challenges it answers now,
	// which the status report carries so the control plane's order
	// proceeds once every host can answer the CA.
	Challenges() []string
	// HTTPSProblem says why it serves no HTTPS although asked to, or "".
	HTTPSProblem() string
}

var _ Router = (*ingress.Ingress)(nil)

// routingTable is the ingress table: one egg per service of the desired
// state (every egg of the cluster with routes or published ports, and every
// egg a consumer here references), with its routes, ports and drain timeout
// as the service gives them, its local containers that run (in the pool or
// not, see inPool), and the other hosts of the service as remote backends;
// then, as before services existed, each desired workload with routes or
// published ports that no service lists, local containers only. A container
// whose address is not known yet is left out, and so are the containers of
// a workload not desired here (the converge drains and stops them). A
// service that consumers here reach by name gets its relays' socket, under
// relayRoot. history is the converge engine's memory of each container's
// health. A stateful workload with a replica desired here is marked so:
// the ingress holds its requests through its gaps. Pure.
func routingTable(desired contract.DesiredState, actual []containers.Container, history *converge.History, relayRoot string) ingress.Table {
	byWorkload := make(map[string][]containers.Container)
	for _, c := range actual {
		if c.Placeholder() || c.State != contract.StateRunning || !containers.Owned(c.Labels, desired.HostID) {
			continue
		}
		byWorkload[c.WorkloadID] = append(byWorkload[c.WorkloadID], c)
	}
	var t ingress.Table
	for _, c := range desired.Certificates {
		t.Certificates = append(t.Certificates, ingress.Certificate{Host: c.Host, Chain: []byte(c.Chain), Key: []byte(c.Key)})
	}
	for _, c := range desired.Challenges {
		if c.ALPNCert != "" {
			t.ALPNChallenges = append(t.ALPNChallenges, ingress.Certificate{Host: c.Host, Chain: []byte(c.ALPNCert), Key: []byte(c.ALPNKey), Token: c.Token})
			continue
		}
		if t.Challenges == nil {
			t.Challenges = make(map[string]string, len(desired.Challenges))
		}
		t.Challenges[c.Token] = c.KeyAuth
	}
	seen := make(map[string]bool)
	for _, s := range desired.Services {
		if seen[s.ID()] {
			continue
		}
		seen[s.ID()] = true
		e := ingress.Egg{Name: s.ID(), DrainTimeout: s.DrainTimeout, Routes: ingressRoutes(s.Routes), Ports: ingressPorts(s.Ports), Port: s.Port}
		for _, h := range s.Hosts {
			if h != desired.HostID {
				e.Remote = append(e.Remote, h)
			}
		}
		if needsRelay(s) {
			e.Sockets = []ingress.Socket{{Path: relaySocket(relayRoot, s), Target: s.Port}}
		}
		if w, ok := desired.Workload(s.ID()); ok {
			if e.DrainTimeout == 0 {
				e.DrainTimeout = w.DrainTimeout()
			}
			port := s.Port
			if port == 0 {
				port = servingPort(w)
			}
			e.Backends = backends(byWorkload[w.ID()], port, history, w.HealthRetries())
			e.Stateful = holds(w)
		}
		t.Eggs = append(t.Eggs, e)
	}
	for _, w := range desired.Workloads {
		if seen[w.ID()] || (len(w.Routes) == 0 && len(w.Ports) == 0) {
			continue
		}
		seen[w.ID()] = true
		t.Eggs = append(t.Eggs, ingress.Egg{
			Name: w.ID(), DrainTimeout: w.DrainTimeout(), Routes: ingressRoutes(w.Routes), Ports: ingressPorts(w.Ports), Port: w.Port,
			Backends: backends(byWorkload[w.ID()], servingPort(w), history, w.HealthRetries()),
			Stateful: holds(w),
		})
	}
	return t
}

// holds says whether the ingress holds the workload's requests while it has
// no backend here: a stateful workload with a replica desired here, whose
// gaps (the stop-first window of a roll, a restart) end by themselves. A
// cold one, or one leaving the host, has nothing coming back to wait for.
func holds(w contract.WorkloadSpec) bool {
	return w.Stateful() && w.Replicas > 0
}

// backends are the ingress backends of a workload's running containers, at
// port. Containers of every spec hash are backends: during a roll the old
// one serves until it is drained.
func backends(cs []containers.Container, port int, history *converge.History, retries int) []ingress.Backend {
	var out []ingress.Backend
	for _, c := range cs {
		if c.IP == "" || port == 0 {
			continue
		}
		out = append(out, ingress.Backend{
			ContainerID: c.ID,
			Addr:        net.JoinHostPort(c.IP, strconv.Itoa(port)),
			Healthy:     inPool(c, history, retries),
		})
	}
	return out
}

func ingressRoutes(rs []contract.Route) []ingress.Route {
	var out []ingress.Route
	for _, r := range rs {
		out = append(out, ingress.Route{Host: r.Host, PathPrefix: r.PathPrefix, UpstreamTimeout: r.UpstreamTimeout,
			TLS: r.TLS != contract.TLSOff, HSTS: r.HSTS})
	}
	return out
}

func ingressPorts(ps []contract.PublishedPort) []ingress.Port {
	var out []ingress.Port
	for _, p := range ps {
		out = append(out, ingress.Port{Published: p.HostPort, Target: p.ContainerPort})
	}
	return out
}

// inPool says whether a container takes traffic. It joins once it passes a
// health check, and then stays until it has failed retries checks in a row,
// the point where the converge engine counts it unhealthy and restarts it.
// Leaving at the first failed check would let one slow probe round on a busy
// host take every replica out at once and answer 503 for an egg that serves
// (seen in the e2e load tests); a backend that really stopped answering
// leaves sooner anyway, on its failed dial or its die event.
func inPool(c containers.Container, history *converge.History, retries int) bool {
	if c.Paused {
		return false // frozen: it would hold every request sent to it
	}
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

// route gives the ingress the routing table for what runs now.
func (a *Agent) route(desired contract.DesiredState, actual []containers.Container) error {
	if err := a.cfg.Router.Update(routingTable(desired, actual, a.mem.History, a.relayRoot)); err != nil {
		return fmt.Errorf("update ingress: %w", err)
	}
	return a.removeStaleRelayDirs(desired)
}

// routeBeforeSteps gives the ingress the routing table for what runs as a
// converge's steps are about to start. A replica first seen healthy in this
// pass joins the pool here, before the same plan drains the container it
// replaces: were the table updated only after the pass, the egg would have
// no backend on this host between the drain and that update, and with every
// host rolling at once (a restart of the egg), none anywhere. A table that
// fails to apply is reported by the route after the pass.
func (a *Agent) routeBeforeSteps(desired contract.DesiredState, actual []containers.Container) {
	if err := a.cfg.Router.Update(routingTable(desired, actual, a.mem.History, a.relayRoot)); err != nil {
		a.log.Debug("routing table before the converge steps not applied", zap.Error(err))
	}
}
