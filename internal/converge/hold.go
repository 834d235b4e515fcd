package converge

import (
	"time"

	"github.com/hatchery/hatchery/internal/containers"
)

// Hold returns plan without the steps that could roll back a container
// created after since: it neither stops, drains, rolls nor replaces such a
// container, and starts nothing in its slot (a start there would be the first
// half of a roll towards the older spec). Restarting it in place is kept: a
// restart brings back the same container, at the spec it already has.
// Failures of a workload with a held step are left out too, since the plan
// they judged is not carried out. The steps taken out are in the result's
// Held.
//
// This is the agent's guard for a desired state it read from its cache at
// start, which may be older than what runs (the cache write failed while the
// host was converged to a newer state): until the control plane answers, a
// container younger than the cache is newer than the cache's knowledge, and
// only the control plane may say what to do with it. Pure, like Diff.
func Hold(plan Plan, actual []containers.Container, hostID string, since time.Time) Plan {
	type slotKey struct {
		workload string
		slot     int
	}
	young := map[string]bool{}
	slots := map[slotKey]bool{}
	for i := range actual {
		c := &actual[i]
		if c.Placeholder() || !containers.Owned(c.Labels, hostID) || !c.Created.After(since) {
			continue
		}
		young[c.ID] = true
		slots[slotKey{c.WorkloadID, c.Slot}] = true
	}
	if len(young) == 0 {
		return plan
	}
	out := Plan{WakeAt: plan.WakeAt, Held: plan.Held}
	heldWorkloads := map[string]bool{}
	for _, s := range plan.Steps {
		var hold bool
		switch s.Action {
		case ActionRestart:
			hold = false
		case ActionStart:
			hold = slots[slotKey{s.WorkloadID, s.ReplicaIndex}]
		default: // stop, drain, roll, replace
			hold = young[s.ContainerID] || (s.Action == ActionReplace && slots[slotKey{s.WorkloadID, s.ReplicaIndex}])
		}
		if hold {
			out.Held = append(out.Held, s)
			heldWorkloads[s.WorkloadID] = true
			continue
		}
		out.Steps = append(out.Steps, s)
	}
	for _, f := range plan.Failures {
		if !heldWorkloads[f.WorkloadID] {
			out.Failures = append(out.Failures, f)
		}
	}
	return out
}
