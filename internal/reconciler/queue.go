package reconciler

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// task is one retried operation: a provider call and the records around it, or
// one readiness check. Each attempt holds a concurrency slot while it runs;
// between attempts (a backoff delay) it holds none.
type task struct {
	priority int    // higher starts first (critical path); ignored in FIFO order
	seq      uint64 // when it became ready: first ready, first started among equals
	// attempt runs in its own goroutine. An error wrapped with
	// backoff.Permanent is final; any other is retried after a backoff delay.
	attempt func(ctx context.Context) error
	// retrying, if set, is told about each failed attempt about to be retried.
	retrying func(err error, attempt int, delay time.Duration)
	// done runs on the scheduler's goroutine once the task is over: err is nil
	// on success, else the last error (unwrapped from backoff.Permanent).
	done func(err error)

	attempts int
	started  time.Time // the first attempt's start
	bo       backoff.BackOff
	lastErr  error
}

// elapsed is the time from the first attempt's start to now, or zero if no
// attempt started.
func (t *task) elapsed() time.Duration {
	if t.attempts == 0 {
		return 0
	}
	return time.Since(t.started)
}

// scheduler runs tasks with at most limit attempts in flight, highest
// priority first. All its state, and everything its done callbacks touch,
// belongs to the goroutine that calls run: attempts and backoff timers run on
// their own goroutines and report back through events, so no lock is needed.
type scheduler struct {
	ctx        context.Context
	limit      int
	newBackoff func() backoff.BackOff

	queue    taskQueue
	seq      uint64
	inflight int // attempts running, each holding a slot
	// outstanding counts the goroutines that will still send an event:
	// running attempts and backoff timers. run returns when it is zero and
	// nothing is queued.
	outstanding int
	events      chan event
}

type event struct {
	t     *task
	err   error
	timer bool // a backoff delay ended (err: the context ended it first)
}

func newScheduler(ctx context.Context, limit int, fifo bool, newBackoff func() backoff.BackOff) *scheduler {
	return &scheduler{
		ctx:        ctx,
		limit:      max(limit, 1),
		newBackoff: newBackoff,
		queue:      taskQueue{fifo: fifo},
		events:     make(chan event),
	}
}

// submit queues a task that is ready to start.
func (s *scheduler) submit(t *task) {
	s.seq++
	t.seq = s.seq
	heap.Push(&s.queue, t)
}

// run starts queued tasks as slots free up and returns once every task is
// over, including the ones done callbacks submit meanwhile. After the context
// is cancelled, queued tasks end at once with the context's error and running
// attempts are waited for (they see the same context).
func (s *scheduler) run() {
	for {
		s.startQueued()
		if s.outstanding == 0 && s.queue.Len() == 0 {
			return
		}
		ev := <-s.events
		s.outstanding--
		if ev.timer {
			s.retry(ev)
		} else {
			s.inflight--
			s.finish(ev)
		}
	}
}

func (s *scheduler) startQueued() {
	for s.queue.Len() > 0 {
		if err := s.ctx.Err(); err != nil {
			t := heap.Pop(&s.queue).(*task)
			t.done(stopped(err, t.lastErr))
			continue
		}
		if s.inflight >= s.limit {
			return
		}
		t := heap.Pop(&s.queue).(*task)
		if t.attempts == 0 {
			t.started = time.Now()
		}
		t.attempts++
		s.inflight++
		s.outstanding++
		go func() { s.events <- event{t: t, err: t.attempt(s.ctx)} }()
	}
}

// finish handles the end of an attempt: done, or a backoff delay before the
// next one, spent on a timer goroutine without a slot.
func (s *scheduler) finish(ev event) {
	t := ev.t
	if ev.err == nil {
		t.done(nil)
		return
	}
	if perm := (*backoff.PermanentError)(nil); errors.As(ev.err, &perm) {
		t.done(perm.Err)
		return
	}
	if err := s.ctx.Err(); err != nil {
		t.done(stopped(err, ev.err))
		return
	}
	if t.bo == nil {
		t.bo = s.newBackoff()
		t.bo.Reset()
	}
	delay := t.bo.NextBackOff()
	if delay == backoff.Stop {
		t.done(ev.err)
		return
	}
	t.lastErr = ev.err
	if t.retrying != nil {
		t.retrying(ev.err, t.attempts, delay)
	}
	s.outstanding++
	go func() {
		timer := time.NewTimer(delay)
		defer timer.Stop()
		select {
		case <-timer.C:
			s.events <- event{t: t, timer: true}
		case <-s.ctx.Done():
			s.events <- event{t: t, err: s.ctx.Err(), timer: true}
		}
	}()
}

func (s *scheduler) retry(ev event) {
	if ev.err != nil {
		ev.t.done(stopped(ev.err, ev.t.lastErr))
		return
	}
	s.submit(ev.t)
}

// stopped is the error of a task the context ended, keeping the last attempt's
// error as the reason it was still running.
func stopped(ctxErr, last error) error {
	if last == nil {
		return ctxErr
	}
	return fmt.Errorf("%w (last attempt: %w)", ctxErr, last)
}

// taskQueue is a heap of ready tasks: highest priority first, then first
// ready; or first ready alone in FIFO order.
type taskQueue struct {
	tasks []*task
	fifo  bool
}

func (q *taskQueue) Len() int { return len(q.tasks) }
func (q *taskQueue) Less(i, j int) bool {
	a, b := q.tasks[i], q.tasks[j]
	if !q.fifo && a.priority != b.priority {
		return a.priority > b.priority
	}
	return a.seq < b.seq
}
func (q *taskQueue) Swap(i, j int) { q.tasks[i], q.tasks[j] = q.tasks[j], q.tasks[i] }
func (q *taskQueue) Push(x any)    { q.tasks = append(q.tasks, x.(*task)) }
func (q *taskQueue) Pop() any {
	t := q.tasks[len(q.tasks)-1]
	q.tasks = q.tasks[:len(q.tasks)-1]
	return t
}
