package jobs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/desired"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/schedule"
	"github.com/hatchery/hatchery/internal/store"
)

// deliverPending delivers the recorded runs not delivered yet, and the
// stops asked of delivered ones, project by project under each project's
// lease; a project an apply holds waits for the next pass (the delay is
// recorded with the delivery).
func (s *Service) deliverPending(ctx context.Context) error {
	runs, err := s.deps.Runs.ListRuns(ctx, store.RunFilter{Unreleased: true})
	if err != nil {
		return err
	}
	byProject := map[string][]string{}
	for _, r := range runs {
		if !store.RunEnded(r.State) && (r.DeliveredAt.IsZero() || r.StopRequested) {
			byProject[r.Project] = append(byProject[r.Project], r.ID)
		}
	}
	var errs []error
	for _, project := range slices.Sorted(maps.Keys(byProject)) {
		_, err := s.withLease(ctx, project, store.BriefHolder+"delivery", 0, func(ctx context.Context) error {
			return s.deliver(ctx, project, byProject[project])
		})
		if errors.Is(err, store.ErrLocked) {
			s.log.Debug("runs wait for their project's lease", zap.String("project", project))
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("project %s: %w", project, err))
		}
	}
	return errors.Join(errs...)
}

// deliver puts runs of one project in their hosts' desired states (or
// asks for their stop there), under the project's lease. Each run is read
// again under it: what another server's `hatch run` or Ctrl-C did before
// the lease was taken stands. A scheduled run that no host takes waits,
// until its starting deadline (then it failed); any other fails at once.
func (s *Service) deliver(ctx context.Context, project string, ids []string) error {
	var stops []string
	var deliveries []desired.RunDelivery
	byID := map[string]store.Run{}
	eggs, err := s.eggRecords(ctx, project)
	if err != nil {
		return err
	}
	for _, id := range ids {
		r, err := s.deps.Runs.Run(ctx, id)
		if err != nil {
			return err
		}
		switch {
		case store.RunEnded(r.State):
			continue
		case r.DeliveredAt.IsZero() && r.StopRequested:
			if err := s.stopUndelivered(ctx, r); err != nil {
				return err
			}
			continue
		case !r.DeliveredAt.IsZero():
			stops = append(stops, r.ID)
			continue
		}
		rec, ok := eggs[r.Egg]
		if !ok {
			if err := s.endUndelivered(ctx, r, store.RunProgress{State: store.RunFailed, EndedAt: s.now(),
				Error: fmt.Sprintf("egg %s is no longer deployed", r.Egg)}); err != nil {
				return err
			}
			continue
		}
		byID[r.ID] = r
		deliveries = append(deliveries, delivery(r, rec))
	}
	if len(stops) > 0 {
		if err := s.deps.Desired.StopRuns(ctx, stops); err != nil {
			return err
		}
	}
	if len(deliveries) == 0 {
		return nil
	}
	hosts, refused, err := s.deps.Desired.DeliverRuns(ctx, project, deliveries, nil)
	if err != nil {
		return err
	}
	now := s.now()
	var errs []error
	for _, id := range slices.Sorted(maps.Keys(hosts)) {
		r := byID[id]
		if err := s.deps.Runs.DeliverRun(ctx, id, hosts[id], now, max(now.Sub(r.CreatedAt), 0)); err != nil {
			errs = append(errs, err)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(refused)) {
		r := byID[id]
		if r.Trigger != api.TriggerManual && r.Trigger != api.TriggerFire && now.Sub(r.ScheduledAt) <= deadlineOf(eggs[r.Egg]) {
			s.log.Info("a run waits for a host", zap.String("run", id), zap.Error(refused[id]))
			continue
		}
		if err := s.endUndelivered(ctx, r, store.RunProgress{State: store.RunFailed, EndedAt: now, Error: refused[id].Error()}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// delivery is what the desired states need of a recorded run.
func delivery(r store.Run, egg *resource.Deployed) desired.RunDelivery {
	return desired.RunDelivery{ID: r.ID, Egg: egg, Command: r.Command, Timeout: r.Timeout, Host: r.Host, StopEgg: r.StopEgg,
		Stop: r.StopRequested, TTY: r.TTY}
}

// deadlineOf is the starting deadline of an egg's schedule (none: 0).
func deadlineOf(rec *resource.Deployed) time.Duration {
	if rec == nil {
		return 0
	}
	rules, _ := rulesOf(rec)
	return rules.StartingDeadline
}

// stopUndelivered ends a run asked to stop before its delivery was
// recorded: it never runs. A run put in a desired state by a delivery
// whose record did not follow (its server died between the two) is taken
// out of it first. The caller holds the project's lease.
func (s *Service) stopUndelivered(ctx context.Context, r store.Run) error {
	if err := s.deps.Desired.ReleaseRuns(ctx, r.Project, []string{r.ID}, nil); err != nil {
		return err
	}
	return s.endUndelivered(ctx, r, store.RunProgress{State: store.RunStopped, EndedAt: s.now()})
}

// endUndelivered records the end of a run that was never delivered (it
// never runs), and its release, with the event its end calls for.
func (s *Service) endUndelivered(ctx context.Context, r store.Run, p store.RunProgress) error {
	changed, err := s.deps.Runs.RecordRunProgress(ctx, r.ID, p)
	if err != nil {
		return err
	}
	if err := s.deps.Runs.ReleaseRun(ctx, r.ID, s.now()); err != nil {
		return err
	}
	if changed {
		r.State, r.Error, r.EndedAt = p.State, p.Error, p.EndedAt
		s.endEvent(ctx, r)
	}
	return nil
}

// eggRecords returns the project's deployed eggs by name.
func (s *Service) eggRecords(ctx context.Context, project string) (map[string]*resource.Deployed, error) {
	recs, err := s.deps.Records.ListResources(ctx, project)
	if err != nil {
		return nil, err
	}
	out := map[string]*resource.Deployed{}
	for _, r := range recs {
		if r.Type == resource.Egg && !r.Pending {
			out[r.Name] = r
		}
	}
	return out, nil
}

// startRun records r and delivers it at once, under the project's lease
// (waited for up to LeaseWait): a run refused (no host may take it, or it
// would be a second container on a stateful egg's volume) is not
// recorded. It returns the run as recorded.
func (s *Service) startRun(ctx context.Context, r store.Run, rec *resource.Deployed) (store.Run, error) {
	start := s.now()
	_, err := s.withLease(ctx, r.Project, store.BriefHolder+"hatch run", s.cfg.LeaseWait, func(ctx context.Context) error {
		hosts, _, err := s.deps.Desired.DeliverRuns(ctx, r.Project, []desired.RunDelivery{delivery(r, rec)},
			func(hosts map[string]string, refused map[string]error) error {
				if err := refused[r.ID]; err != nil {
					return err
				}
				rec := r
				rec.Host = hosts[r.ID]
				return s.deps.Runs.CreateRuns(ctx, []store.Run{rec}, nil)
			})
		if err != nil {
			return err
		}
		// Recorded, then delivered, then its delivery recorded, all under
		// the lease: a failure of this last step leaves the run to the
		// scheduler, which finds it in its host's state already.
		now := s.now()
		if err := s.deps.Runs.DeliverRun(ctx, r.ID, hosts[r.ID], now, max(now.Sub(start), 0)); err != nil {
			s.log.Warn("a run's delivery not recorded; the scheduler records it", zap.String("run", r.ID), zap.Error(err))
		}
		return nil
	})
	var locked *store.LockedError
	switch {
	case errors.As(err, &locked):
		return store.Run{}, fmt.Errorf("%w: %s; try again when it is done", ErrRefused, locked.Error())
	case errors.Is(err, desired.ErrRunConflict):
		return store.Run{}, fmt.Errorf("%w: %w", ErrRefused, err)
	case errors.Is(err, desired.ErrRunHost) && r.Host != "":
		return store.Run{}, fmt.Errorf("%w: %w", ErrRefused, err)
	case errors.Is(err, desired.ErrRunHost):
		return store.Run{}, fmt.Errorf("%w: %w", ErrNoHost, err)
	case err != nil:
		return store.Run{}, err
	}
	return s.deps.Runs.Run(ctx, r.ID)
}

// rulesOf reads the rules of the egg's schedule; ok is false when it has none.
func rulesOf(rec *resource.Deployed) (schedule.Rules, bool) {
	if _, has := rec.Inputs["schedule"]; !has {
		return schedule.Rules{}, false
	}
	_, rules, err := eggSchedule(rec.Inputs)
	return rules, err == nil
}
