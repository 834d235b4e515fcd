package agent

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/contract"
)

// Fencing (docs/BACKUPS.md, "Failover"): a workload marked Fenced mounts a
// volume the control plane may restore on another host once this one has
// been silent for the volume's failover.after. So that its database never
// runs in two places, this agent stops such workloads on its own once its
// status reports have had no 2xx answer for the state's FenceAfter (which
// the plan keeps well below failover.after), and starts none of them from
// its cache after a restart until a server has confirmed the host. Only a
// status report counts: a long-poll answered proves the server reachable,
// not that it has heard from this host.

// fenceWatch records when a status report was last answered 2xx, and since
// when this process has been counting (Start).
type fenceWatch struct {
	mu sync.Mutex
	// since is Start's time: with no report answered yet, the fence counts
	// from there (the agent cannot know what the server last heard).
	since time.Time
	// lastOK is the last 2xx answer to a status report; zero: none since
	// Start.
	lastOK time.Time
	// fencedAt is when the fence last took Fenced workloads out, until a
	// report is answered (StatusReport.FencedAt).
	fencedAt time.Time
	// fencing is owned by the loop goroutine: whether the last converge
	// took the Fenced workloads out, to log the change once.
	fencing bool
}

// fenceView is what the fence decisions are made from.
type fenceView struct {
	// FenceAfter is the desired state's; 0: no fencing.
	FenceAfter time.Duration
	// Since is when this process started counting; LastOK the last 2xx
	// answer to a status report (zero: none since then).
	Since, LastOK time.Time
	// Heard: the desired state is a server's answer, not the cache's.
	Heard bool
}

// fenceOut decides whether the Fenced workloads are taken out of the
// desired state at now (and so stopped as any removed workload is: drain,
// stop signal, stop timeout): FenceAfter has passed since the last 2xx
// report (or since Start, with none). If not, wake is when they would be,
// for the loop to converge then (zero without fencing).
func fenceOut(v fenceView, now time.Time) (out bool, wake time.Time) {
	if v.FenceAfter <= 0 {
		return false, time.Time{}
	}
	from := v.LastOK
	if from.IsZero() {
		from = v.Since
	}
	deadline := from.Add(v.FenceAfter)
	if !now.Before(deadline) {
		return true, time.Time{}
	}
	return false, deadline
}

// fenceHoldsStarts decides whether the Fenced workloads may start no
// container: until a server has confirmed the host since Start (a 2xx
// status report and a desired state fetched from it), a cached state may
// be one the control plane has since failed over elsewhere. Containers
// already running are left alone (fenceOut stops them if the silence
// lasts).
func fenceHoldsStarts(v fenceView) bool {
	return v.FenceAfter > 0 && (v.LastOK.IsZero() || !v.Heard)
}

// withoutFenced returns d without its Fenced workloads, and their IDs.
func withoutFenced(d contract.DesiredState) (contract.DesiredState, []string) {
	var ids []string
	kept := make([]contract.WorkloadSpec, 0, len(d.Workloads))
	for _, w := range d.Workloads {
		if w.Fenced {
			ids = append(ids, w.ID())
			continue
		}
		kept = append(kept, w)
	}
	if len(ids) == 0 {
		return d, nil
	}
	d.Workloads = kept
	return d, ids
}

// fenceHolds returns the start holds of the Fenced workloads of d, by ID,
// with the reason (see converge.Options.HoldStarts).
func fenceHolds(d contract.DesiredState) map[string]string {
	held := map[string]string{}
	for _, w := range d.Workloads {
		if w.Fenced {
			held[w.ID()] = "its volume fails over: no container starts until a server has confirmed this host (a status report answered and a desired state fetched since the agent started)"
		}
	}
	return held
}

// view returns the fence's view for a state with fenceAfter.
func (f *fenceWatch) view(fenceAfter time.Duration, heard bool) fenceView {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fenceView{FenceAfter: fenceAfter, Since: f.since, LastOK: f.lastOK, Heard: heard}
}

// start sets the time the fence counts from when no report was answered.
func (f *fenceWatch) start(now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.since = now
}

// reported records a 2xx answer to a status report at now. It says whether
// a converge is wanted: the first answer since Start lifts the start holds,
// and one after a silence of fenceAfter puts fenced workloads back.
func (f *fenceWatch) reported(now time.Time, fenceAfter time.Duration) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	prev := f.lastOK
	f.lastOK, f.fencedAt = now, time.Time{}
	if fenceAfter <= 0 {
		return false
	}
	return prev.IsZero() || now.Sub(prev) >= fenceAfter
}

// fenced records that the fence took Fenced workloads out at now (the
// first time since the last answered report counts).
func (f *fenceWatch) fenced(now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fencedAt.IsZero() {
		f.fencedAt = now
	}
}

// fencedSince is when the fence took Fenced workloads out, zero if it has
// not since the last answered report.
func (f *fenceWatch) fencedSince() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fencedAt
}

// applyFence takes the Fenced workloads out of withRelays when the fence is
// up, logging the change; it returns the state to converge to, when to
// converge again for the fence to rise (zero: no such time), and an error
// for the status report while they are out.
func (a *Agent) applyFence(withRelays contract.DesiredState, v fenceView, now time.Time) (contract.DesiredState, time.Time, error) {
	out, wake := fenceOut(v, now)
	if !out {
		if a.fence.fencing {
			a.log.Info("a status report was answered again: fenced workloads may run")
			a.fence.fencing = false
		}
		return withRelays, wake, nil
	}
	d, ids := withoutFenced(withRelays)
	if len(ids) == 0 {
		return withRelays, time.Time{}, nil
	}
	last := "never since the agent started"
	if !v.LastOK.IsZero() {
		last = v.LastOK.UTC().Format(time.RFC3339)
	}
	a.fence.fenced(now)
	if !a.fence.fencing {
		a.log.Warn("no status report answered for fence_after: stopping the workloads whose volume fails over, so that they never run on two hosts",
			zap.Duration("fence_after", v.FenceAfter), zap.String("last_report_answered", last), zap.Strings("fenced", ids))
		a.fence.fencing = true
	}
	slices.Sort(ids)
	return d, time.Time{}, fmt.Errorf("fenced (no status report answered for %s, last %s): %d workloads stopped until one is: %v",
		v.FenceAfter, last, len(ids), ids)
}
