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
// report's Runs say how those are). A workload whose image the registry
// refused at its current spec has no container at it: slot 0 stands for it,
// with no container ID, so that the rollout's failure is reported.
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
	return append(out, imageFailures(desired, actual, h, hashes)...)
}

// imageFailures are the entries of the workloads whose rollout failed on
// their image: no container at the current spec hash exists to carry it.
func imageFailures(desired contract.DesiredState, actual []containers.Container, h *History, hashes map[string]string) []contract.ContainerStatus {
	var out []contract.ContainerStatus
	for _, w := range desired.Workloads {
		id := w.ID()
		f, ok := h.failed(id)
		if !ok || !f.Image || f.SpecHash != hashes[id] || w.Replicas == 0 {
			continue
		}
		made := false
		for _, c := range actual {
			made = made || c.WorkloadID == id && c.SpecHash == f.SpecHash && c.RunID == "" && containers.Owned(c.Labels, desired.HostID)
		}
		if !made {
			out = append(out, contract.ContainerStatus{WorkloadID: id, Slot: 0, SpecHash: f.SpecHash,
				State: contract.StateUnknown, RolloutFailure: f.Reason, FailedPull: f.Login})
		}
	}
	return out
}
