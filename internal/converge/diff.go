package converge

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

// Diff computes the convergence plan for a desired state against the observed
// containers, given the agent's history (nil for none) and the time. It is
// pure: it performs no I/O and mutates nothing, which is what makes it unit
// testable. The rules are in the package documentation. The plan's steps are
// ordered by workload, then slot.
func Diff(desired contract.DesiredState, actual []containers.Container, h *History, now time.Time) Plan {
	d := differ{h: h, now: now}
	index, groups := groupByWorkload(actual, desired.HostID)

	type entry struct {
		w  *contract.WorkloadSpec
		id string
	}
	workloads := make([]entry, 0, len(desired.Workloads))
	for i := range desired.Workloads {
		workloads = append(workloads, entry{&desired.Workloads[i], desired.Workloads[i].ID()})
	}
	slices.SortStableFunc(workloads, func(a, b entry) int { return strings.Compare(a.id, b.id) })
	for i, e := range workloads {
		if i > 0 && workloads[i-1].id == e.id {
			continue // a duplicate entry: the first one wins
		}
		var cs []*containers.Container
		if g, ok := index[e.id]; ok {
			cs = groups[g].cs
			groups[g].desired = true
		}
		d.workload(e.w, e.id, cs)
	}

	// Containers of workloads no longer desired (or with no readable workload).
	var extras []*containers.Container
	for _, g := range groups {
		if !g.desired {
			extras = append(extras, g.cs...)
		}
	}
	slices.SortFunc(extras, func(a, b *containers.Container) int {
		return cmp.Or(strings.Compare(a.WorkloadID, b.WorkloadID), cmp.Compare(a.Slot, b.Slot), strings.Compare(a.ID, b.ID))
	})
	for _, c := range extras {
		d.remove(d.member(c, nil, ""), "extra")
	}
	return d.plan
}

// group is the containers of one workload ID.
type group struct {
	cs      []*containers.Container
	desired bool // the workload is desired (and planned as such)
}

// groupByWorkload groups the containers Diff may consider (see inScope) by
// workload ID: index maps an ID to its group. It counts first, then fills one
// backing array, so that each container costs one map lookup: Diff runs on
// every converge of a host that may hold thousands of containers.
func groupByWorkload(actual []containers.Container, hostID string) (index map[string]int, groups []group) {
	index = make(map[string]int)
	var counts []int
	of := make([]int32, len(actual)) // group index + 1; 0: out of scope
	total := 0
	for i := range actual {
		c := &actual[i]
		if !inScope(c, hostID) {
			continue
		}
		g, ok := index[c.WorkloadID]
		if !ok {
			g = len(counts)
			index[c.WorkloadID] = g
			counts = append(counts, 0)
		}
		counts[g]++
		of[i] = int32(g + 1)
		total++
	}
	backing := make([]*containers.Container, total)
	groups = make([]group, len(counts))
	at := 0
	for g, n := range counts {
		groups[g].cs = backing[at : at : at+n]
		at += n
	}
	for i := range actual {
		if g := of[i]; g > 0 {
			groups[g-1].cs = append(groups[g-1].cs, &actual[i])
		}
	}
	return index, groups
}

// inScope reports whether Diff may consider c: this host's, no run's (a
// run's container shares its egg's workload label, but fills no slot: the
// agent starts, stops and removes it), and either a real container or a
// start in progress.
func inScope(c *containers.Container, hostID string) bool {
	if !containers.Owned(c.Labels, hostID) || c.RunID != "" {
		return false // not ours, or a run's: never in a plan, whatever it is
	}
	return !c.Placeholder() || c.State == contract.StateBuilding
}

// differ carries Diff's inputs and the plan being built.
type differ struct {
	h    *History
	now  time.Time
	plan Plan
}

// status is a container's condition as the rules see it.
type status int

const (
	stBuilding  status = iota // a start in progress, no container yet
	stDraining                // a drain or stop in progress
	stBooting                 // starting, or running but never healthy since its start
	stHealthy                 // serving: healthy, or fewer than HealthRetries failed checks since it was
	stUnhealthy               // was healthy, then failed HealthRetries consecutive checks
	stExited                  // crashed, completed or stopped
	stUnknown                 // a state the agent does not know
)

// member is one container of a slot, classified.
type member struct {
	c        *containers.Container
	st       status
	upToDate bool
	// ready: the latest check passed and the container has been healthy for
	// the workload's MinReady.
	ready bool
}

func (d *differ) member(c *containers.Container, w *contract.WorkloadSpec, hash string) member {
	m := member{c: c}
	m.upToDate = w != nil && c.LabelError == "" && c.SpecHash == hash
	retries, startPeriod := contract.DefaultHealthRetries, time.Duration(0)
	if w != nil {
		retries, startPeriod = w.HealthRetries(), w.Health.StartPeriod
	}
	switch c.State {
	case contract.StateBuilding:
		m.st = stBuilding
	case contract.StateDraining:
		m.st = stDraining
	case contract.StateStarting:
		m.st = stBooting
	case contract.StateRunning:
		switch {
		case c.Healthy:
			m.st = stHealthy
		case !d.everHealthy(m):
			m.st = stBooting
		case c.FailingStreak < retries:
			m.st = stHealthy
		case d.now.Sub(c.StartedAt) < startPeriod:
			m.st = stHealthy // failures in the start period do not count
			d.wakeAt(c.StartedAt.Add(startPeriod))
		default:
			m.st = stUnhealthy
		}
	case contract.StateCrashed, contract.StateCompleted, contract.StateStopped:
		m.st = stExited
	default:
		m.st = stUnknown
	}
	if m.st == stHealthy && c.Healthy {
		m.ready = true
		if w != nil && w.Rollout.MinReady > 0 {
			since := d.hist(m).HealthySince
			if since.IsZero() {
				since = d.now
			}
			m.ready = d.now.Sub(since) >= w.Rollout.MinReady
			if !m.ready {
				d.wakeAt(since.Add(w.Rollout.MinReady))
			}
		}
	}
	return m
}

// hist returns what the history holds for m. It is looked up only where a
// rule needs it, which keeps the common case (a healthy container alone in its
// slot) free of the lookup.
func (d *differ) hist(m member) ContainerHistory { return d.h.container(m.c.ID) }

// everHealthy reports whether m's current incarnation has passed a health
// check: until it has, failing checks mean it is still booting.
func (d *differ) everHealthy(m member) bool {
	start := d.hist(m).HealthyStart
	return !start.IsZero() && start.Equal(m.c.StartedAt)
}

func (d *differ) add(s Step) { d.plan.Steps = append(d.plan.Steps, s) }

// wakeAt records that a decision waits until t: the plan's WakeAt is the
// earliest such time still to come.
func (d *differ) wakeAt(t time.Time) {
	if t.After(d.now) && (d.plan.WakeAt.IsZero() || t.Before(d.plan.WakeAt)) {
		d.plan.WakeAt = t
	}
}

func (d *differ) step(a Action, m member, reason string) {
	d.add(Step{Action: a, WorkloadID: m.c.WorkloadID, BlobID: m.c.BlobID, ContainerID: m.c.ID,
		ReplicaIndex: m.c.Slot, SpecHash: m.c.SpecHash, Reason: reason})
}

// remove takes a container away: drained if it may be serving, stopped if
// not, left alone while work on it is in progress.
func (d *differ) remove(m member, reason string) {
	switch m.st {
	case stBuilding, stDraining:
	case stHealthy:
		d.step(ActionDrain, m, reason)
	default:
		d.step(ActionStop, m, reason)
	}
}

// restart restarts an up-to-date container in place once its crash-loop
// back-off allows; until then the status shows it crash-looping. A
// container that never started (an agent killed between Docker's create
// and start) is started, for the reason "never started": it did not crash.
func (d *differ) restart(m member, reason string) {
	if next := nextRestart(m.c, d.hist(m)); d.now.Before(next) {
		d.wakeAt(next)
		return
	}
	never := neverStarted(m.c)
	if never {
		reason = "never started"
	}
	d.add(Step{Action: ActionRestart, WorkloadID: m.c.WorkloadID, BlobID: m.c.BlobID, ContainerID: m.c.ID,
		ReplicaIndex: m.c.Slot, SpecHash: m.c.SpecHash, StartedAt: m.c.StartedAt, Reason: reason, NeverStarted: never})
}

// neverStarted reports whether c was created and never started: it holds
// no start time (Docker's is zero until the first start).
func neverStarted(c *containers.Container) bool {
	return c.State == contract.StateStopped && c.StartedAt.IsZero()
}

func (d *differ) start(w *contract.WorkloadSpec, id, hash string, slot int, replace, reason string) {
	a := ActionStart
	if replace != "" {
		a = ActionReplace
	}
	d.add(Step{Action: a, WorkloadID: id, BlobID: w.BlobID, ContainerID: replace,
		ReplicaIndex: slot, SpecHash: hash, Reason: reason})
}

func (d *differ) fail(id, hash, reason string) {
	if f, ok := d.h.failed(id); ok && f.SpecHash == hash {
		return // already recorded
	}
	for _, f := range d.plan.Failures {
		if f.WorkloadID == id {
			return
		}
	}
	d.plan.Failures = append(d.plan.Failures, Failure{WorkloadID: id, SpecHash: hash, Reason: reason})
}

// workload plans one desired workload, slot by slot.
func (d *differ) workload(w *contract.WorkloadSpec, id string, cs []*containers.Container) {
	hash := contract.SpecHash(*w)
	first := len(d.plan.Steps)
	n := max(w.Replicas, 0)
	ms := make([]member, 0, len(cs))
	for _, c := range cs {
		m := d.member(c, w, hash)
		if c.Slot >= n || c.Slot < 0 {
			// At or above the replica count, or a slot no replica has
			// (the slot loop below would never reach it, and would lose
			// the slots after it).
			d.remove(m, "scale-down")
			continue
		}
		ms = append(ms, m)
	}
	slices.SortStableFunc(ms, func(a, b member) int { return cmp.Compare(a.c.Slot, b.c.Slot) })
	f, failedBefore := d.h.failed(id)
	failed := failedBefore && f.SpecHash == hash
	s := slotPlanner{d: d, w: w, id: id, hash: hash, failed: failed}

	// First every slot's own steps, counting the slots mid-roll; then the
	// rolls that wait for the surge limit, lowest slot first.
	var waiting []int
	midRoll := 0
	next := 0
	for i := range n {
		start := next
		for next < len(ms) && ms[next].c.Slot == i {
			next++
		}
		members := ms[start:next]
		var mid, wants bool
		if w.Stateful() {
			mid, wants = s.stateful(i, members)
		} else {
			mid, wants = s.stateless(i, members)
		}
		if mid {
			midRoll++
		}
		if wants {
			waiting = append(waiting, i)
		}
	}
	for _, i := range waiting {
		if midRoll >= w.MaxSurge() {
			break
		}
		midRoll++
		d.start(w, id, hash, i, s.replaceTarget[i], "stale")
	}
	// Health restarts take a replica that may still serve out of traffic: at
	// most MaxSurge of the workload's replicas at a time, counting those still
	// booting. A starved prober failing every replica at once must not
	// restart the whole egg.
	budget := w.MaxSurge() - s.booting
	for _, m := range s.unhealthy {
		if budget <= 0 {
			break
		}
		budget--
		d.restart(m, "unhealthy")
	}
	// Keep the workload's steps ordered by slot, the surge starts in place.
	slices.SortStableFunc(d.plan.Steps[first:], func(a, b Step) int { return cmp.Compare(a.ReplicaIndex, b.ReplicaIndex) })
}

// slotPlanner plans the slots of one workload.
type slotPlanner struct {
	d      *differ
	w      *contract.WorkloadSpec
	id     string
	hash   string
	failed bool // the rollout to hash has failed: no new attempt in a serving slot
	// replaceTarget holds, for a stateful slot waiting to roll, the container
	// the replace stops.
	replaceTarget map[int]string
	// unhealthy holds the up-to-date containers to restart for failed
	// health checks, lowest slot first; booting counts the slots whose
	// up-to-date container runs but has not passed a check since its start.
	unhealthy []member
	booting   int
}

// overdue reports whether an up-to-date container's progress deadline,
// counted from its creation, has passed: its rollout has failed unless it has
// become healthy.
func (s *slotPlanner) overdue(m member) bool {
	return s.deadlinePassed(m.c.Created)
}

// incarnationOverdue reports whether a container that was never healthy has
// had the progress deadline since its creation or its last restart: each
// restart of a replacement with nothing to fall back on gets a full deadline.
func (s *slotPlanner) incarnationOverdue(m member) bool {
	from := m.c.Created
	if last := s.d.hist(m).LastRestart; last.After(from) {
		from = last
	}
	return s.deadlinePassed(from)
}

// firstCheckWait is how soon a plan looks again at a container past its
// progress deadline that no check has judged yet (see judged).
const firstCheckWait = time.Second

// judged reports whether a running container that has never been healthy
// has failed a check that counts, which the progress deadline needs before
// it fails a rollout. One no check has judged yet is waited for: an agent
// just started whose memory of the container's health was lost (a data dir
// it could not write when the container turned healthy) sees it unhealthy
// until its first probe answers, and must not restart, or stop, a replica
// that serves (seen possible: every replica rolled while the disk was full,
// restarted at once at the agent's start, their rollouts reported failed).
// The plan wakes soon to look again. A check in the start period never
// counts, so the deadline waits for the start period's end too.
func (s *slotPlanner) judged(m member) bool {
	if m.c.FailingStreak > 0 {
		return true
	}
	s.d.wakeAt(s.d.now.Add(firstCheckWait))
	return false
}

// deadlinePassed reports whether the progress deadline counted from from has
// passed; if it has not, the plan wakes when it does.
func (s *slotPlanner) deadlinePassed(from time.Time) bool {
	if from.IsZero() {
		return false
	}
	deadline := from.Add(s.w.ProgressDeadline())
	if s.d.now.Before(deadline) {
		s.d.wakeAt(deadline)
		return false
	}
	return true
}

func (s *slotPlanner) deadlineReason() string {
	return fmt.Sprintf("not healthy within the progress deadline (%s)", s.w.ProgressDeadline())
}

// shouldRestart applies the restart policy to an exited up-to-date container.
func (s *slotPlanner) shouldRestart(m member) bool {
	switch m.c.State {
	case contract.StateStopped:
		return true // it never ended by itself: start it again
	case contract.StateCompleted:
		return s.w.RestartPolicy() == contract.RestartAlways
	default: // crashed, unknown
		return s.w.RestartPolicy() != contract.RestartNo
	}
}

// oldRank orders stale containers by how much they are worth keeping: in
// traffic first (passing its latest check before one that is only under the
// failure threshold), then running, then the rest.
func oldRank(m member) int {
	switch {
	case m.st == stHealthy && m.c.Healthy:
		return 4
	case m.st == stHealthy:
		return 3
	case m.st == stBooting || m.st == stUnhealthy:
		return 2
	case m.st == stUnknown:
		return 1
	default:
		return 0
	}
}

// upRank orders up-to-date containers by how much they are worth keeping.
func upRank(m member) int {
	switch {
	case m.ready:
		return 7
	case m.st == stHealthy && m.c.Healthy:
		return 6
	case m.st == stHealthy:
		return 5
	case m.st == stBooting:
		return 4
	case m.st == stBuilding:
		return 3
	case m.st == stUnhealthy:
		return 2
	default:
		return 1
	}
}

// best sorts members best first by rank, then the most recently started,
// then by ID, so that the choice is deterministic.
func best(ms []member, rank func(member) int) {
	slices.SortFunc(ms, func(a, b member) int {
		return cmp.Or(cmp.Compare(rank(b), rank(a)), b.c.StartedAt.Compare(a.c.StartedAt), strings.Compare(a.c.ID, b.c.ID))
	})
}

// stateless plans a start-first slot. It reports whether the slot is mid-roll
// (a replacement beside a stale container), and whether it wants to start a
// replacement, which the caller allows within the surge limit.
func (s *slotPlanner) stateless(slot int, members []member) (midRoll, wantsRoll bool) {
	d := s.d
	// Up-to-date first, then stale; what is not acted on (draining, or a
	// stale start in progress) last, cut off.
	group := func(m member) int {
		switch {
		case m.st == stDraining:
			return 2
		case m.upToDate:
			return 0
		case m.st == stBuilding:
			return 2
		default:
			return 1
		}
	}
	slices.SortStableFunc(members, func(a, b member) int { return cmp.Compare(group(a), group(b)) })
	nUp, nOld := 0, 0
	for _, m := range members {
		switch group(m) {
		case 0:
			nUp++
		case 1:
			nOld++
		}
	}
	ups, olds := members[:nUp], members[nUp:nUp+nOld]
	// A stalled roll keeps at most one stale container: the best.
	var keep *member
	if len(olds) > 0 {
		best(olds, oldRank)
		keep = &olds[0]
		for _, m := range olds[1:] {
			d.remove(m, "stale duplicate")
		}
	}

	if len(ups) == 0 {
		switch {
		case keep == nil:
			d.start(s.w, s.id, s.hash, slot, "", "missing")
		case keep.st == stExited || keep.st == stUnknown:
			if s.failed {
				// The fallback of a failed rollout is all the slot has.
				if s.shouldRestart(*keep) {
					d.restart(*keep, "fallback crashed")
				}
				return false, false
			}
			d.step(ActionStop, *keep, "stale, exited")
			d.start(s.w, s.id, s.hash, slot, "", "missing")
		case !s.failed:
			return false, true
		}
		return false, false
	}

	best(ups, upRank)
	u := ups[0]
	for _, m := range ups[1:] {
		if !m.c.Placeholder() {
			d.remove(m, "duplicate")
		}
	}
	midRoll = keep != nil
	everHealthy := !d.hist(u).HealthyStart.IsZero()

	switch u.st {
	case stBuilding:
	case stHealthy:
		if u.ready && keep != nil {
			s.rollOut(*keep)
			midRoll = false
		}
	case stBooting:
		s.booting++
		if u.c.State != contract.StateRunning {
			break // (re)starting: give it its chance
		}
		switch {
		case keep != nil && (s.failed || s.overdue(u) && s.judged(u)):
			// The old container keeps serving; this spec is not tried again.
			d.step(ActionStop, u, "rollout failed")
			d.fail(s.id, s.hash, s.deadlineReason())
			midRoll = false
		case keep == nil && s.incarnationOverdue(u) && s.judged(u):
			d.fail(s.id, s.hash, s.deadlineReason())
			d.restart(u, "not healthy by the progress deadline")
		}
	case stUnhealthy:
		s.unhealthy = append(s.unhealthy, u)
	case stExited, stUnknown:
		switch {
		case keep != nil && !everHealthy && (s.failed || s.overdue(u)):
			d.step(ActionStop, u, "rollout failed")
			d.fail(s.id, s.hash, s.deadlineReason())
			midRoll = false
		case s.shouldRestart(u):
			if keep == nil && !everHealthy && s.overdue(u) {
				d.fail(s.id, s.hash, s.deadlineReason())
			}
			d.restart(u, "crashed")
		default:
			// A job that ran (kept for its logs) or failed without retry.
			if keep != nil && u.c.State == contract.StateCompleted {
				s.rollOut(*keep)
			}
			midRoll = false
		}
	}
	return midRoll, false
}

// rollOut removes a superseded container: drained if serving (the stop half
// of a roll), stopped if not.
func (s *slotPlanner) rollOut(m member) {
	switch m.st {
	case stBuilding, stDraining:
	case stHealthy:
		s.d.step(ActionRoll, m, "superseded")
	default:
		s.d.step(ActionStop, m, "superseded")
	}
}

// statefulRank orders the containers of a stateful slot that holds more than
// one (which the engine never causes): the one worth keeping first.
func statefulRank(m member) int {
	switch {
	case m.upToDate && m.st == stHealthy:
		return 5
	case m.st == stHealthy:
		return 4
	case m.upToDate && m.st == stBooting:
		return 3
	case m.st == stBooting:
		return 2
	case m.st == stUnhealthy:
		return 1
	default:
		return 0
	}
}

// stateful plans a stop-first slot, which never holds two containers: with a
// stale one, it wants a Replace (within the surge limit). It reports whether
// the slot is mid-roll: a start in progress or an up-to-date container not
// yet ready.
func (s *slotPlanner) stateful(slot int, members []member) (midRoll, wantsRoll bool) {
	d := s.d
	var real []member
	busy := false
	for _, m := range members {
		switch m.st {
		case stBuilding:
			busy = true
			midRoll = midRoll || m.upToDate
		case stDraining:
			busy = true
		default:
			real = append(real, m)
		}
	}
	if busy {
		// A start, replace or stop is in progress: the slot holds, or is
		// about to hold, a container; nothing else may start.
		return midRoll, false
	}
	switch len(real) {
	case 0:
		d.start(s.w, s.id, s.hash, slot, "", "missing")
		return false, false
	case 1:
	default:
		best(real, statefulRank)
		for _, m := range real[1:] {
			d.step(ActionStop, m, "second container on a stateful slot")
		}
		return false, false
	}

	c := real[0]
	if c.upToDate {
		midRoll = !c.ready
		switch c.st {
		case stBooting:
			s.booting++
			if c.c.State == contract.StateRunning && s.incarnationOverdue(c) && s.judged(c) {
				d.fail(s.id, s.hash, s.deadlineReason())
				d.restart(c, "not healthy by the progress deadline")
			}
		case stUnhealthy:
			s.unhealthy = append(s.unhealthy, c)
		case stExited, stUnknown:
			if s.shouldRestart(c) {
				if d.hist(c).HealthyStart.IsZero() && s.overdue(c) {
					d.fail(s.id, s.hash, s.deadlineReason())
				}
				d.restart(c, "crashed")
			} else {
				midRoll = false
			}
		}
		return midRoll, false
	}
	if s.failed {
		if (c.st == stExited || c.st == stUnknown) && s.shouldRestart(c) {
			d.restart(c, "fallback crashed")
		}
		return false, false
	}
	if s.replaceTarget == nil {
		s.replaceTarget = map[int]string{}
	}
	s.replaceTarget[slot] = c.c.ID
	return false, true
}
