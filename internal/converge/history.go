package converge

import (
	"time"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

// Crash-loop back-off: the first restart is immediate, then each waits twice
// as long as the one before, from BackoffBase up to BackoffMax; a container
// healthy for BackoffReset starts again from the beginning.
const (
	BackoffBase  = time.Second
	BackoffMax   = 5 * time.Minute
	BackoffReset = 10 * time.Minute
)

// History is the agent's memory of its containers, an input of Diff: how often
// each was restarted, since when it is healthy, and which rollouts failed. The
// agent persists it (it is plain JSON) so that a restart of the agent does not
// forget a crash loop or retry a failed rollout.
//
// History is not safe for concurrent use; Converge updates it.
type History struct {
	// Containers holds what is known of each container, by ID.
	Containers map[string]ContainerHistory `json:"containers,omitempty"`
	// FailedRollouts holds the last failed rollout of each workload, by ID.
	FailedRollouts map[string]FailedRollout `json:"failed_rollouts,omitempty"`
}

// ContainerHistory is what the agent remembers of one container.
type ContainerHistory struct {
	// Restarts counts in-place restarts since the back-off was last reset.
	Restarts    int       `json:"restarts,omitempty"`
	LastRestart time.Time `json:"last_restart,omitzero"`
	// HealthySince is when the current healthy streak began; zero when the
	// container is not healthy now.
	HealthySince time.Time `json:"healthy_since,omitzero"`
	// HealthyStart is the StartedAt of the last incarnation seen healthy: an
	// incarnation that has never been healthy is still booting, not unhealthy.
	HealthyStart time.Time `json:"healthy_start,omitzero"`
}

// FailedRollout records that a workload's rollout to a spec hash failed.
type FailedRollout struct {
	SpecHash string    `json:"spec_hash"`
	Reason   string    `json:"reason"`
	At       time.Time `json:"at"`
	// Image and Login are Failure's: the registry refused the image with
	// that login, so a new login is a new attempt.
	Image bool   `json:"image,omitempty"`
	Login string `json:"login,omitempty"`
}

// NewHistory returns an empty history.
func NewHistory() *History {
	return &History{Containers: map[string]ContainerHistory{}, FailedRollouts: map[string]FailedRollout{}}
}

func (h *History) container(id string) ContainerHistory {
	if h == nil {
		return ContainerHistory{}
	}
	return h.Containers[id]
}

func (h *History) failed(workloadID string) (FailedRollout, bool) {
	if h == nil {
		return FailedRollout{}, false
	}
	f, ok := h.FailedRollouts[workloadID]
	return f, ok
}

func (h *History) init() {
	if h.Containers == nil {
		h.Containers = map[string]ContainerHistory{}
	}
	if h.FailedRollouts == nil {
		h.FailedRollouts = map[string]FailedRollout{}
	}
}

// Observe updates the health streaks from what is listed now, resets the
// back-off of containers healthy for BackoffReset, forgets containers that are
// gone, and forgets failed rollouts whose workload's desired spec has changed
// (a changed spec is a new attempt).
func (h *History) Observe(desired contract.DesiredState, actual []containers.Container, now time.Time) {
	h.init()
	retries := make(map[string]int, len(desired.Workloads))
	hashes := make(map[string]string, len(desired.Workloads))
	logins := make(map[string]string, len(desired.Workloads))
	for _, w := range desired.Workloads {
		retries[w.ID()] = w.HealthRetries()
		hashes[w.ID()] = contract.SpecHash(w)
		logins[w.ID()] = w.PullLogin()
	}
	seen := make(map[string]bool, len(actual))
	for _, c := range actual {
		if c.Placeholder() || !containers.Owned(c.Labels, desired.HostID) {
			continue
		}
		seen[c.ID] = true
		ch := h.Containers[c.ID]
		everHealthy := c.Healthy || (!ch.HealthyStart.IsZero() && ch.HealthyStart.Equal(c.StartedAt))
		n, ok := retries[c.WorkloadID]
		if !ok {
			n = contract.DefaultHealthRetries
		}
		healthy := c.State == contract.StateRunning && everHealthy && (c.Healthy || c.FailingStreak < n)
		switch {
		case !healthy:
			ch.HealthySince = time.Time{}
		case ch.HealthySince.IsZero():
			ch.HealthySince = now
		}
		if c.Healthy && c.State == contract.StateRunning {
			ch.HealthyStart = c.StartedAt
		}
		if !ch.HealthySince.IsZero() && now.Sub(ch.HealthySince) >= BackoffReset {
			ch.Restarts, ch.LastRestart = 0, time.Time{}
		}
		h.Containers[c.ID] = ch
	}
	for id := range h.Containers {
		if !seen[id] {
			delete(h.Containers, id)
		}
	}
	for id, f := range h.FailedRollouts {
		if hashes[id] != f.SpecHash || f.Image && logins[id] != f.Login {
			delete(h.FailedRollouts, id)
		}
	}
}

// Record notes a step that was carried out: a restart counts towards the
// crash-loop back-off, unless it was the first start of a container that
// never ran (NeverStarted): that is no crash, and must not show as one.
func (h *History) Record(s Step, now time.Time) {
	h.init()
	if s.Action == ActionRestart && !s.NeverStarted {
		ch := h.Containers[s.ContainerID]
		ch.Restarts++
		ch.LastRestart = now
		ch.HealthySince = time.Time{}
		h.Containers[s.ContainerID] = ch
	}
}

// RecordFailure notes a failed rollout; the first failure of a spec hash keeps
// its time and reason.
func (h *History) RecordFailure(f Failure, now time.Time) {
	h.init()
	if old, ok := h.FailedRollouts[f.WorkloadID]; ok && old.SpecHash == f.SpecHash {
		return
	}
	h.FailedRollouts[f.WorkloadID] = FailedRollout{SpecHash: f.SpecHash, Reason: f.Reason, At: now, Image: f.Image, Login: f.Login}
}

// backoff returns the wait before restart number n+1, given n restarts so far.
func backoff(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	if n > 20 {
		return BackoffMax
	}
	return min(BackoffBase<<(n-1), BackoffMax)
}

// nextRestart returns the earliest time c may be restarted again: its back-off
// counted from its last restart or its exit, whichever is later.
func nextRestart(c *containers.Container, ch ContainerHistory) time.Time {
	if ch.Restarts == 0 {
		return time.Time{}
	}
	from := ch.LastRestart
	if c.FinishedAt.After(from) {
		from = c.FinishedAt
	}
	return from.Add(backoff(ch.Restarts))
}
