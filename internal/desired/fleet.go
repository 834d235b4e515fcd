package desired

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

// DefaultCapacity is what a host whose capacity nobody knows is taken to
// offer when no host of the fleet reported one either (agents that do not
// report it): the same for every host, so "least loaded" still compares the
// memory and CPU the hosts' replicas requested, and large enough that
// nothing is refused for lack of room.
var DefaultCapacity = placement.DefaultMaxHostCapacity

// CapacityLister lists the hosts' capacity baselines and pins, in one read.
type CapacityLister interface {
	AllHostCapacities(ctx context.Context) ([]store.HostCapacity, error)
}

// StoreFleet is the Fleet of a store: liveness from the hosts table (a down
// host's StateSince is when it went down), names and removals from the joined
// hosts' identities, capacities and mesh addresses from the hosts' latest
// status reports, each capacity as placement.BelieveCapacities believes it.
type StoreFleet struct {
	List HostLister
	// Identities give hosts their names and say which were removed; nil, or a
	// host without an identity, means the host is named by its ID.
	Identities store.HostIdentities
	// Reports give hosts the capacity and mesh addresses their agents
	// report; nil, or a host whose agent did not report a capacity, means
	// Capacity (and no mesh addresses).
	Reports ReportLister
	// Capacities are the hosts' baselines and pins; nil means none, and
	// reports are then believed up to MaxCapacity only.
	Capacities CapacityLister
	// MaxCapacity caps what any report is believed at; zero means
	// placement.DefaultMaxHostCapacity.
	MaxCapacity placement.Resources
	// Capacity of a host when no host's capacity is known; zero means
	// DefaultCapacity.
	Capacity placement.Resources
	// LoopbackMesh is fleet.Config.LoopbackMesh: whether loopback mesh
	// addresses may be handed to peers. A report whose mesh addresses
	// fail contract.CheckMeshAddresses (one stored before the fleet
	// checked them, or by a server listening on loopback) gives its host
	// no address: peers are never handed what they must not dial.
	LoopbackMesh bool
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
	records, err := f.capacities(ctx)
	if err != nil {
		return nil, err
	}
	claims := make([]placement.CapacityClaim, len(hosts))
	for i, h := range hosts {
		claims[i] = CapacityClaim(h.ID, reports[h.ID].Capacity, records[h.ID])
	}
	assumed := f.Capacity
	if assumed == (placement.Resources{}) {
		assumed = DefaultCapacity
	}
	beliefs := placement.BelieveCapacities(claims, f.MaxCapacity, assumed)
	out := make([]FleetHost, 0, len(hosts))
	for i, h := range hosts {
		sh := FleetHost{Host: placement.Host{ID: h.ID, Name: h.ID, Capacity: beliefs[i].Believed, State: placement.HostUnknown}}
		switch h.State {
		case store.HostUp:
			sh.State = placement.HostLive
			if reports[h.ID].Engine != nil {
				// Up, but its Docker Engine does not answer: it keeps its
				// replicas and gets no new one (placement's unknown).
				sh.State = placement.HostUnknown
			}
		case store.HostDown:
			sh.State, sh.DownSince = placement.HostDown, h.StateSince
		}
		if id, ok := ids[h.ID]; ok {
			sh.Name, sh.Removed = id.Name, id.Removed()
		}
		if rep := reports[h.ID]; contract.CheckMeshAddresses(rep.MeshAddresses, f.LoopbackMesh) == nil {
			sh.MeshAddresses = rep.MeshAddresses
		}
		out = append(out, sh)
	}
	return out, nil
}

// CapacityClaim puts together what a host reported of its capacity (nil:
// nothing) and the control plane's record of it, for
// placement.BelieveCapacities.
func CapacityClaim(hostID string, reported *contract.HostCapacity, rec store.HostCapacity) placement.CapacityClaim {
	c := placement.CapacityClaim{HostID: hostID,
		Baseline: placement.Resources{Memory: rec.Baseline.Memory, MilliCPU: rec.Baseline.MilliCPU},
		Pinned:   placement.Resources{Memory: rec.Pinned.Memory, MilliCPU: rec.Pinned.MilliCPU}}
	if reported != nil {
		c.Reported = placement.Resources{Memory: reported.MemoryBytes, MilliCPU: reported.MilliCPU}
	}
	return c
}

// capacities reads every host's capacity record, by host ID (none without
// Capacities).
func (f StoreFleet) capacities(ctx context.Context) (map[string]store.HostCapacity, error) {
	if f.Capacities == nil {
		return nil, nil
	}
	all, err := f.Capacities.AllHostCapacities(ctx)
	if err != nil {
		return nil, fmt.Errorf("host capacities: %w", err)
	}
	out := make(map[string]store.HostCapacity, len(all))
	for _, c := range all {
		out[c.HostID] = c
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
