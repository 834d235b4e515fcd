package agent

import (
	"context"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/docker"
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

// Inspector looks up a container's network settings, for the address the
// ingress forwards to. A *client.Client of the Docker SDK is one.
type Inspector interface {
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
}

// routingTable is the ingress table for the desired workloads that have
// routes or published ports: each with its local containers that run, healthy
// or not (the ingress sends traffic only to the healthy ones). addr returns a
// container's IP on the workload's network, or "" when it has none (such a
// container is left out). Pure: the I/O is in addr.
func routingTable(desired contract.DesiredState, actual []docker.Container, addr func(docker.Container, contract.WorkloadSpec) string) ingress.Table {
	byWorkload := make(map[string][]docker.Container)
	for _, c := range actual {
		if c.Placeholder() || c.State != contract.StateRunning || !docker.Owned(c.Labels, desired.HostID) {
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
			ip := addr(c, w)
			if ip == "" || port == 0 {
				continue
			}
			e.Backends = append(e.Backends, ingress.Backend{
				ContainerID: c.ID,
				Addr:        net.JoinHostPort(ip, strconv.Itoa(port)),
				Healthy:     c.Healthy,
			})
		}
		t.Eggs = append(t.Eggs, e)
	}
	return t
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

// addressBook remembers containers' IPs, looked up once per incarnation (an
// IP may change when a container restarts, never while it runs).
type addressBook struct {
	insp    Inspector
	timeout time.Duration

	mu      sync.Mutex // guards entries
	entries map[string]addressEntry
}

type addressEntry struct {
	startedAt time.Time
	ips       map[string]string // by network name
}

func newAddressBook(insp Inspector) *addressBook {
	return &addressBook{insp: insp, timeout: 5 * time.Second, entries: map[string]addressEntry{}}
}

// lookup returns c's IP on w's first network (the one it was created on), or
// on any network; "" when unknown.
func (b *addressBook) lookup(ctx context.Context, c docker.Container, w contract.WorkloadSpec) string {
	b.mu.Lock()
	e, ok := b.entries[c.ID]
	b.mu.Unlock()
	if !ok || !e.startedAt.Equal(c.StartedAt) {
		ctx, cancel := context.WithTimeout(ctx, b.timeout)
		info, err := b.insp.ContainerInspect(ctx, c.ID)
		cancel()
		if err != nil || info.NetworkSettings == nil {
			return ""
		}
		e = addressEntry{startedAt: c.StartedAt, ips: map[string]string{}}
		for name, ep := range info.NetworkSettings.Networks {
			if ep != nil && ep.IPAddress != "" {
				e.ips[name] = ep.IPAddress
			}
		}
		b.mu.Lock()
		b.entries[c.ID] = e
		b.mu.Unlock()
	}
	if len(w.Networks) > 0 {
		if ip := e.ips[w.Networks[0]]; ip != "" {
			return ip
		}
	}
	for _, ip := range e.ips {
		return ip
	}
	return ""
}

// keepOnly forgets the containers not in actual.
func (b *addressBook) keepOnly(actual []docker.Container) {
	live := make(map[string]bool, len(actual))
	for _, c := range actual {
		live[c.ID] = true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for id := range b.entries {
		if !live[id] {
			delete(b.entries, id)
		}
	}
}
