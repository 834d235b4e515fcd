package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/store"
)

// tickPlan is what one pass decides of one schedule: the runs to record
// (to run, skipped, and one standing for the missed ticks), the runs to
// stop (concurrency: replace), and the last tick decided.
type tickPlan struct {
	record []store.Run
	stop   []string
	last   time.Time
}

// onTime is how late a tick may be decided and still count as on time
// (trigger schedule): a scheduler passes at least every second, so a
// later one was decided after the control plane was away (a takeover, a
// restart): trigger missed.
const onTime = 2 * time.Second

// planTicks decides the ticks of sc due at now since st's last tick,
// given the egg's runs that have not ended (open). It is pure: the clock
// and the IDs are its inputs. A tick within its starting deadline runs
// (late if need be, with trigger missed), unless concurrency forbid
// finds a run of the egg still open (the tick is recorded skipped); under
// replace the open runs are stopped. The ticks past their deadline are one
// run recorded missed, with their count. Nothing is due: a zero plan.
func planTicks(sc Scheduled, st store.ScheduleState, open []store.Run, now time.Time, newID func() string) tickPlan {
	due, missed, lastMissed := sc.Timer.Due(st.LastTick, now, sc.Rules.StartingDeadline)
	var p tickPlan
	run := func(tick time.Time, trigger, state string) store.Run {
		r := store.Run{ID: newID(), Project: sc.Project, Egg: sc.Egg, Trigger: trigger, ScheduledAt: tick, CreatedAt: now,
			State: state, Timeout: sc.Rules.Timeout}
		if store.RunEnded(state) {
			r.EndedAt, r.ReleasedAt = now, now // never delivered
		}
		return r
	}
	if missed > 0 {
		m := run(lastMissed, api.TriggerMissed, store.RunMissed)
		m.Missed = missed
		p.record = append(p.record, m)
		p.last = lastMissed
	}
	running := len(open) > 0
	for i, tick := range due {
		trigger := api.TriggerSchedule
		if i < len(due)-1 || now.Sub(tick) > onTime {
			trigger = api.TriggerMissed // a catch-up of a tick the control plane was away for
		}
		switch {
		case running && sc.Rules.Concurrency == inputs.ConcurrencyForbid:
			p.record = append(p.record, run(tick, trigger, store.RunSkipped))
		case running && sc.Rules.Concurrency == inputs.ConcurrencyReplace:
			for _, r := range open {
				p.stop = append(p.stop, r.ID)
			}
			open = nil
			fallthrough
		default:
			r := run(tick, trigger, store.RunPending)
			p.record = append(p.record, r)
			open = append(open, r)
			running = true
		}
		p.last = tick
	}
	return p
}

// BeginLoops returns the scheduler's loop, which the server runs while it
// holds the loops' lease, on a context fenced by it (package leader): its
// writes need that lease, so none lands once another server took over.
func (s *Service) BeginLoops(ctx context.Context) (run func(ctx context.Context), err error) {
	return s.loop, nil
}

// loop runs a pass every Tick, or sooner at the next due tick, and
// prunes old records every PruneEvery, until ctx ends.
func (s *Service) loop(ctx context.Context) {
	var pruned time.Time
	began := s.now()
	for {
		next := s.pass(ctx, began)
		if now := s.now(); now.Sub(pruned) >= s.cfg.PruneEvery {
			if n, err := s.deps.Runs.PruneRuns(ctx, s.cfg.KeepRecords); err != nil && ctx.Err() == nil {
				s.log.Warn("old records of runs not pruned; retrying", zap.Error(err))
			} else if err == nil {
				pruned = now
				if n > 0 {
					s.log.Info("old records of runs pruned", zap.Int64("runs", n), zap.Int("kept per egg", s.cfg.KeepRecords))
				}
			}
		}
		wait := s.cfg.Tick
		if !next.IsZero() {
			wait = min(wait, max(next.Sub(s.now()), 0))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// pass is one round of the scheduler: record what hosts reported of their
// runs, record the due ticks, deliver what is recorded and not delivered
// (and the stops asked), and take ended runs out of the desired states.
// The reports come first: a tick of concurrency forbid is decided on the
// runs' ends reported by then, so a run that ended since the last pass
// does not make it skip. It returns the earliest next tick of the
// schedules (zero: none). began is when this server's scheduler began (see
// hearFirst).
func (s *Service) pass(ctx context.Context, began time.Time) time.Time {
	s.step(ctx, "record runs' progress", s.recordProgress)
	next, err := s.decideTicks(ctx, began)
	if err != nil && ctx.Err() == nil {
		s.log.Warn("ticks not decided; retrying", zap.Error(err))
	}
	s.step(ctx, "deliver runs", s.deliverPending)
	s.step(ctx, "release ended runs", s.releaseEnded)
	return next
}

// step runs one step of a pass; its error is logged, and the next pass
// retries it.
func (s *Service) step(ctx context.Context, name string, fn func(context.Context) error) {
	if err := fn(ctx); err != nil && ctx.Err() == nil {
		s.log.Warn("jobs: "+name+" incomplete; retrying", zap.Error(err))
	}
}

// decideTicks records the due ticks of every schedule and returns the
// earliest next tick.
func (s *Service) decideTicks(ctx context.Context, began time.Time) (time.Time, error) {
	items, err := s.timed.read(ctx, s.now())
	if err != nil {
		return time.Time{}, err
	}
	states, err := s.scheduleStates(ctx, "")
	if err != nil {
		return time.Time{}, err
	}
	var next time.Time
	var errs []error
	others := map[Ticks]map[string]store.ScheduleState{} // each other kind's states, read once per pass
	for _, sc := range items {
		key := sc.Project + " " + sc.Egg
		st, ok := states[key]
		if sc.Ticks != nil {
			if _, read := others[sc.Ticks]; !read {
				if others[sc.Ticks], err = sc.Ticks.ScheduleStates(ctx); err != nil {
					errs = append(errs, err)
					continue
				}
			}
			st, ok = others[sc.Ticks][key]
		}
		if n := sc.Timer.Next(later(st.LastTick, s.now())); !st.Paused && !n.IsZero() && (next.IsZero() || n.Before(next)) {
			next = n
		}
		if !ok {
			// A schedule seen first: its ticks count from now.
			st = store.ScheduleState{Project: sc.Project, Egg: sc.Egg, LastTick: s.now(), UpdatedAt: s.now()}
			initSchedule := s.deps.Schedules.InitSchedule
			if sc.Ticks != nil {
				initSchedule = sc.Ticks.InitSchedule
			}
			if _, err := initSchedule(ctx, st); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if st.Paused {
			continue
		}
		if sc.Ticks != nil {
			if err := sc.Ticks.DecideTicks(ctx, sc, st, s.now(), began); err != nil {
				errs = append(errs, fmt.Errorf("%s %s: %w", sc.Project, sc.Egg, err))
			}
			continue
		}
		if err := s.decideSchedule(ctx, sc, st, began); err != nil {
			errs = append(errs, fmt.Errorf("%s egg %s: %w", sc.Project, sc.Egg, err))
		}
	}
	return next, errors.Join(errs...)
}

// hearFirst bounds how long a scheduler that has just begun (a restart, a
// takeover) waits to hear from a host before it decides a forbid tick on
// that host's report from before it began: that report may hold a run the
// host has ended since, while no server could hear of it (the agents
// report every 2 s, at once when a server is back). A host that stays
// silent is marked down, and its runs lost, by the fleet's own check.
const hearFirst = 10 * time.Second

// decideSchedule records the due ticks of one schedule. Under concurrency
// forbid, a tick is left undecided for the next pass while an open run's
// host has not reported since the scheduler began, for up to hearFirst:
// otherwise a run that ended during a control-plane outage would make the
// first tick after it skip.
func (s *Service) decideSchedule(ctx context.Context, sc Scheduled, st store.ScheduleState, began time.Time) error {
	open, err := s.openRuns(ctx, sc.Project, sc.Egg)
	if err != nil {
		return err
	}
	now := s.now()
	if sc.Rules.Concurrency == inputs.ConcurrencyForbid && now.Sub(began) < hearFirst {
		unheard, err := s.unheardSince(ctx, open, began)
		if err != nil || unheard != "" {
			return err
		}
	}
	p := planTicks(sc, st, open, now, newRunID)
	if p.last.IsZero() {
		return nil
	}
	err = s.deps.Runs.CreateRuns(ctx, p.record, &store.ScheduleState{Project: sc.Project, Egg: sc.Egg, LastTick: p.last, UpdatedAt: now})
	if errors.Is(err, store.ErrExists) {
		s.log.Info("ticks decided already (by another pass or server): left as recorded",
			zap.String("project", sc.Project), zap.String("egg", sc.Egg), zap.Error(err))
		return nil
	}
	if err != nil {
		return err
	}
	for _, r := range p.record {
		switch r.State {
		case store.RunMissed:
			s.event(ctx, store.Event{Type: store.EventRunMissed, Project: r.Project, Resource: resource.Key(resource.Egg, r.Egg),
				Message: fmt.Sprintf("egg %s missed %d ticks of its schedule, the last at %s, past its starting deadline of %s",
					r.Egg, r.Missed, r.ScheduledAt.Format(time.RFC3339), sc.Rules.StartingDeadline)})
		case store.RunSkipped:
			s.log.Info("tick skipped: the egg's previous run still runs (concurrency: forbid)",
				zap.String("project", r.Project), zap.String("egg", r.Egg), zap.Time("tick", r.ScheduledAt))
		default:
			s.log.Info("tick recorded", zap.String("project", r.Project), zap.String("egg", r.Egg), zap.String("run", r.ID),
				zap.Time("tick", r.ScheduledAt), zap.Duration("late", now.Sub(r.ScheduledAt)))
		}
	}
	for _, id := range p.stop {
		if _, err := s.deps.Runs.RequestRunStop(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// scheduleStates returns the stored schedule states of project ("" for
// all) by "project egg".
func (s *Service) scheduleStates(ctx context.Context, project string) (map[string]store.ScheduleState, error) {
	list, err := s.deps.Schedules.ListScheduleStates(ctx, project)
	if err != nil {
		return nil, err
	}
	out := make(map[string]store.ScheduleState, len(list))
	for _, st := range list {
		out[st.Project+" "+st.Egg] = st
	}
	return out, nil
}

// openRuns returns the egg's runs that have not ended.
func (s *Service) openRuns(ctx context.Context, project, egg string) ([]store.Run, error) {
	runs, err := s.deps.Runs.ListRuns(ctx, store.RunFilter{Project: project, Egg: egg, Unreleased: true})
	if err != nil {
		return nil, err
	}
	var open []store.Run
	for _, r := range runs {
		if !store.RunEnded(r.State) {
			open = append(open, r)
		}
	}
	return open, nil
}

// unheardSince returns a host of the open runs that has not reported
// since the time given ("" if all have).
func (s *Service) unheardSince(ctx context.Context, open []store.Run, since time.Time) (string, error) {
	for _, r := range open {
		if r.DeliveredAt.IsZero() {
			continue // not on a host yet: open for sure
		}
		st, err := s.deps.Hosts.Status(ctx, r.Host)
		if errors.Is(err, store.ErrNotFound) || err == nil && st.ReceivedAt.Before(since) {
			return r.Host, nil
		}
		if err != nil {
			return "", fmt.Errorf("host %s's report: %w", r.Host, err)
		}
	}
	return "", nil
}

// later returns the later of two times.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// timedWork is the scheduler's copy of what its sources list, read again
// when the event log moved (an apply, a restart or a reschedule records
// its changes of resources there, through whichever server), and at least
// every refreshEvery: a pass every second reads the store's schedules
// states and runs, not every project's resources. Only the loop uses it.
type timedWork struct {
	sources []Source
	watch   func() <-chan struct{}
	changed <-chan struct{} // closed at the next event after the last read
	readAt  time.Time
	items   []Scheduled
}

// refreshEvery bounds how long the copy is trusted without an event.
const refreshEvery = 30 * time.Second

func (w *timedWork) read(ctx context.Context, now time.Time) ([]Scheduled, error) {
	if w.changed != nil && now.Sub(w.readAt) < refreshEvery {
		select {
		case <-w.changed:
		default:
			return w.items, nil
		}
	}
	changed := w.watch() // before the read: no change slips between
	var items []Scheduled
	for _, src := range w.sources {
		list, err := src.Scheduled(ctx, "")
		if err != nil {
			return nil, err
		}
		items = append(items, list...)
	}
	w.items, w.changed, w.readAt = items, changed, now
	return items, nil
}
