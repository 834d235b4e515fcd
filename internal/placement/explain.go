package placement

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Reason classifies why a host got what it got, for callers that branch on it
// (a status page colouring waiting eggs, a test). Explanation.Detail says the
// same in words, with the figures.
type Reason string

const (
	// ReasonPlaced: a live host that has slots of the egg.
	ReasonPlaced Reason = "placed"
	// ReasonSpare: a live, eligible host with room that was not needed.
	ReasonSpare Reason = "spare"
	// ReasonFull: a live, eligible host without room for one more replica.
	ReasonFull Reason = "full"
	// ReasonNotInPlacement: the host is not in the egg's placement.hosts.
	ReasonNotInPlacement Reason = "not-in-placement"
	// ReasonNotVolumeHost: a stateful egg's volume lives on another host.
	ReasonNotVolumeHost Reason = "not-volume-host"
	// ReasonUnknown: the host has not reported since the server started; it
	// keeps its slots and gets no new ones.
	ReasonUnknown Reason = "unknown"
	// ReasonDownGrace: the host is down for less than the reschedule delay;
	// it keeps its slots for now and gets no new ones.
	ReasonDownGrace Reason = "down-grace"
	// ReasonDown: the host is down for longer than the reschedule delay; its
	// stateless slots move to live hosts.
	ReasonDown Reason = "down"
	// ReasonRemoved: the host was removed or is no longer listed.
	ReasonRemoved Reason = "removed"
	// ReasonWaiting: the stateful egg is assigned to this host, which holds its
	// volume but cannot run it now.
	ReasonWaiting Reason = "waiting"
	// ReasonNoSuchHost: placement.hosts names a host that does not exist.
	ReasonNoSuchHost Reason = "no-such-host"
)

// Explanation says why one host got what it got.
type Explanation struct {
	HostID string // empty with ReasonNoSuchHost
	Host   string // the host's name (its ID if it is no longer listed)
	Slots  int    // the slots decided for this host
	Reason Reason
	Detail string // one sentence without the host's name, with the figures
}

func (e Explanation) String() string { return e.Host + ": " + e.Detail }

// String explains the whole decision, one line per host, then what is missing.
func (d *Decision) String() string {
	var b strings.Builder
	for _, e := range d.Hosts {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	if d.Unplaced > 0 {
		fmt.Fprintf(&b, "%s unplaced\n", plural(d.Unplaced, "replica"))
	}
	if d.Waiting != "" {
		b.WriteString(d.Waiting)
		b.WriteByte('\n')
	}
	return b.String()
}

// UnplaceableError reports an egg none of whose replicas can be placed. The
// message names the cause and every host's reason, for example
// "egg web needs 512 MiB per replica; no live host has it free: host-a: has
// 100 MiB free, needs 512 MiB per replica; host-b: down since ...".
type UnplaceableError struct {
	Egg   string
	Hosts []Explanation // as in Decision.Hosts
	msg   string
}

func (e *UnplaceableError) Error() string { return e.msg }

// unplaceable builds the error for a stateless egg that got no slot at all.
func (pl *planner) unplaceable() *UnplaceableError {
	hosts := pl.explanations()
	e := &UnplaceableError{Egg: pl.egg.Name, Hosts: hosts}
	if len(hosts) == 0 {
		e.msg = fmt.Sprintf("egg %s cannot be placed: no host has joined yet (start one with `hatch agent --join`)", pl.egg.Name)
		return e
	}
	lead := fmt.Sprintf("egg %s cannot be placed: no live host may run it", pl.egg.Name)
	for _, h := range hosts {
		if h.Reason == ReasonFull {
			lead = fmt.Sprintf("egg %s needs %s per replica; no live host has it free", pl.egg.Name, pl.egg.PerReplica)
			break
		}
	}
	reasons := make([]string, len(hosts))
	for i, h := range hosts {
		reasons[i] = h.String()
	}
	e.msg = lead + ": " + strings.Join(reasons, "; ")
	return e
}

// explanations explains every host's part of the decision, sorted by name.
func (pl *planner) explanations() []Explanation {
	out := make([]Explanation, 0, len(pl.hosts)+len(pl.unknownNames))
	for _, p := range pl.hosts {
		reason, detail := pl.reason(p)
		if changes := p.changes(); changes != "" {
			detail += ": " + changes
		}
		out = append(out, Explanation{HostID: p.id, Host: p.name, Slots: p.slots(), Reason: reason, Detail: detail})
	}
	for _, name := range pl.unknownNames {
		out = append(out, Explanation{Host: name, Reason: ReasonNoSuchHost,
			Detail: "is named in placement.hosts, but no host has this name"})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Host < out[j].Host })
	return out
}

// reason classifies a host and describes its situation, most decisive first:
// removal, then constraints, then liveness, then room.
func (pl *planner) reason(p *hostPlan) (Reason, string) {
	egg := pl.egg
	switch {
	case p.status == statusRemoved:
		return ReasonRemoved, removedText(p)
	case p.excluded == ReasonNotVolumeHost:
		return p.excluded, fmt.Sprintf("does not hold volume %s", egg.Volume)
	case p.excluded == ReasonNotInPlacement:
		return p.excluded, "is not in placement.hosts"
	case egg.stateful() && p.status != statusLive:
		return ReasonWaiting, fmt.Sprintf("holds volume %s and %s", egg.Volume, pl.stateText(p))
	case p.status == statusDown:
		return ReasonDown, pl.stateText(p)
	case p.status == statusGrace:
		return ReasonDownGrace, pl.stateText(p) + "; takes no new replicas"
	case p.status == statusUnknown:
		return ReasonUnknown, pl.stateText(p) + "; keeps its replicas, takes no new ones"
	case p.slots() > 0:
		return ReasonPlaced, "live, " + loadText(p, egg.PerReplica)
	case p.fit == 0:
		return ReasonFull, "has " + freeText(p.host.Capacity.minus(p.others), egg.PerReplica) +
			" free, needs " + egg.PerReplica.String() + " per replica"
	default:
		return ReasonSpare, "live with room, " + loadText(p, egg.PerReplica) + "; other hosts came first"
	}
}

// stateText describes a host that is not live.
func (pl *planner) stateText(p *hostPlan) string {
	since := p.host.DownSince.UTC().Format(time.RFC3339)
	switch p.status {
	case statusDown:
		return fmt.Sprintf("is down since %s, longer than the %v reschedule delay", since, pl.cfg.RescheduleDelay)
	case statusGrace:
		at := p.host.DownSince.Add(pl.cfg.RescheduleDelay).UTC().Format(time.RFC3339)
		return fmt.Sprintf("is down since %s; its replicas move at %s if it is still down", since, at)
	case statusUnknown:
		return "has not reported since the server started"
	case statusRemoved:
		return removedText(p)
	}
	return "is live"
}

func removedText(p *hostPlan) string {
	if p.host == nil {
		return "is no longer a known host"
	}
	return "was removed"
}

// changes describes what happened to the host's slots, or "" if it had none
// and got none.
func (p *hostPlan) changes() string {
	var parts []string
	add := func(n int, format, noun string) {
		if n > 0 {
			parts = append(parts, fmt.Sprintf(format, plural(n, noun)))
		}
	}
	add(p.kept, "keeps %s", "replica")
	add(p.added, "gets %s", "new replica")
	add(p.stayed, "keeps %s until a live host has room", "replica")
	add(p.scaledDown, "drops %s (scale-down)", "replica")
	add(p.trimmed, "gives up %s for lack of room", "replica")
	add(p.cur-p.kept-p.stayed-p.scaledDown-p.trimmed, "gives up %s", "replica")
	return strings.Join(parts, ", ")
}

// loadText gives a host's requested shares after the decision.
func loadText(p *hostPlan, per Resources) string {
	used := p.others.plus(per.times(p.slots()))
	capacity := p.host.Capacity
	var parts []string
	if capacity.Memory > 0 {
		parts = append(parts, fmt.Sprintf("%.0f%% of memory", 100*share(used.Memory, capacity.Memory)))
	}
	if capacity.MilliCPU > 0 {
		parts = append(parts, fmt.Sprintf("%.0f%% of CPU", 100*share(used.MilliCPU, capacity.MilliCPU)))
	}
	if len(parts) == 0 {
		return "no capacity reported"
	}
	return strings.Join(parts, " and ") + " requested"
}

// freeText shows the free amounts of the kinds the egg requests.
func freeText(free, per Resources) string {
	shown := Resources{}
	if per.Memory > 0 {
		shown.Memory = max(free.Memory, 0)
	}
	if per.MilliCPU > 0 {
		shown.MilliCPU = max(free.MilliCPU, 0)
	}
	switch {
	case per.Memory > 0 && per.MilliCPU > 0:
		return FormatBytes(shown.Memory) + " and " + FormatCPU(shown.MilliCPU)
	case per.MilliCPU > 0:
		return FormatCPU(shown.MilliCPU)
	default:
		return FormatBytes(shown.Memory)
	}
}

// String shows the amounts a user wrote, "512 MiB and 0.5 CPU", leaving out a
// zero kind; "nothing" when both are zero.
func (r Resources) String() string {
	switch {
	case r.Memory != 0 && r.MilliCPU != 0:
		return FormatBytes(r.Memory) + " and " + FormatCPU(r.MilliCPU)
	case r.Memory != 0:
		return FormatBytes(r.Memory)
	case r.MilliCPU != 0:
		return FormatCPU(r.MilliCPU)
	}
	return "nothing"
}

// FormatBytes shows a byte count in the largest binary unit it fills, with at
// most one decimal: "512 MiB", "1.5 GiB", "100 B".
func FormatBytes(n int64) string {
	units := []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}}
	for _, u := range units {
		if n >= u.size || -n >= u.size {
			return strconv.FormatFloat(roundTenth(float64(n)/float64(u.size)), 'f', -1, 64) + " " + u.name
		}
	}
	return strconv.FormatInt(n, 10) + " B"
}

// FormatCPU shows thousandths of a CPU as CPUs: "0.5 CPU", "2 CPUs".
func FormatCPU(milli int64) string {
	s := strconv.FormatFloat(float64(milli)/1000, 'f', -1, 64)
	if milli > 1000 || milli < -1000 {
		return s + " CPUs"
	}
	return s + " CPU"
}

func roundTenth(f float64) float64 { return math.Round(f*10) / 10 }

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
