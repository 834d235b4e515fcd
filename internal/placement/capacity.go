package placement

// What a host's capacity is believed to be. A host's agent reports its
// capacity, and placement prefers the least loaded host relative to it, so a
// host that claimed 9e18 bytes would draw every new replica (and their
// secrets): a report is believed only within the server's caps, no higher
// than the host's first report (its baseline), unless an admin pinned the
// host's capacity. The rule is here, one pure function, because placement
// (desired.StoreFleet) and what `hatch hosts` shows (fleet) must agree.

// DefaultMaxHostCapacity caps what any host's report is believed at, unless
// the server is told otherwise (hatch server --max-host-memory,
// --max-host-cpus): larger than the machines Hatchery runs on, small enough
// that a lie in a host's first report is bounded.
var DefaultMaxHostCapacity = Resources{Memory: 1 << 40, MilliCPU: 256_000}

// CapacitySource says where a believed capacity comes from.
type CapacitySource string

const (
	// CapacityReported: the host's report, believed as it is.
	CapacityReported CapacitySource = "reported"
	// CapacityLimited: the host's report, held to its baseline or the
	// server's caps (CapacityBelief says which).
	CapacityLimited CapacitySource = "limited"
	// CapacityBaseline: the host's baseline, the host's last report having
	// none.
	CapacityBaseline CapacitySource = "baseline"
	// CapacityPinned: an admin set it (hatch hosts set).
	CapacityPinned CapacitySource = "pinned"
	// CapacityAssumed: the host never reported one: it is taken to be as
	// small as the smallest host whose capacity is known (silence must not
	// draw replicas), or the fleet's default when none is.
	CapacityAssumed CapacitySource = "assumed"
)

// CapacityClaim is what a host said of its capacity and what the control
// plane holds of it; zero Resources say nothing.
type CapacityClaim struct {
	HostID string
	// Reported is the capacity of the host's last report.
	Reported Resources
	// Baseline is its first report's, as capped then; Pinned is an
	// admin's.
	Baseline, Pinned Resources
}

// CapacityBelief is the capacity placement uses for a host, and why.
type CapacityBelief struct {
	Believed Resources
	Source   CapacitySource
	// AboveBaseline and AboveCap say why a report was not believed whole:
	// it claims more than the host's first report, or more than the
	// server's caps.
	AboveBaseline, AboveCap bool
}

// CappedBaseline is what a host's first report records as its baseline:
// the report, held to the caps.
func CappedBaseline(reported, caps Resources) Resources {
	return Resources{Memory: min(reported.Memory, caps.Memory), MilliCPU: min(reported.MilliCPU, caps.MilliCPU)}
}

// BelieveCapacities returns, in the order of claims, the capacity placement
// uses for each host. caps bound every report (zero: DefaultMaxHostCapacity);
// assumed is what a fleet where no host's capacity is known assumes of each
// (zero: caps). It is pure and reads nothing else, so placement and the
// hosts view get the same answer from the same claims.
func BelieveCapacities(claims []CapacityClaim, caps, assumed Resources) []CapacityBelief {
	if caps == (Resources{}) {
		caps = DefaultMaxHostCapacity
	}
	if assumed == (Resources{}) {
		assumed = caps
	}
	out := make([]CapacityBelief, len(claims))
	var smallest Resources
	known := false
	for i, c := range claims {
		b, ok := believe(c, caps)
		out[i] = b
		if !ok {
			continue
		}
		if !known {
			smallest, known = b.Believed, true
			continue
		}
		smallest = Resources{Memory: min(smallest.Memory, b.Believed.Memory), MilliCPU: min(smallest.MilliCPU, b.Believed.MilliCPU)}
	}
	if known {
		assumed = smallest
	}
	for i := range out {
		if out[i].Source == CapacityAssumed {
			out[i].Believed = assumed
		}
	}
	return out
}

// believe decides one host's capacity; false when nothing is known of it.
func believe(c CapacityClaim, caps Resources) (CapacityBelief, bool) {
	switch {
	case positive(c.Pinned):
		return CapacityBelief{Believed: c.Pinned, Source: CapacityPinned}, true
	case !positive(c.Reported) && positive(c.Baseline):
		return CapacityBelief{Believed: c.Baseline, Source: CapacityBaseline}, true
	case !positive(c.Reported):
		return CapacityBelief{Source: CapacityAssumed}, false
	}
	limit := caps
	if positive(c.Baseline) {
		limit = Resources{Memory: min(limit.Memory, c.Baseline.Memory), MilliCPU: min(limit.MilliCPU, c.Baseline.MilliCPU)}
	}
	b := CapacityBelief{Believed: Resources{Memory: min(c.Reported.Memory, limit.Memory), MilliCPU: min(c.Reported.MilliCPU, limit.MilliCPU)},
		Source: CapacityReported}
	if b.Believed == c.Reported {
		return b, true
	}
	b.Source = CapacityLimited
	b.AboveCap = c.Reported.Memory > caps.Memory || c.Reported.MilliCPU > caps.MilliCPU
	b.AboveBaseline = positive(c.Baseline) && (c.Reported.Memory > c.Baseline.Memory || c.Reported.MilliCPU > c.Baseline.MilliCPU)
	return b, true
}

// positive reports whether both amounts of r are above zero: a capacity that
// says something.
func positive(r Resources) bool { return r.Memory > 0 && r.MilliCPU > 0 }
