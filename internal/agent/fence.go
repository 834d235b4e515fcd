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
	// lastOK is when the last status report answered 2xx was sent (the
	// server heard it no earlier); zero: none since
	// Start.
	lastOK time.Time
	// fencedAt is when the fence last took Fenced workloads out, until a
	// report is answered (StatusReport.FencedAt).
	fencedAt time.Time
	// leased is owned by the heartbeat goroutine: whether the data plane
	// holds a lease on fenced workloads (renewFenceLease).
	leased bool
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

// withoutFenced returns d with its Fenced workloads scaled to 0 replicas,
// and their IDs: kept in the state, so that their containers are drained
// and stopped with the workload's own drain and stop timeouts (those the
// plan's check of failover.after counts), not a removed workload's
// defaults.
func withoutFenced(d contract.DesiredState) (contract.DesiredState, []string) {
	var ids []string
	scaled := slices.Clone(d.Workloads)
	for i := range scaled {
		if scaled[i].Fenced {
			ids = append(ids, scaled[i].ID())
			scaled[i].Replicas = 0
		}
	}
	if len(ids) == 0 {
		return d, nil
	}
	d.Workloads = scaled
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

// reported records a 2xx answer to a status report sent at now. It says whether
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
// first time since the last answered report counts), and says whether it
// is that first time.
func (f *fenceWatch) fenced(now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.fencedAt.IsZero() {
		return false
	}
	f.fencedAt = now
	return true
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
	if a.fence.fenced(now) {
		a.log.Warn("no status report answered for fence_after: stopping the workloads whose volume fails over, so that they never run on two hosts",
			zap.Duration("fence_after", v.FenceAfter), zap.String("last_report_answered", last), zap.Strings("fenced", ids))
	}
	slices.Sort(ids)
	return d, time.Time{}, fmt.Errorf("fenced (no status report answered for %s, last %s): %d workloads stopped until one is: %v",
		v.FenceAfter, last, len(ids), ids)
}

// fenceBackstop is the data plane's dead-man switch (dataplane.Client's
// SetFenceLease): a process that outlives this one, which stops the
// fenced workloads' containers unless the lease is renewed in time, so
// that an agent killed while its eggs run does not leave them running
// while their volume fails over elsewhere.
type fenceBackstop interface {
	SetFenceLease(until time.Time, workloads []string, stopTimeout time.Duration) error
}

// fenceLease is the lease for d after a status report sent at lastOK and
// answered: the fenced workloads, stopped unless renewed by the time this
// agent itself would have drained them (lastOK + FenceAfter + their
// longest drain), with their longest stop timeout. No fenced workloads
// (or no fencing): none.
func fenceLease(d contract.DesiredState, lastOK time.Time) (until time.Time, workloads []string, stop time.Duration) {
	if d.FenceAfter <= 0 {
		return time.Time{}, nil, 0
	}
	var drain time.Duration
	for _, w := range d.Workloads {
		if !w.Fenced {
			continue
		}
		workloads = append(workloads, w.ID())
		drain, stop = max(drain, w.DrainTimeout()), max(stop, w.EffectiveStopTimeout())
	}
	if len(workloads) == 0 {
		return time.Time{}, nil, 0
	}
	slices.Sort(workloads)
	return lastOK.Add(d.FenceAfter + drain), workloads, stop
}

// renewFenceLease hands the data plane the lease after a report answered
// at now, when the desired state has fenced workloads or a lease was
// handed before (to end it). Called from the heartbeat only.
func (a *Agent) renewFenceLease(now time.Time) {
	b, ok := a.cfg.Router.(fenceBackstop)
	if !ok {
		return
	}
	a.mu.Lock()
	var d contract.DesiredState
	if a.desired != nil {
		d = *a.desired
	}
	a.mu.Unlock()
	until, workloads, stop := fenceLease(d, now)
	if len(workloads) == 0 && !a.fence.leased {
		return
	}
	if err := b.SetFenceLease(until, workloads, stop); err != nil {
		a.log.Warn("the data plane did not take the fence lease: if this agent dies, its fenced workloads keep running", zap.Error(err))
		return
	}
	a.fence.leased = len(workloads) > 0
}
