package contract

import (
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
// comes back is not refused), each with the workloads it may reach, which
// reaches gives from that host's own desired state. It is pure: the control
// plane calls it whenever it writes desired states, and when the host set
// changes (a join, a removal, new mesh addresses) it writes every host's
// state anew with it.
func ValidPeers(hosts []PeerHost, reaches func(hostID string) []string) []Peer {
	var out []Peer
	for _, h := range hosts {
		if h.Removed {
			continue
		}
		p := Peer{HostID: h.ID, Name: h.Name, Addresses: slices.Clone(h.MeshAddresses)}
		if r := reaches(h.ID); len(r) > 0 {
			p.Reaches = slices.Compact(slices.Sorted(slices.Values(r)))
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Peer) int { return strings.Compare(a.HostID, b.HostID) })
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
