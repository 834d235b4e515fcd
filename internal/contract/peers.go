package contract

import (
	"maps"
	"slices"
	"strings"
)

// PeerHost is a host of the cluster as the control plane knows it, for
// ValidPeers: its identity (RemovedAt set by `hatch hosts remove`) and the
// mesh addresses its agent last reported.
type PeerHost struct {
	ID      string
	Name    string
	Removed bool
	// MeshAddresses are StatusReport.MeshAddresses of its latest report.
	MeshAddresses []string
}

// ValidPeers is the valid host set every desired state carries (Peers):
// every host not removed, in ID order, down hosts included (a host that
// comes back is not refused), each with the streams it may open, which
// reaches gives from that host's own desired state (merged by workload,
// sorted, those without a port left out) and their workloads as Reaches.
// It is pure: the control plane calls it whenever it writes desired states,
// and when the host set changes (a join, a removal, new mesh addresses) it
// writes every host's state anew with it.
func ValidPeers(hosts []PeerHost, reaches func(hostID string) []Reach) []Peer {
	var out []Peer
	for _, h := range hosts {
		if h.Removed {
			continue
		}
		p := Peer{HostID: h.ID, Name: h.Name, Addresses: slices.Clone(h.MeshAddresses)}
		p.Streams = mergeReach(reaches(h.ID))
		for _, r := range p.Streams {
			p.Reaches = append(p.Reaches, r.Workload)
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Peer) int { return strings.Compare(a.HostID, b.HostID) })
	return out
}

// mergeReach returns rs with one entry per workload, sorted, each with its
// ports sorted once, and without entries of no port; nil if none is left.
func mergeReach(rs []Reach) []Reach {
	byWorkload := map[string][]int{}
	for _, r := range rs {
		byWorkload[r.Workload] = append(byWorkload[r.Workload], r.Ports...)
	}
	var out []Reach
	for _, w := range slices.Sorted(maps.Keys(byWorkload)) {
		if ports := slices.Compact(slices.Sorted(slices.Values(byWorkload[w]))); len(ports) > 0 {
			out = append(out, Reach{Workload: w, Ports: ports})
		}
	}
	return out
}

// RoutedWorkloads returns the IDs of the workloads a host's ingress routes
// (those with routes in its desired state), sorted: part of what the host
// may reach through the mesh. The other part, the workloads its consumers
// reference, joins it when desired states carry references.
func RoutedWorkloads(d DesiredState) []string {
	var ids []string
	for _, w := range d.Workloads {
		if len(w.Routes) > 0 || len(w.Ports) > 0 {
			ids = append(ids, w.ID())
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}
