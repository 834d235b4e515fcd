package provider

import (
	"context"

	"github.com/hatchery/hatchery/internal/scheduler"
	"github.com/hatchery/hatchery/internal/store"
)

// Fleet lists the hosts replicas may be placed on, as the scheduler sees
// them (their Placed allocations are filled in from the desired states).
type Fleet interface {
	Hosts(ctx context.Context) ([]scheduler.Host, error)
}

// HostLister lists hosts with their liveness.
type HostLister interface {
	ListHosts(ctx context.Context) ([]store.Host, error)
}

// DefaultCapacity is a host's capacity while agents do not report theirs: so
// large that nothing is refused for lack of room, and the same for every host,
// so "least loaded" still compares the memory and CPU the hosts' replicas
// requested.
var DefaultCapacity = scheduler.Resources{Memory: 1 << 50, MilliCPU: 1 << 30}

// StoreFleet is the Fleet of a store: liveness from the hosts table (a down
// host's StateSince is when it went down), names and removals from the joined
// hosts' identities.
type StoreFleet struct {
	List HostLister
	// Identities give hosts their names and say which were removed; nil, or a
	// host without an identity, means the host is named by its ID.
	Identities store.HostIdentities
	// Capacity of every host; zero means DefaultCapacity.
	Capacity scheduler.Resources
}

var _ Fleet = StoreFleet{}

// Hosts returns every host the store knows, sorted by ID.
func (f StoreFleet) Hosts(ctx context.Context) ([]scheduler.Host, error) {
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
	capacity := f.Capacity
	if capacity == (scheduler.Resources{}) {
		capacity = DefaultCapacity
	}
	out := make([]scheduler.Host, 0, len(hosts))
	for _, h := range hosts {
		sh := scheduler.Host{ID: h.ID, Name: h.ID, Capacity: capacity, State: scheduler.HostUnknown}
		switch h.State {
		case store.HostUp:
			sh.State = scheduler.HostLive
		case store.HostDown:
			sh.State, sh.DownSince = scheduler.HostDown, h.StateSince
		}
		if id, ok := ids[h.ID]; ok {
			sh.Name, sh.Removed = id.Name, id.Removed()
		}
		out = append(out, sh)
	}
	return out, nil
}
