package desired

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/placement"
	"github.com/hatchery/hatchery/internal/store"
)

// view is the fleet as one operation sees it: the hosts the scheduler knows
// and the desired state of each.
type view struct {
	hosts  []placement.Host                  // as the fleet lists them, Placed left empty
	mesh   map[string][]string               // host ID -> the mesh addresses it reported
	states map[string]*contract.DesiredState // by host ID, one per listed host, without peers
	loaded map[string]string                 // host ID -> stored version when loaded
	// peers is the valid host set, which every host's state carries but
	// which is stored once (store.PeerList): set by derive.
	peers []contract.Peer
	// fenceAfter is every state's FenceAfter (the server's --fence-after):
	// set by derive, so a changed setting reaches a host with the next
	// change of any state.
	fenceAfter time.Duration
}

// read loads the view without the lock: for readiness and previews, which
// change nothing. Every host's state comes from one read of the store.
func (s *States) read(ctx context.Context) (*view, error) {
	fleet, err := s.fleet.Hosts(ctx)
	if err != nil {
		return nil, fmt.Errorf("list hosts: %w", err)
	}
	all, err := s.desired.AllDesiredStates(ctx)
	if err != nil {
		return nil, err
	}
	stored := make(map[string]store.DesiredState, len(all))
	for _, d := range all {
		stored[d.HostID] = d
	}
	v := &view{hosts: make([]placement.Host, len(fleet)), mesh: make(map[string][]string, len(fleet)),
		states: make(map[string]*contract.DesiredState, len(fleet)), loaded: make(map[string]string, len(fleet)),
		fenceAfter: s.fence}
	for i, h := range fleet {
		v.hosts[i], v.mesh[h.ID] = h.Host, h.MeshAddresses
		st, ok := stored[h.ID]
		if !ok {
			st = store.DesiredState{HostID: h.ID}
		}
		d, err := store.DecodeDesiredState(s.box, st)
		if err != nil {
			return nil, err
		}
		// A state written before the peer list was stored apart carries
		// its own copy: its stored version differs from the content's, so
		// the next update writes it without.
		d.Peers = nil
		v.states[h.ID] = &d
		v.loaded[h.ID] = st.Version
	}
	return v, nil
}

// update runs change on the view under the lock, derives every state's
// Services and the fleet's Peers from the result, and then writes the
// states whose content changed, and the peers if they changed, in one
// write. If change fails nothing is written.
func (s *States) update(ctx context.Context, change func(v *view) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.read(ctx)
	if err != nil {
		return err
	}
	if err := change(v); err != nil {
		return err
	}
	v.derive()
	return s.commit(ctx, v)
}

// commit writes, in one store write, the states whose content changed and
// the peer list if it changed: an apply's hosts all learn of it from one
// commit.
func (s *States) commit(ctx context.Context, v *view) error {
	now := s.now() // when this version was written: what the fleet benchmark measures delivery from
	var writes []store.DesiredState
	for _, id := range slices.Sorted(maps.Keys(v.states)) {
		d := v.states[id]
		d.Version = d.ContentVersion()
		if d.Version == v.loaded[id] {
			continue
		}
		enc, err := store.EncodeDesiredState(s.box, *d)
		if err != nil {
			return err
		}
		enc.UpdatedAt = now
		writes = append(writes, enc)
	}
	stored, err := s.desired.DesiredPeers(ctx)
	if err != nil {
		return err
	}
	var peers *store.PeerList
	if contract.PeersVersion(v.peers) != stored.Version {
		l, err := store.EncodePeers(v.peers)
		if err != nil {
			return err
		}
		l.UpdatedAt = now
		peers = &l
	}
	if len(writes) == 0 && peers == nil {
		return nil
	}
	if _, err := s.desired.PutDesiredStates(ctx, writes, peers); err != nil {
		return err
	}
	for _, w := range writes {
		v.loaded[w.HostID] = w.Version
	}
	s.log.Debug("desired states written", zap.Int("hosts", len(writes)), zap.Bool("peers", peers != nil))
	return nil
}

// scheduled returns the hosts for the scheduler, each with the workloads it
// holds as allocations.
func (v *view) scheduled() []placement.Host {
	out := make([]placement.Host, len(v.hosts))
	for i, h := range v.hosts {
		h.Placed = nil
		for _, w := range v.states[h.ID].Workloads {
			h.Placed = append(h.Placed, placement.Allocation{Workload: w.ID(), Slots: w.Replicas, PerSlot: perSlot(w)})
		}
		out[i] = h
	}
	return out
}

// perSlot is what one slot of a workload requested.
func perSlot(w contract.WorkloadSpec) placement.Resources {
	return placement.Resources{Memory: w.Resources.MemoryBytes, MilliCPU: w.Resources.NanoCPUs / 1_000_000}
}

// host returns the listed host with the ID.
func (v *view) host(id string) (placement.Host, bool) {
	for _, h := range v.hosts {
		if h.ID == id {
			return h, true
		}
	}
	return placement.Host{}, false
}

// name returns a host's name for messages, its ID if it is not listed.
func (v *view) name(id string) string {
	if h, ok := v.host(id); ok && h.Name != "" {
		return h.Name
	}
	return id
}

// slotsOf returns where a workload runs now: host ID -> slots.
func (v *view) slotsOf(id string) map[string]int {
	out := map[string]int{}
	for host, d := range v.states {
		if w, ok := d.Workload(id); ok && w.Replicas > 0 {
			out[host] = w.Replicas
		}
	}
	return out
}

// workloadsOf returns a workload's entry on each host that has one.
func (v *view) workloadsOf(id string) map[string]contract.WorkloadSpec {
	out := map[string]contract.WorkloadSpec{}
	for host, d := range v.states {
		if w, ok := d.Workload(id); ok {
			out[host] = w
		}
	}
	return out
}

// setWorkload makes specs (host ID -> the workload's entry there) the
// workload's only entries.
func (v *view) setWorkload(id string, specs map[string]contract.WorkloadSpec) {
	for host, d := range v.states {
		d.Workloads = slices.DeleteFunc(d.Workloads, func(w contract.WorkloadSpec) bool { return w.ID() == id })
		if w, ok := specs[host]; ok {
			d.Workloads = append(d.Workloads, w)
			slices.SortFunc(d.Workloads, func(a, b contract.WorkloadSpec) int { return strings.Compare(a.ID(), b.ID()) })
		}
	}
}

// anyLive reports whether some host takes new replicas.
func (v *view) anyLive() bool {
	for _, h := range v.hosts {
		if h.State == placement.HostLive && !h.Removed {
			return true
		}
	}
	return false
}
