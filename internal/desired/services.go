package desired

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/hatchery/hatchery/internal/contract"
)

// SyncPeers writes every host's desired state again with its Services and
// Peers as the fleet and the workloads are now, changing no workload: only
// the states whose content changed are written, so calling it when nothing
// changed wakes no agent. Every update of desired states derives them too;
// the control plane calls SyncPeers when the valid host set or its addresses
// change without a workload moving: a host joined, a host was removed, a
// host reported mesh addresses other than its last report's, and once at
// start (states written before Peers existed carry none).
func (s *States) SyncPeers(ctx context.Context) error {
	return s.update(ctx, func(*view) error { return nil })
}

// derive sets every state's Services (ServicesByHost) and the fleet's peers
// (the valid host set, each peer reaching its own state's services on the
// ports its ingress and relays stream to: Service.StreamPorts).
func (v *view) derive() {
	for _, d := range v.states {
		d.FenceAfter = v.fenceAfter
	}
	workloads := make(map[string][]contract.WorkloadSpec, len(v.states))
	for id, d := range v.states {
		workloads[id] = d.Workloads
	}
	services := ServicesByHost(workloads)
	peers := make([]contract.PeerHost, len(v.hosts))
	for i, h := range v.hosts {
		peers[i] = contract.PeerHost{ID: h.ID, Name: h.Name, Removed: h.Removed, MeshAddresses: v.mesh[h.ID]}
	}
	valid := contract.ValidPeers(peers, func(host string) []contract.Reach {
		reach := make([]contract.Reach, len(services[host]))
		for i, s := range services[host] {
			reach[i] = contract.Reach{Workload: s.ID(), Ports: s.StreamPorts()}
		}
		return reach
	})
	for id, d := range v.states {
		d.Services = services[id]
	}
	v.peers = valid
	v.deriveTLS()
}

// ServicesByHost returns what each host serves (DesiredState.Services), by
// host ID, from the workloads of every host (host ID -> its workloads):
//
//   - every egg of the cluster with routes or published ports, on every host;
//   - on a host, every egg with a port of a project whose networks a
//     workload there joins too (the egg's own included): Compose services
//     call each other by name without a reference, and before relays Docker's
//     DNS found the egg's replicas on any shared network. It carries the
//     names the egg is reached by and those shared networks of the host,
//     where relays stand for it, since no replica carries its name;
//   - on a host, every egg a workload there uses (WorkloadSpec.Uses), even
//     on no shared network (it is then reached by no name there).
//
// Each list is sorted by ID. An egg placed nowhere (no replicas) is served
// nowhere: nothing says what it listens on, and nothing could answer; an
// egg without a port is carried by no relay (a relay listens on the port).
//
// It is pure, so every write of desired states derives the same services
// from the same workloads.
func ServicesByHost(workloads map[string][]contract.WorkloadSpec) map[string][]contract.Service {
	hosts := slices.Sorted(maps.Keys(workloads))
	eggs := map[string]*served{}
	byProject := map[string][]*served{} // namespace/project -> its placed eggs
	for _, host := range hosts {
		for _, w := range workloads[host] {
			if w.Replicas <= 0 {
				continue
			}
			e, ok := eggs[w.ID()]
			if !ok {
				e = newServed(w, host)
				eggs[w.ID()] = e
				byProject[w.Namespace+"/"+w.Project] = append(byProject[w.Namespace+"/"+w.Project], e)
			}
			e.hosts = append(e.hosts, host)
		}
	}
	out := make(map[string][]contract.Service, len(hosts))
	for _, host := range hosts {
		byID := map[string]contract.Service{}
		for id, e := range eggs {
			if len(e.entry.Routes) > 0 || len(e.entry.Ports) > 0 {
				byID[id] = e.service()
			}
		}
		// reached makes e reached by name on host, on networks (maybe none).
		reached := func(e *served, networks []string) {
			s, ok := byID[e.entry.ID()]
			if !ok {
				s = e.service()
			}
			if len(s.Names) == 0 {
				s.Names = e.names()
			}
			for _, n := range networks {
				if !slices.Contains(s.Networks, n) {
					s.Networks = append(s.Networks, n)
				}
			}
			slices.Sort(s.Networks)
			byID[e.entry.ID()] = s
		}
		for _, w := range workloads[host] {
			if w.Replicas <= 0 {
				continue
			}
			for _, e := range byProject[w.Namespace+"/"+w.Project] {
				if e.entry.Port <= 0 {
					continue
				}
				if shared := e.sharedNetworks(host, w); len(shared) > 0 {
					reached(e, shared)
				}
			}
			for _, name := range w.Uses {
				if e, ok := eggs[contract.WorkloadID(w.Namespace, w.Project, name)]; ok {
					reached(e, e.sharedNetworks(host, w))
				}
			}
		}
		if len(byID) == 0 {
			continue
		}
		list := make([]contract.Service, 0, len(byID))
		for _, id := range slices.Sorted(maps.Keys(byID)) {
			list = append(list, byID[id])
		}
		out[host] = list
	}
	return out
}

// served is an egg as the hosts placed to run it hold it.
type served struct {
	entry    contract.WorkloadSpec // its entry on the first of hosts: they differ only in host-local names
	networks []string              // the project's names of its networks (not Docker's, which differ by host)
	hosts    []string              // with replicas, sorted
}

// newServed returns the egg of entry, a workload of it on host.
func newServed(entry contract.WorkloadSpec, host string) *served {
	e := &served{entry: entry}
	for _, docker := range entry.Networks {
		if name, ok := networkOf(docker, host, entry.Namespace, entry.Project); ok {
			e.networks = append(e.networks, name)
		}
	}
	return e
}

// service is the egg's Service without the parts that depend on the host
// serving it (Names, Networks).
func (e *served) service() contract.Service {
	w := e.entry
	return contract.Service{
		Namespace: w.Namespace, Project: w.Project, Egg: w.Egg,
		Port:         w.Port,
		Hosts:        slices.Clone(e.hosts),
		Routes:       slices.Clone(w.Routes),
		Ports:        slices.Clone(w.Ports),
		DrainTimeout: w.Rollout.DrainTimeout,
	}
}

// names are the DNS names consumers reach the egg by.
func (e *served) names() []string { return eggNames(e.entry.Egg, e.entry.Aliases) }

// eggNames are the DNS names consumers reach an egg by: its name, then its
// aliases, each once.
func eggNames(egg string, aliases []string) []string {
	names := []string{egg}
	for _, a := range aliases {
		if !slices.Contains(names, a) {
			names = append(names, a)
		}
	}
	return names
}

// sharedNetworks returns the Docker names, on host, of the egg's networks
// that consumer (a workload on host) joins too: where Docker's DNS would have
// found the egg's replicas for it.
func (e *served) sharedNetworks(host string, consumer contract.WorkloadSpec) []string {
	var out []string
	for _, name := range e.networks {
		if here := contract.NetworkName(host, e.entry.Namespace, e.entry.Project, name); slices.Contains(consumer.Networks, here) {
			out = append(out, here)
		}
	}
	return out
}

// networkOf returns a project network's name from its Docker name on host
// (contract.NetworkName, "hatch-<project>-<name>-<hash>"), checked by
// naming it again: workloads carry only Docker names, which differ by host.
func networkOf(docker, host, namespace, project string) (string, bool) {
	rest, ok := strings.CutPrefix(docker, "hatch-"+project+"-")
	i := strings.LastIndexByte(rest, '-')
	if !ok || i < 0 {
		return "", false
	}
	name := rest[:i]
	return name, contract.NetworkName(host, namespace, project, name) == docker
}
