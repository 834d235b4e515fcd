package provider

import (
	"bytes"
	"context"
	"fmt"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/placement"
	"github.com/hatchery/hatchery/internal/store"
)

// Fleet lists the hosts replicas may be placed on, as the scheduler sees
// them (their Placed allocations are filled in from the desired states),
// with where their agents' mesh is reached (every host's Peers).
type Fleet interface {
	Hosts(ctx context.Context) ([]FleetHost, error)
}

// FleetHost is a host of the fleet: as the scheduler sees it, and the mesh
// addresses its agent last reported (none before it reported any).
type FleetHost struct {
	placement.Host
	MeshAddresses []string
}

// ReportLister lists the hosts' latest status reports, all in one read:
// every operation on desired states lists the fleet.
type ReportLister interface {
	AllStatuses(ctx context.Context) ([]store.Status, error)
}

// HostLister lists hosts with their liveness.
type HostLister interface {
	ListHosts(ctx context.Context) ([]store.Host, error)
}

// DefaultCapacity is a host's capacity while agents do not report theirs: so
// large that nothing is refused for lack of room, and the same for every host,
// so "least loaded" still compares the memory and CPU the hosts' replicas
// requested.
var DefaultCapacity = placement.Resources{Memory: 1 << 50, MilliCPU: 1 << 30}

// StoreFleet is the Fleet of a store: liveness from the hosts table (a down
// host's StateSince is when it went down), names and removals from the joined
// hosts' identities, capacities and mesh addresses from the hosts' latest
// status reports.
type StoreFleet struct {
	List HostLister
	// Identities give hosts their names and say which were removed; nil, or a
	// host without an identity, means the host is named by its ID.
	Identities store.HostIdentities
	// Reports give hosts the capacity and mesh addresses their agents
	// report; nil, or a host whose agent did not report a capacity, means
	// Capacity (and no mesh addresses).
	Reports ReportLister
	// Capacity of a host that reported none; zero means DefaultCapacity.
	Capacity placement.Resources
}

var _ Fleet = StoreFleet{}

// Hosts returns every host the store knows, sorted by ID.
func (f StoreFleet) Hosts(ctx context.Context) ([]FleetHost, error) {
	hosts, err := f.List.ListHosts(ctx)
	if err != nil {
		return nil, err
	}
	ids := map[string]store.HostIdentity{}
	if f.Identities != nil {
		all, err := f.Identities.ListHostIdentities(ctx)
		if err != nil {
			return nil, err
		}
		for _, id := range all {
			ids[id.ID] = id
		}
	}
	reports, err := f.reports(ctx)
	if err != nil {
		return nil, err
	}
	capacity := f.Capacity
	if capacity == (placement.Resources{}) {
		capacity = DefaultCapacity
	}
	out := make([]FleetHost, 0, len(hosts))
	for _, h := range hosts {
		sh := FleetHost{Host: placement.Host{ID: h.ID, Name: h.ID, Capacity: capacity, State: placement.HostUnknown}}
		switch h.State {
		case store.HostUp:
			sh.State = placement.HostLive
		case store.HostDown:
			sh.State, sh.DownSince = placement.HostDown, h.StateSince
		}
		if id, ok := ids[h.ID]; ok {
			sh.Name, sh.Removed = id.Name, id.Removed()
		}
		rep := reports[h.ID]
		if c := rep.Capacity; c != nil && c.MemoryBytes > 0 && c.MilliCPU > 0 {
			sh.Capacity = placement.Resources{Memory: c.MemoryBytes, MilliCPU: c.MilliCPU}
		}
		sh.MeshAddresses = rep.MeshAddresses
		out = append(out, sh)
	}
	return out, nil
}

// reports reads every host's latest report, by host ID (none without
// Reports).
func (f StoreFleet) reports(ctx context.Context) (map[string]contract.StatusReport, error) {
	if f.Reports == nil {
		return nil, nil
	}
	all, err := f.Reports.AllStatuses(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]contract.StatusReport, len(all))
	for _, st := range all {
		rep, err := contract.DecodeStatusReport(bytes.NewReader(st.Report))
		if err != nil {
			return nil, fmt.Errorf("host %s: stored report: %w", st.HostID, err)
		}
		out[st.HostID] = rep
	}
	return out, nil
}
