package converge

import (
	"time"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

// Status describes this host's containers for the status report: state and
// health, the agent's restarts, when a crash-looping container will next be
// tried, and why its workload's rollout failed. Like Diff it is pure; the
// agent adds the log tail of failed containers. Containers without Hatchery's
// labels and this host's ID are left out, and so are runs' containers (the
// report's Runs say how those are).
func Status(desired contract.DesiredState, actual []containers.Container, h *History, now time.Time) []contract.ContainerStatus {
	hashes := make(map[string]string, len(desired.Workloads))
	for _, w := range desired.Workloads {
		hashes[w.ID()] = contract.SpecHash(w)
	}
	var out []contract.ContainerStatus
	for _, c := range actual {
		if !containers.Owned(c.Labels, desired.HostID) || c.RunID != "" {
			continue
		}
		ch := h.container(c.ID)
		s := contract.ContainerStatus{
			WorkloadID: c.WorkloadID, Slot: c.Slot, ContainerID: c.ID, SpecHash: c.SpecHash,
			State: c.State, Healthy: c.Healthy && c.State == contract.StateRunning, Restarts: ch.Restarts,
		}
		if next := nextRestart(&c, ch); now.Before(next) && c.State != contract.StateRunning && c.State != contract.StateStarting {
			s.CrashLoopUntil = next
		}
		if f, ok := h.failed(c.WorkloadID); ok && f.SpecHash == hashes[c.WorkloadID] {
			s.RolloutFailure = f.Reason
		}
		out = append(out, s)
	}
	return out
}
