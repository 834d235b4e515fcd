// Package placement decides where an egg's replicas run: how many slots each
// Docker host gets. It is pure (no I/O, no clock, no goroutines): the egg
// provider hands it the hosts, the egg and the time, and writes each host's
// desired state from the answer.
//
// The rules, in the order they apply:
//
//   - Constraints first: a host must be in the egg's placement.hosts (if any)
//     and, for a stateful egg, hold its volume. A constraint is never relaxed
//     to make room. The eggs whose address an egg references are none: every
//     host reaches them, wherever they run.
//   - Stability: every current slot that is still valid is kept, so placing an
//     unchanged egg on unchanged hosts moves nothing, and placing a decision's
//     own output again returns it unchanged.
//   - Liveness: live hosts keep their slots and take new ones; hosts in state
//     unknown (not heard from since the server started) and hosts down for less
//     than the reschedule delay keep their slots but take no new ones; hosts down
//     for longer, removed hosts, and hosts no longer listed give their stateless
//     slots up to live hosts. A host that comes back gets nothing back: its
//     slots were moved, so nothing flaps and the total never exceeds the
//     replica count.
//   - Spread: a new slot goes to the eligible live host with the fewest of the
//     egg's slots, then the least loaded (the larger of its requested memory and
//     CPU shares after placement), then the first by name. Scale-down removes
//     slots in the mirror order: hosts not live first, then the most slots,
//     the most loaded, the last by name.
//   - Capacity: a slot is placed or kept only where the egg's per-replica
//     request fits beside the host's other workloads.
//   - A stateful egg runs on its volume's host or nowhere; if that host is not
//     live the egg waits there and Decision.Waiting says why.
//
// Every decision comes with one Explanation per host, saying why the host got
// what it got, so `hatch status` can tell users why a replica is not running.
package placement

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"
)

// Scheduler places eggs on hosts under one Config. It holds no state between
// calls and is safe for concurrent use.
type Scheduler struct {
	cfg Config
}

// New returns a scheduler following cfg.
func New(cfg Config) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Scheduler{cfg: cfg}, nil
}

// Decision is where an egg's replicas go.
type Decision struct {
	// Slots maps host ID to the number of the egg's slots on that host; hosts
	// with none are left out. It only names listed, not removed hosts.
	Slots map[string]int
	// Unplaced counts replicas that no host could take now (the hosts'
	// explanations say why). Placing again once room appears adds them.
	Unplaced int
	// Waiting, when set, says why a stateful egg cannot run now although its
	// placement is decided (its volume's host is down, unknown or removed).
	Waiting string
	// Hosts explains the decision for every listed host, every host the egg
	// was on and every unknown name in placement.hosts, sorted by name.
	Hosts []Explanation
}

// Total is the number of slots placed.
func (d *Decision) Total() int {
	n := 0
	for _, s := range d.Slots {
		n += s
	}
	return n
}

// Place decides where egg's replicas go on hosts at time now. It returns an
// error wrapping ErrInvalidInput for malformed input, and an
// *UnplaceableError when the egg has replicas but none can be placed (and it
// is not a stateful egg waiting for its volume's host). A decision that places
// only some replicas is not an error: Decision.Unplaced counts the rest.
//
// Place is deterministic (the order of hosts does not matter) and does not
// modify its arguments, so a caller may pass a decision's Slots back as the
// egg's Current. Its work grows with replicas times hosts, so it checks ctx
// as it goes and returns ctx's error once ctx is done.
func (s *Scheduler) Place(ctx context.Context, egg Egg, hosts []Host, now time.Time) (Decision, error) {
	if err := validate(&egg, hosts); err != nil {
		return Decision{}, err
	}
	pl := s.survey(&egg, hosts, now)
	var err error
	if egg.stateful() {
		err = pl.placeStateful()
	} else {
		err = pl.placeStateless(ctx)
	}
	if err != nil {
		return Decision{}, err
	}
	d := pl.decision()
	if egg.Replicas > 0 && d.Total() == 0 && d.Waiting == "" {
		return Decision{}, pl.unplaceable()
	}
	return d, nil
}

// status is what a host's liveness means for placement.
type status int

const (
	statusLive    status = iota // keeps its slots and takes new ones
	statusUnknown               // keeps its slots, takes no new ones
	statusGrace                 // down for less than the delay: as unknown, for now
	statusDown                  // down for the delay or longer: stateless slots move
	statusRemoved               // removed, or no longer listed: slots move
)

// hostPlan is one host's part of the decision being made.
type hostPlan struct {
	host     *Host // nil for a host that is no longer listed
	id, name string
	status   status
	excluded Reason // the constraint that forbids the egg here, or ""
	others   Resources
	fit      int // replicas that fit beside the other workloads

	cur        int // slots before
	kept       int // of cur: kept
	stayed     int // of cur on a down host: kept because no live host had room
	scaledDown int // of cur: removed because the egg has fewer replicas
	trimmed    int // of cur: no longer fit (the request grew)
	added      int // new slots
	movable    int // of cur on a down host: may stay if no live host has room
}

func (p *hostPlan) slots() int { return p.kept + p.stayed + p.added }

// load is the host's dominant share (the larger of memory and CPU requested
// over capacity) with extra more slots of per than it has now.
func (p *hostPlan) load(per Resources, extra int) float64 {
	used := p.others.plus(per.times(p.slots() + extra))
	return math.Max(share(used.Memory, p.host.Capacity.Memory), share(used.MilliCPU, p.host.Capacity.MilliCPU))
}

func share(used, capacity int64) float64 {
	if capacity <= 0 {
		if used <= 0 {
			return 0
		}
		return math.Inf(1)
	}
	return float64(used) / float64(capacity)
}

// fit is how many replicas of per fit in free; math.MaxInt if per is zero.
func fit(free, per Resources) int {
	n := int64(math.MaxInt)
	for _, d := range [][2]int64{{free.Memory, per.Memory}, {free.MilliCPU, per.MilliCPU}} {
		if d[1] > 0 {
			n = min(n, max(d[0], 0)/d[1])
		}
	}
	return int(n)
}

// planner holds one Place call's working state.
type planner struct {
	cfg   Config
	egg   *Egg
	hosts []*hostPlan // sorted by name, then ID
	// unknownNames are placement.hosts names that match no host.
	unknownNames []string
	unplaced     int
	waiting      string
}

// survey classifies every host for egg: its status, the constraint excluding
// it, the room left by the other workloads. Hosts the egg is on (or its volume
// lives on) that are no longer listed get a plan too, as removed.
func (s *Scheduler) survey(egg *Egg, hosts []Host, now time.Time) *planner {
	pl := &planner{cfg: s.cfg, egg: egg, hosts: make([]*hostPlan, 0, len(hosts))}
	placement := make(map[string]bool, len(egg.Placement))
	for _, name := range egg.Placement {
		placement[name] = true
	}
	id := egg.ID()
	listed := make(map[string]bool, len(hosts))
	names := make(map[string]bool, len(hosts))
	for i := range hosts {
		h := &hosts[i]
		listed[h.ID] = true
		names[h.Name] = true
		p := &hostPlan{host: h, id: h.ID, name: h.Name, cur: egg.Current[h.ID], status: s.status(h, now)}
		for _, a := range h.Placed {
			if a.Workload != id {
				p.others = p.others.plus(a.PerSlot.times(a.Slots))
			}
		}
		p.fit = fit(h.Capacity.minus(p.others), egg.PerReplica)
		switch {
		case egg.stateful() && h.ID != egg.VolumeHost:
			p.excluded = ReasonNotVolumeHost
		case len(placement) > 0 && !placement[h.Name]:
			p.excluded = ReasonNotInPlacement
		}
		pl.hosts = append(pl.hosts, p)
	}
	gone := func(id string, cur int) {
		if !listed[id] {
			listed[id] = true
			pl.hosts = append(pl.hosts, &hostPlan{id: id, name: id, status: statusRemoved, cur: cur})
		}
	}
	for id, n := range egg.Current {
		if n > 0 {
			gone(id, n)
		}
	}
	if egg.stateful() {
		gone(egg.VolumeHost, 0)
	}
	sort.Slice(pl.hosts, func(i, j int) bool {
		a, b := pl.hosts[i], pl.hosts[j]
		if a.name != b.name {
			return a.name < b.name
		}
		return a.id < b.id
	})
	for _, name := range egg.Placement {
		if !names[name] {
			names[name] = true // report each once
			pl.unknownNames = append(pl.unknownNames, name)
		}
	}
	sort.Strings(pl.unknownNames)
	return pl
}

func (s *Scheduler) status(h *Host, now time.Time) status {
	switch {
	case h.Removed:
		return statusRemoved
	case h.State == HostLive:
		return statusLive
	case h.State == HostDown && now.Sub(h.DownSince) >= s.cfg.RescheduleDelay:
		return statusDown
	case h.State == HostDown:
		return statusGrace
	default:
		return statusUnknown
	}
}

// placeStateless keeps the valid current slots, scales down or up, and lets
// slots of down hosts stay there only when no live host has room for them.
// Each slot added or removed is one look at every host: it stops there when
// ctx is done.
func (pl *planner) placeStateless(ctx context.Context) error {
	kept := 0
	for _, p := range pl.hosts {
		if p.cur == 0 || p.excluded != "" {
			continue
		}
		n := min(p.cur, p.fit)
		switch p.status {
		case statusLive, statusUnknown, statusGrace:
			p.kept, p.trimmed = n, p.cur-n
			kept += n
		case statusDown:
			p.movable = n
		}
	}
	for ; kept > pl.egg.Replicas; kept-- {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("place egg %s: %w", pl.egg.Name, err)
		}
		p := pl.pickRemoval()
		p.kept--
		p.scaledDown++
	}
	need := pl.egg.Replicas - kept
	for ; need > 0; need-- {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("place egg %s: %w", pl.egg.Name, err)
		}
		p := pl.pickAddition()
		if p == nil {
			break
		}
		p.added++
	}
	for _, p := range pl.hosts {
		n := min(p.movable, need)
		p.stayed = n
		need -= n
	}
	pl.unplaced = need
	return nil
}

// pickAddition returns the eligible live host with room that has the fewest
// of the egg's slots, then the least load after adding one, then comes first
// by name; nil if there is none.
func (pl *planner) pickAddition() *hostPlan {
	var best *hostPlan
	var bestLoad float64
	for _, p := range pl.hosts {
		if p.status != statusLive || p.excluded != "" || p.slots() >= p.fit {
			continue
		}
		load := p.load(pl.egg.PerReplica, 1)
		if best == nil || p.slots() < best.slots() || p.slots() == best.slots() && load < bestLoad {
			best, bestLoad = p, load
		}
	}
	return best
}

// pickRemoval returns the host to lose a kept slot when scaling down, in the
// mirror order of pickAddition: hosts not live first (their replicas may not
// be serving), then the most of the egg's slots, the most load, the last by
// name.
func (pl *planner) pickRemoval() *hostPlan {
	var best *hostPlan
	var bestLoad float64
	for _, p := range pl.hosts {
		if p.kept == 0 {
			continue
		}
		load := p.load(pl.egg.PerReplica, 0)
		if best == nil {
			best, bestLoad = p, load
			continue
		}
		pLive, bestLive := p.status == statusLive, best.status == statusLive
		switch {
		case pLive != bestLive:
			if !pLive {
				best, bestLoad = p, load
			}
		case p.kept != best.kept:
			if p.kept > best.kept {
				best, bestLoad = p, load
			}
		case load >= bestLoad: // later names win ties
			best, bestLoad = p, load
		}
	}
	return best
}

// placeStateful puts the egg on its volume's host, waiting there if the host is
// not live. The only errors are the egg's constraints excluding that host and
// the host lacking room.
func (pl *planner) placeStateful() error {
	egg := pl.egg
	if egg.Replicas == 0 {
		return nil // a cold egg needs no host, so nothing can conflict
	}
	var v *hostPlan
	for _, p := range pl.hosts {
		if p.id == egg.VolumeHost {
			v = p
		}
	}
	switch {
	case v.status == statusRemoved:
		pl.waiting = fmt.Sprintf("volume %s lives on host %s, which %s: the egg cannot run until that host is back",
			egg.Volume, v.name, removedText(v))
		pl.unplaced = egg.Replicas
		return nil
	case v.excluded == ReasonNotInPlacement:
		return pl.conflict(fmt.Sprintf("volume %s lives on host %s, which is not in placement.hosts %v", egg.Volume, v.name, egg.Placement))
	}
	n := min(egg.Replicas, v.fit)
	if n == 0 && egg.Replicas > 0 {
		return pl.conflict(fmt.Sprintf("it needs %s per replica and host %s, which holds volume %s, has %s free",
			egg.PerReplica, v.name, egg.Volume, freeText(v.host.Capacity.minus(v.others), egg.PerReplica)))
	}
	v.kept = min(v.cur, n)
	v.added = n - v.kept
	v.scaledDown = min(v.cur-v.kept, max(v.cur-egg.Replicas, 0))
	v.trimmed = v.cur - v.kept - v.scaledDown
	pl.unplaced = egg.Replicas - n
	if v.status != statusLive && n > 0 {
		pl.waiting = fmt.Sprintf("waiting for host %s, which holds volume %s and %s", v.name, egg.Volume, pl.stateText(v))
	}
	return nil
}

func (pl *planner) conflict(why string) error {
	return &UnplaceableError{
		Egg:   pl.egg.Name,
		Hosts: pl.explanations(),
		msg:   fmt.Sprintf("egg %s cannot be placed: %s", pl.egg.Name, why),
	}
}

// decision assembles the result once the slots are decided.
func (pl *planner) decision() Decision {
	d := Decision{Slots: map[string]int{}, Unplaced: pl.unplaced, Waiting: pl.waiting, Hosts: pl.explanations()}
	for _, p := range pl.hosts {
		if n := p.slots(); n > 0 {
			d.Slots[p.id] = n
		}
	}
	return d
}
