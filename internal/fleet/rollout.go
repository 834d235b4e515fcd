package fleet

import (
	"fmt"
	"sync"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

// rolloutPhase is where a rollout stands: the API's states.
type rolloutPhase = api.RolloutState

const (
	phaseProgressing = api.RolloutProgressing
	phaseFailed      = api.RolloutFailed
	phaseDone        = api.RolloutDone
	// phaseWaiting is an egg's as a whole (never one host's): some of its
	// replicas could not be placed on any host, or their host is down.
	phaseWaiting = api.RolloutWaiting
)

// progress is where one workload on one host stands against its desired spec.
type progress struct {
	phase rolloutPhase
	ready int // slots with a container ready at the desired spec
	want  int
	// others counts the workload's containers not at the desired spec (an
	// older spec, or a slot beyond the replica count) that have not exited:
	// while one runs, the rollout is not done.
	others  int
	reason  string   // why it failed
	logTail []string // the failing container's last log lines
}

// assess compares a workload's containers with its desired spec (hash): done
// when every slot has a ready container at the spec and nothing else of the
// workload still runs; failed when the agent reports the rollout to this spec
// failed; progressing otherwise. A slot is ready by contract's one rule
// (WorkloadSpec.ReplicaReady), the one the apply's readiness reads too.
func assess(w contract.WorkloadSpec, hash string, containers []contract.ContainerStatus) progress {
	p := progress{phase: phaseProgressing, want: w.Replicas}
	ready := map[int]bool{}
	for _, c := range containers {
		if c.WorkloadID != w.ID() {
			continue
		}
		current := w.Current(hash, c)
		switch {
		case current && c.RolloutFailure != "":
			p.phase, p.reason, p.logTail = phaseFailed, c.RolloutFailure, c.LogTail
		case current && w.ReplicaReady(c):
			ready[c.Slot] = true
		case !current && !c.State.Exited():
			p.others++
		}
	}
	p.ready = len(ready)
	if p.phase != phaseFailed && p.ready == p.want && p.others == 0 {
		p.phase = phaseDone
	}
	return p
}

// rolloutTracker turns successive status reports into rollout events. It
// remembers, per host and workload, the spec a rollout last finished at, so
// that a container crashing later (and coming back) is not taken for a new
// rollout. The memory is lost with the process; the previous report, kept in
// the store, covers the common case of a restart mid-rollout.
type rolloutTracker struct {
	mu     sync.Mutex                   // guards doneAt
	doneAt map[string]map[string]string // host -> workload ID -> spec hash
}

func newRolloutTracker() *rolloutTracker {
	return &rolloutTracker{doneAt: map[string]map[string]string{}}
}

// events returns the rollout events of one report: for each desired workload
// not already rolled out to its spec, "done" when it gets there, "failed" when
// it fails, and "progressing" when its count of ready slots moves.
func (t *rolloutTracker) events(host string, desired contract.DesiredState, prev, cur []contract.ContainerStatus, at time.Time) []store.Event {
	t.mu.Lock()
	defer t.mu.Unlock()
	done := t.doneAt[host]
	if done == nil {
		done = map[string]string{}
		t.doneAt[host] = done
	}
	wanted := make(map[string]bool, len(desired.Workloads))
	var out []store.Event
	for _, w := range desired.Workloads {
		wanted[w.ID()] = true
		hash := contract.SpecHash(w)
		if done[w.ID()] == hash {
			continue
		}
		before, now := assess(w, hash, prev), assess(w, hash, cur)
		if before.phase == phaseDone || now.phase == phaseDone {
			done[w.ID()] = hash
		}
		if before.phase == phaseDone {
			continue // finished before this report: nothing new
		}
		e := store.Event{Time: at, Project: resource.Project(w.Namespace, w.Project), Host: host, Resource: resource.Key(resource.Egg, w.Egg)}
		switch {
		case now.phase == phaseDone:
			e.Type = store.EventRolloutDone
			e.Message = fmt.Sprintf("%s on %s: %d/%d replicas ready at the new spec", w.Egg, host, now.ready, now.want)
		case now.phase == phaseFailed && before.phase != phaseFailed:
			e.Type = store.EventRolloutFailed
			e.Message = fmt.Sprintf("%s on %s: rollout failed: %s", w.Egg, host, now.reason)
		case now.phase == phaseProgressing && (before.phase != phaseProgressing || before.ready != now.ready):
			e.Type = store.EventRolloutProgressing
			e.Message = fmt.Sprintf("%s on %s: %d/%d replicas ready at the new spec", w.Egg, host, now.ready, now.want)
		default:
			continue
		}
		out = append(out, e)
	}
	for id := range done { // forget workloads the host no longer runs
		if !wanted[id] {
			delete(done, id)
		}
	}
	return out
}
