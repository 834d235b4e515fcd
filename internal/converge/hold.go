package converge

import (
	"time"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
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
	out := plan
	out.Steps, out.Failures = nil, nil
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

// HoldNewer returns plan with every step but restarts in place moved to
// Held, and no failures, when some container this host owns was created
// for a later desired state than generation, the one converged to (see
// containers.StateStamp); the containers found are in the result's Newer.
// Otherwise plan is returned as it is.
//
// This is the agent's guard for a cache that is provably older than what
// runs: its write failed (a full disk) while the host converged to a newer
// state, and the agent restarted with no control plane to ask. Such a cache
// must roll nothing back, however long the control plane stays away.
//
// All of the plan is held, not only the workloads with a newer container:
// the newer state may have removed a workload or scaled one down, and
// nothing on the host tells which, so any start or stop the older cache asks
// for may undo it. A restart in place brings back the very container that
// ran, at its own spec, and is kept; and a newer container that crashed,
// which Diff would replace (its spec is not the cache's), is restarted in
// place instead, under the same crash-loop back-off as any other (history
// and now give it): a replica that crashes while the control plane is away
// still comes back, at its newer spec. Generations, not creation times:
// they order states without any clock. Pure, like Diff.
func HoldNewer(plan Plan, actual []containers.Container, hostID string, generation int64, history *History, now time.Time) Plan {
	var newer []containers.Container
	for _, c := range actual {
		if containers.Owned(c.Labels, hostID) && c.Stamp.Generation > generation {
			newer = append(newer, c)
		}
	}
	if len(newer) == 0 {
		return plan
	}
	out := plan
	out.Steps, out.Failures, out.Newer = nil, nil, newer
	restarting := map[string]bool{}
	for _, s := range plan.Steps {
		if s.Action == ActionRestart {
			out.Steps = append(out.Steps, s)
			restarting[s.ContainerID] = true
			continue
		}
		out.Held = append(out.Held, s)
	}
	for i := range newer {
		c := &newer[i]
		never := neverStarted(c)
		if c.Placeholder() || (c.State != contract.StateCrashed && !never) || restarting[c.ID] {
			continue
		}
		if next := nextRestart(c, history.container(c.ID)); now.Before(next) {
			if out.WakeAt.IsZero() || next.Before(out.WakeAt) {
				out.WakeAt = next
			}
			continue
		}
		out.Steps = append(out.Steps, Step{Action: ActionRestart, WorkloadID: c.WorkloadID, BlobID: c.BlobID,
			ContainerID: c.ID, ReplicaIndex: c.Slot, SpecHash: c.SpecHash, StartedAt: c.StartedAt,
			Reason: "crashed (newer than the cached state)", NeverStarted: never})
	}
	return out
}

// WithoutStarts returns plan without the start, replace and restart steps
// of the workloads in held (by ID), and those steps: a restart starts a
// crashed container again (an exited one, after a reboot, say), which is a
// start as much as a fresh one is. Nothing else changes: a container still
// running is drained or stopped as planned, and the starts come back in the
// first plan after the hold is gone (the agent's run ends, which Docker's
// events tell it at once). Pure.
func WithoutStarts(plan Plan, held map[string]string) (Plan, []Step) {
	out := plan
	out.Steps = nil
	var left []Step
	for _, s := range plan.Steps {
		if _, hold := held[s.WorkloadID]; hold && (s.Action == ActionStart || s.Action == ActionReplace || s.Action == ActionRestart) {
			left = append(left, s)
			continue
		}
		out.Steps = append(out.Steps, s)
	}
	return out, left
}
