package reconciler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/resource"
)

// persistTimeout bounds the write that records an operation which succeeded,
// made even after the run's context was cancelled so that nothing done is
// forgotten.
const persistTimeout = 30 * time.Second

// walk is one Reconcile in progress. Its fields are touched only by the
// goroutine running the scheduler (callbacks included); attempts, on their own
// goroutines, work on values handed to them and report back by return value.
type walk struct {
	ctx     context.Context
	r       *Reconciler
	st      *state
	log     *zap.Logger
	sched   *scheduler
	runs    []*run // by node.index
	dels    []*del // by unwanted.index
	waiters map[readiness]*waiter
	// ready holds the resources whose parents all succeeded, to be started
	// by drain; a queue rather than recursion, so long chains of unchanged
	// resources do not nest calls.
	ready    []*run
	draining bool
	failures int // desired resources failed or skipped
}

// run is the progress of one desired resource.
type run struct {
	n           *node
	prev        *resource.Deployed // its record before this walk, if any
	parentsLeft int                // parents not yet succeeded
	readyLeft   int                // readiness waits not yet met
	finished    bool
	next        *resource.Deployed // the record its operation writes
	current     *resource.Deployed // once succeeded: the record children read
	res         ResourceResult
}

// del is the progress of one unwanted record's deletion.
type del struct {
	u           *unwanted
	blockedLeft int // unwanted children not yet deleted
	finished    bool
	res         ResourceResult
}

// waiter is one poll of a parent's readiness, shared by every child that
// needs the same condition of the same parent.
type waiter struct {
	over    bool
	err     error  // why it never became ready, once over
	skipped bool   // over without a single check: the context ended
	waiting []*run // children to release when it is over
}

func newWalk(ctx context.Context, r *Reconciler, st *state) *walk {
	w := &walk{
		ctx:     ctx,
		r:       r,
		st:      st,
		log:     r.logger().With(zap.String("project", st.project)),
		sched:   newScheduler(ctx, r.limit(), r.fifo, r.newBackoff),
		runs:    make([]*run, len(st.graph.nodes)),
		dels:    make([]*del, len(st.unwanted)),
		waiters: map[readiness]*waiter{},
	}
	for i, n := range st.graph.nodes {
		w.runs[i] = &run{n: n, prev: st.deployed[n.key], parentsLeft: len(n.parents), res: ResourceResult{Key: n.key}}
	}
	for i, u := range st.unwanted {
		w.dels[i] = &del{u: u, blockedLeft: len(u.blockedBy), res: ResourceResult{Key: u.rec.Key(), ID: u.rec.ID, Planned: ActionDelete}}
	}
	return w
}

// applyDesired is the create/update phase.
func (w *walk) applyDesired() {
	for _, rn := range w.runs {
		if rn.parentsLeft == 0 {
			w.ready = append(w.ready, rn)
		}
	}
	w.drain()
	w.sched.run()
}

// drain starts the resources whose parents all succeeded.
func (w *walk) drain() {
	if w.draining {
		return // the outer call will get to them
	}
	w.draining = true
	for len(w.ready) > 0 {
		rn := w.ready[0]
		w.ready = w.ready[1:]
		if !rn.finished {
			w.start(rn)
		}
	}
	w.ready = nil
	w.draining = false
}

// start matches a resource whose parents all succeeded to its record and
// either passes it on unchanged or sets its operation going (after its
// readiness waits).
func (w *walk) start(rn *run) {
	if err := w.ctx.Err(); err != nil {
		w.skip(rn, err)
		return
	}
	n := rn.n
	resolved, err := resolve(n, func(parent string) map[string]any {
		return w.runs[w.st.graph.byKey[parent].index].current.Outputs
	})
	if err != nil {
		w.fail(rn, fmt.Errorf("resolve inputs of %s: %w", n.key, err))
		return
	}
	action, changed := decide(n, resolved, nil, rn.prev)
	rn.res.Planned, rn.res.Changed = action, changed
	switch action {
	case ActionUnchanged:
		rn.res.ID = rn.prev.ID
		if sameParents(rn.prev.Parents, n) {
			if ce := w.log.Check(zap.DebugLevel, "unchanged"); ce != nil {
				ce.Write(zap.String("resource", n.key), zap.String("id", rn.prev.ID))
			}
			w.succeed(rn, rn.prev)
			return
		}
		// Only the recorded parents are stale (a dependency without a
		// reference changed): refresh the record, so deletes stay in order.
		rn.next = w.record(rn, rn.prev.ID, rn.prev.Outputs)
		w.submitOp(rn)
		return
	case ActionCreate:
		id := ""
		if rn.prev != nil {
			id = rn.prev.ID // a pending create: same ID, so the provider adopts
		} else {
			id = w.r.generateID()
		}
		rn.next = w.record(rn, id, nil)
		rn.next.Inputs = resolved
		rn.next.Pending = true
	case ActionUpdate:
		rn.next = w.record(rn, rn.prev.ID, rn.prev.Outputs)
		rn.next.Inputs = resolved
	}
	rn.res.ID = rn.next.ID
	for _, rd := range n.waits {
		wt := w.waiter(rd)
		if !wt.over {
			wt.waiting = append(wt.waiting, rn)
			rn.readyLeft++
		} else if wt.skipped {
			w.skip(rn, wt.err)
			return
		} else if wt.err != nil {
			w.fail(rn, wt.err)
			return
		}
	}
	if rn.readyLeft == 0 {
		w.submitOp(rn)
	}
}

// record returns the record the resource will have: its desired identity and
// current parents, with the ID and outputs given.
func (w *walk) record(rn *run, id string, outputs map[string]any) *resource.Deployed {
	rec := &resource.Deployed{
		ID:      id,
		Type:    rn.n.res.Type,
		Name:    rn.n.res.Name,
		Source:  rn.n.res.Source,
		Outputs: outputs,
		Parents: rn.n.parentKeys(),
	}
	if rn.prev != nil {
		rec.Inputs = rn.prev.Inputs
	}
	return rec
}

// waiter returns the poll of rd's parent for rd's condition, starting it on
// first use.
func (w *walk) waiter(rd readiness) *waiter {
	if wt, ok := w.waiters[rd]; ok {
		return wt
	}
	parent := w.runs[rd.parent.index]
	wt := &waiter{}
	w.waiters[rd] = wt
	rec := parent.current.Clone()
	p, project := rd.parent.provider, w.st.project
	var reason string // the last "not ready" reason, from the attempts
	t := &task{priority: rd.parent.height}
	t.attempt = func(ctx context.Context) error {
		ready, why, err := p.Ready(ctx, project, rec.Clone(), rd.cond)
		if err != nil {
			return err
		}
		if !ready {
			reason = why
			return fmt.Errorf("%w: %s", ErrNotReady, why)
		}
		return nil
	}
	t.retrying = func(_ error, attempt int, delay time.Duration) {
		w.log.Debug("not ready yet", zap.String("resource", rd.parent.key), zap.String("condition", string(rd.cond)),
			zap.String("reason", reason), zap.Int("check", attempt), zap.Duration("delay", delay))
	}
	t.done = func(err error) {
		wt.over = true
		switch {
		case err != nil && t.attempts == 0:
			wt.err, wt.skipped = err, true // the context ended before the first check
		case err != nil:
			if reason != "" && !errors.Is(err, ErrNotReady) {
				err = fmt.Errorf("%w (last seen: %s)", err, reason)
			}
			wt.err = fmt.Errorf("%s is not %s: %w", rd.parent.key, rd.cond, err)
		}
		for _, child := range wt.waiting {
			switch {
			case child.finished:
			case wt.skipped:
				w.skip(child, wt.err)
			case wt.err != nil:
				w.fail(child, wt.err)
			default:
				if child.readyLeft--; child.readyLeft == 0 {
					w.submitOp(child)
				}
			}
		}
		wt.waiting = nil
	}
	w.sched.submit(t)
	return wt
}

// submitOp queues the operation decided for rn: create, update, or (for an
// unchanged resource whose recorded parents are stale) a record refresh.
func (w *walk) submitOp(rn *run) {
	action, key := rn.res.Planned, rn.n.key
	prev, next := rn.prev.Clone(), rn.next.Clone()
	p, project, store := rn.n.provider, w.st.project, w.r.Resources
	log := w.log.With(zap.String("resource", key), zap.String("id", next.ID))
	source := ""
	if action != ActionUnchanged {
		source = rn.n.res.Source
	}
	pendingSaved := false
	var written *resource.Deployed // set by the attempt that succeeds
	t := &task{priority: rn.n.height}
	t.attempt = func(ctx context.Context) error {
		if source != "" {
			if err := w.checkSource(ctx, source); err != nil {
				return err
			}
			source = "" // checked once; retries go on from here
		}
		if action == ActionCreate && !pendingSaved {
			if err := store.PutResource(ctx, project, next); err != nil {
				return fmt.Errorf("record pending create: %w", err)
			}
			pendingSaved = true
		}
		rec := next.Clone()
		switch action {
		case ActionCreate:
			out, err := p.Create(ctx, project, next.Clone())
			if err != nil {
				return err
			}
			rec.Outputs, rec.Pending = resource.Clone(out), false
		case ActionUpdate:
			out, err := p.Update(ctx, project, prev.Clone(), next.Clone())
			if err != nil {
				return err
			}
			rec.Outputs = resource.Clone(out)
		}
		if err := persist(ctx, func(ctx context.Context) error { return store.PutResource(ctx, project, rec) }); err != nil {
			return fmt.Errorf("record %s: %w", action, err)
		}
		written = rec
		return nil
	}
	t.retrying = func(err error, attempt int, delay time.Duration) {
		log.Warn("retrying "+string(action), zap.Int("attempt", attempt), zap.Duration("delay", delay), zap.Error(err))
	}
	t.done = func(err error) {
		rn.res.Attempts, rn.res.Duration = t.attempts, t.elapsed()
		if err != nil && t.attempts == 0 {
			w.skip(rn, err) // the context ended before it started
			return
		}
		if err != nil {
			w.fail(rn, fmt.Errorf("%s %s: %w", verb(action), key, err))
			return
		}
		log.Info(string(action), zap.Int("attempts", t.attempts), zap.Duration("duration", rn.res.Duration))
		w.succeed(rn, written)
	}
	w.sched.submit(t)
}

// checkSource refuses, permanently, a resource whose source blob is not stored.
func (w *walk) checkSource(ctx context.Context, digest string) error {
	ok, err := w.r.Source.HasSource(ctx, digest)
	if err != nil {
		return fmt.Errorf("look up source %s: %w", digest, err)
	}
	if !ok {
		return backoff.Permanent(fmt.Errorf("%w: %s (upload it before applying)", ErrSourceMissing, digest))
	}
	return nil
}

// persist records an operation that succeeded. It goes ahead even if the run
// was cancelled meanwhile: the operation is done, and forgetting it would cost
// a re-run a duplicate or a stale record.
func persist(ctx context.Context, write func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), persistTimeout)
	defer cancel()
	return write(ctx)
}

// succeed passes rn's record on to its children and starts those whose
// parents have now all succeeded.
func (w *walk) succeed(rn *run, rec *resource.Deployed) {
	rn.finished = true
	rn.current = rec
	rn.res.Action = rn.res.Planned
	for _, c := range rn.n.children {
		child := w.runs[c.index]
		if child.parentsLeft--; child.parentsLeft == 0 && !child.finished {
			w.ready = append(w.ready, child)
		}
	}
	w.drain()
}

// fail records rn's failure and skips everything below it: none of it has
// started, since a resource starts only once all its parents succeeded.
func (w *walk) fail(rn *run, err error) {
	rn.finished = true
	rn.res.Action, rn.res.Err = ActionFailed, err
	w.failures++
	w.log.Warn("failed", zap.String("resource", rn.n.key), zap.Error(err))
	w.skipBelow(rn, fmt.Errorf("%w: %s failed: %w", ErrSkipped, rn.n.key, err))
}

// skip records that rn was never started, and skips everything below it.
func (w *walk) skip(rn *run, cause error) {
	rn.finished = true
	rn.res.Action, rn.res.Err = ActionSkipped, cause
	w.failures++
	w.skipBelow(rn, cause)
}

func (w *walk) skipBelow(rn *run, cause error) {
	stack := []*node{rn.n}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, c := range n.children {
			child := w.runs[c.index]
			if child.finished {
				continue
			}
			child.finished = true
			child.res.Action, child.res.Err = ActionSkipped, cause
			w.failures++
			stack = append(stack, c)
		}
	}
}

// deleteUnwanted is the delete phase: only after everything desired is in
// place, children before parents.
func (w *walk) deleteUnwanted() {
	if len(w.dels) == 0 {
		return
	}
	var cause error
	switch {
	case w.failures > 0:
		cause = fmt.Errorf("%w: nothing is deleted, because %d desired resources failed or were skipped", ErrSkipped, w.failures)
	case w.ctx.Err() != nil:
		cause = fmt.Errorf("%w: nothing is deleted: %w", ErrSkipped, w.ctx.Err())
	}
	if cause != nil {
		for _, d := range w.dels {
			d.finished = true
			d.res.Action, d.res.Err = ActionSkipped, cause
		}
		return
	}
	for _, d := range w.dels {
		if d.blockedLeft == 0 {
			w.submitDelete(d)
		}
	}
	w.sched.run()
}

func (w *walk) submitDelete(d *del) {
	rec, key := d.u.rec.Clone(), d.u.rec.Key()
	p, project, store := d.u.provider, w.st.project, w.r.Resources
	log := w.log.With(zap.String("resource", key), zap.String("id", rec.ID))
	t := &task{priority: d.u.height}
	t.attempt = func(ctx context.Context) error {
		if err := p.Delete(ctx, project, rec.Clone()); err != nil {
			return err
		}
		if err := persist(ctx, func(ctx context.Context) error { return store.DeleteResource(ctx, project, rec) }); err != nil {
			return fmt.Errorf("forget deleted record: %w", err)
		}
		return nil
	}
	t.retrying = func(err error, attempt int, delay time.Duration) {
		log.Warn("retrying delete", zap.Int("attempt", attempt), zap.Duration("delay", delay), zap.Error(err))
	}
	t.done = func(err error) {
		d.finished = true
		d.res.Attempts, d.res.Duration = t.attempts, t.elapsed()
		if err != nil && t.attempts == 0 {
			d.res.Action, d.res.Err = ActionSkipped, err // the context ended before it started
			w.skipParents(d, err)
			return
		}
		if err != nil {
			d.res.Action, d.res.Err = ActionFailed, fmt.Errorf("delete %s: %w", key, err)
			log.Warn("failed", zap.Error(d.res.Err))
			w.skipParents(d, fmt.Errorf("%w: %s, which depended on it, was not deleted: %w", ErrSkipped, key, err))
			return
		}
		d.res.Action = ActionDelete
		log.Info("delete", zap.Int("attempts", t.attempts), zap.Duration("duration", d.res.Duration))
		for _, pu := range d.u.unblocks {
			parent := w.dels[pu.index]
			if parent.blockedLeft--; parent.blockedLeft == 0 && !parent.finished {
				w.submitDelete(parent)
			}
		}
	}
	w.sched.submit(t)
}

// skipParents keeps the records d depended on, and theirs: deleting a parent
// before its child is gone is what the delete order exists to prevent.
func (w *walk) skipParents(d *del, cause error) {
	stack := []*unwanted{d.u}
	for len(stack) > 0 {
		u := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, pu := range u.unblocks {
			parent := w.dels[pu.index]
			if parent.finished {
				continue
			}
			parent.finished = true
			parent.res.Action, parent.res.Err = ActionSkipped, cause
			stack = append(stack, pu)
		}
	}
}

func (w *walk) result() Result {
	res := Result{Project: w.st.project, Resources: make([]ResourceResult, 0, len(w.runs)+len(w.dels))}
	for _, rn := range w.runs {
		res.Resources = append(res.Resources, rn.res)
	}
	for _, d := range w.dels {
		res.Resources = append(res.Resources, d.res)
	}
	return res
}

func verb(a Action) string {
	if a == ActionUnchanged {
		return "record"
	}
	return string(a)
}
