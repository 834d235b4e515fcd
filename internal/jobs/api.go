package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

// Start runs a command in a new container of the egg (`hatch run`):
// recorded, placed (req.Host, or a host that may run the egg) and
// delivered before it returns. A refused run is not recorded.
func (s *Service) Start(ctx context.Context, project, egg string, req api.RunRequest, actor string) (api.Run, error) {
	rec, err := s.eggRecord(ctx, project, egg)
	if err != nil {
		return api.Run{}, err
	}
	rules, _ := rulesOf(rec)
	timeout := rules.Timeout
	if req.Timeout != "" {
		if timeout, err = time.ParseDuration(req.Timeout); err != nil || timeout <= 0 {
			return api.Run{}, fmt.Errorf("%w: timeout %q is not a positive duration (for example 30s, 15m)", ErrRefused, req.Timeout)
		}
	}
	r := store.Run{ID: newRunID(), Project: project, Egg: egg, Host: req.Host, Trigger: api.TriggerManual, Actor: actor,
		CreatedAt: s.now(), State: store.RunPending, Kept: req.Keep, Command: req.Command, Timeout: timeout,
		StopEgg: req.Stop && holdsReplicas(rec), TTY: req.TTY} // --stop means nothing to an egg without a volume's replica
	got, err := s.startRun(store.WithActor(ctx, actor), r, rec)
	if err != nil {
		return api.Run{}, err
	}
	s.event(store.WithActor(ctx, actor), store.Event{Type: store.EventRunManual, Project: project, Host: got.Host,
		Resource: resource.Key(resource.Egg, egg), Actor: actor, Message: fmt.Sprintf("%s ran %s in a new container of egg %s (run %s)",
			actorName(actor), commandText(req.Command), egg, got.ID)})
	return s.view(ctx, got)
}

// Fire runs a scheduled egg now, outside its schedule (`hatch schedule
// run`), with its own command and its schedule's timeout.
func (s *Service) Fire(ctx context.Context, project, egg, actor string) (api.Run, error) {
	rec, err := s.eggRecord(ctx, project, egg)
	if err != nil {
		return api.Run{}, err
	}
	rules, ok := rulesOf(rec)
	if !ok {
		return api.Run{}, fmt.Errorf("%w: egg %s has no schedule to fire (hatch run runs any egg)", ErrRefused, egg)
	}
	r := store.Run{ID: newRunID(), Project: project, Egg: egg, Trigger: api.TriggerFire, Actor: actor,
		CreatedAt: s.now(), State: store.RunPending, Timeout: rules.Timeout}
	got, err := s.startRun(store.WithActor(ctx, actor), r, rec)
	if err != nil {
		return api.Run{}, err
	}
	s.event(store.WithActor(ctx, actor), store.Event{Type: store.EventScheduleFired, Project: project, Host: got.Host,
		Resource: resource.Key(resource.Egg, egg), Actor: actor,
		Message: fmt.Sprintf("%s fired egg %s outside its schedule (run %s)", actorName(actor), egg, got.ID)})
	return s.view(ctx, got)
}

// Stop asks the run's host to stop it (Ctrl-C on `hatch run`); a run not
// delivered yet never starts. Stopping an ended run changes nothing. The
// stop is recorded first, and carried to the desired state under the
// project's lease, by the scheduler's next pass if an apply holds it.
func (s *Service) Stop(ctx context.Context, project, runID, actor string) (api.Run, error) {
	r, err := s.run(ctx, project, runID)
	if err != nil {
		return api.Run{}, err
	}
	if store.RunEnded(r.State) {
		return s.view(ctx, r)
	}
	ctx = store.WithActor(ctx, actor)
	if _, err := s.deps.Runs.RequestRunStop(ctx, runID); err != nil {
		return api.Run{}, err
	}
	_, err = s.withLease(ctx, project, store.BriefHolder+"stop", s.cfg.LeaseWait, func(ctx context.Context) error {
		return s.deliver(ctx, project, []string{runID})
	})
	if err != nil && !errors.Is(err, store.ErrLocked) { // locked: the scheduler's next pass stops it
		return api.Run{}, err
	}
	return s.Get(ctx, project, runID)
}

// Get returns one run of the project.
func (s *Service) Get(ctx context.Context, project, runID string) (api.Run, error) {
	r, err := s.run(ctx, project, runID)
	if err != nil {
		return api.Run{}, err
	}
	return s.view(ctx, r)
}

// waitPoll is how often Wait reads the run again: its end is recorded by
// whichever server holds the loops, so a change is read from the store.
const waitPoll = 200 * time.Millisecond

// Wait returns the run once its State differs from state, or when ctx
// ends (then the run as it is, and no error).
func (s *Service) Wait(ctx context.Context, project, runID, state string) (api.Run, error) {
	for {
		r, err := s.run(context.WithoutCancel(ctx), project, runID)
		if err != nil {
			return api.Run{}, err
		}
		if r.State != state || ctx.Err() != nil {
			return s.view(context.WithoutCancel(ctx), r)
		}
		select {
		case <-ctx.Done():
		case <-time.After(waitPoll):
		}
	}
}

// List returns the project's runs (of egg, or all for ""), newest first,
// at most Config.ListLimit.
func (s *Service) List(ctx context.Context, project, egg string) ([]api.Run, error) {
	if _, _, err := resource.SplitProject(project); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	runs, err := s.deps.Runs.ListRuns(ctx, store.RunFilter{Project: project, Egg: egg, Limit: s.cfg.ListLimit})
	if err != nil {
		return nil, err
	}
	names, err := s.hostNames(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.Run, len(runs))
	for i, r := range runs {
		out[i] = toAPI(r, names)
	}
	return out, nil
}

// Schedules returns the project's scheduled eggs with their next tick.
func (s *Service) Schedules(ctx context.Context, project string) ([]api.Schedule, error) {
	if _, _, err := resource.SplitProject(project); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	states, err := s.scheduleStates(ctx, project)
	if err != nil {
		return nil, err
	}
	now := s.now()
	var out []api.Schedule
	for _, src := range s.deps.Sources {
		items, err := src.Scheduled(ctx, project)
		if err != nil {
			return nil, err
		}
		for _, sc := range items {
			if sc.Ticks != nil {
				continue // not an egg's (a volume's backups)
			}
			st := states[sc.Project+" "+sc.Egg]
			as := api.Schedule{Egg: sc.Egg, Spec: sc.Timer.String(), Paused: st.Paused}
			if !st.Paused {
				as.Next = sc.Timer.Next(later(st.LastTick, now))
			}
			runs, err := s.deps.Runs.ListRuns(ctx, store.RunFilter{Project: project, Egg: sc.Egg, Limit: 10})
			if err != nil {
				return nil, err
			}
			for _, r := range runs {
				if r.State != store.RunMissed && r.State != store.RunSkipped {
					as.LastRun = r.ID
					break
				}
			}
			out = append(out, as)
		}
	}
	return out, nil
}

// Pause pauses the egg's schedule: no tick runs until Resume.
func (s *Service) Pause(ctx context.Context, project, egg, actor string) error {
	return s.pause(ctx, project, egg, actor, true)
}

// Resume resumes the egg's schedule from now: the ticks of the pause never
// run.
func (s *Service) Resume(ctx context.Context, project, egg, actor string) error {
	return s.pause(ctx, project, egg, actor, false)
}

func (s *Service) pause(ctx context.Context, project, egg, actor string, paused bool) error {
	rec, err := s.eggRecord(ctx, project, egg)
	if err != nil {
		return err
	}
	if _, ok := rulesOf(rec); !ok {
		return fmt.Errorf("%w: egg %s has no schedule to pause or resume", ErrRefused, egg)
	}
	ctx = store.WithActor(ctx, actor)
	now := s.now()
	changed, err := s.deps.Schedules.PauseSchedule(ctx, project, egg, paused, now, now)
	if err != nil || !changed {
		return err
	}
	typ, verb := store.EventScheduleResumed, "resumed"
	if paused {
		typ, verb = store.EventSchedulePaused, "paused"
	}
	s.event(ctx, store.Event{Type: typ, Project: project, Resource: resource.Key(resource.Egg, egg), Actor: actor,
		Message: fmt.Sprintf("%s %s the schedule of egg %s", actorName(actor), verb, egg)})
	return nil
}

// run returns a run of the project, or ErrNotFound.
func (s *Service) run(ctx context.Context, project, runID string) (store.Run, error) {
	r, err := s.deps.Runs.Run(ctx, runID)
	if errors.Is(err, store.ErrNotFound) || err == nil && r.Project != project {
		return store.Run{}, fmt.Errorf("%w: project %s has no run %q", ErrNotFound, project, runID)
	}
	return r, err
}

// view is the run as the API shows it.
func (s *Service) view(ctx context.Context, r store.Run) (api.Run, error) {
	names, err := s.hostNames(ctx)
	if err != nil {
		return api.Run{}, err
	}
	return toAPI(r, names), nil
}

// hostNames returns the hosts' names by ID.
func (s *Service) hostNames(ctx context.Context) (map[string]string, error) {
	ids, err := s.deps.Hosts.ListHostIdentities(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(ids))
	for _, h := range ids {
		out[h.ID] = h.Name
	}
	return out, nil
}

// toAPI is a run record as the API shows it.
func toAPI(r store.Run, hostNames map[string]string) api.Run {
	ns, name, _ := resource.SplitProject(r.Project)
	return api.Run{ID: r.ID, Namespace: ns, Project: name, Egg: r.Egg, Host: r.Host, HostName: hostNames[r.Host],
		Trigger: r.Trigger, Actor: r.Actor, ScheduledAt: r.ScheduledAt, CreatedAt: r.CreatedAt, DeliveredAt: r.DeliveredAt, Delay: r.Delay,
		StartedAt: r.StartedAt, EndedAt: r.EndedAt, State: r.State, ExitCode: r.ExitCode, Error: r.Error, Kept: r.Kept, TTY: r.TTY}
}

// actorName names an actor in a message ("the admin token" for the
// bootstrap one, which has no name).
func actorName(actor string) string {
	if actor == "" {
		return "the admin token"
	}
	return actor
}

// commandText is a run's command in a message.
func commandText(cmd []string) string {
	if len(cmd) == 0 {
		return "the egg's own command"
	}
	return fmt.Sprintf("%q", cmd)
}
