package deploy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/store"
)

// rescheduler moves replicas off hosts that are gone and places those
// that found no room, under each project's lease.
type rescheduler struct{ *Service }

// rescheduleLoop moves replicas off hosts that are gone (down past the
// reschedule delay, or removed) and places replicas that found no room,
// whenever the fleet's classes change, and every fullCheck in any case.
func (s rescheduler) rescheduleLoop(ctx context.Context) {
	const fullCheck = 15 * time.Second
	t := time.NewTicker(s.cfg.RescheduleInterval)
	defer t.Stop()
	var last string
	var lastFull time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if sig, at, ok := s.pass(ctx, last, lastFull, fullCheck); ok {
			last, lastFull = sig, at
		}
		s.progress.reschedulePasses.Add(1)
	}
}

// pass is one tick of the loop: it reads the fleet and, when its classes
// changed since last (or fullCheck passed since lastFull), moves what must
// move. ok says every project was looked at, at the fleet's sig as read at.
func (s rescheduler) pass(ctx context.Context, last string, lastFull time.Time, fullCheck time.Duration) (sig string, at time.Time, ok bool) {
	sig, err := s.fleetSignature(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("fleet not read for rescheduling", zap.Error(err))
		}
		return "", time.Time{}, false
	}
	at = s.now()
	if sig == last && at.Sub(lastFull) < fullCheck {
		return "", time.Time{}, false
	}
	if err := s.rescheduleAll(ctx); err != nil {
		if ctx.Err() == nil && !errors.Is(err, store.ErrLocked) {
			s.log.Warn("rescheduling incomplete; retrying", zap.Error(err))
		}
		return "", time.Time{}, false
	}
	return sig, at, true
}

// fleetSignature says how placement treats each host now.
func (s rescheduler) fleetSignature(ctx context.Context) (string, error) {
	hosts, err := s.deps.Providers.Hosts(ctx)
	if err != nil {
		return "", err
	}
	now := s.now()
	parts := make([]string, len(hosts))
	for i, h := range hosts {
		parts[i] = h.ID + "=" + s.deps.Providers.HostClass(h, now)
	}
	slices.Sort(parts)
	return strings.Join(parts, ","), nil
}

// rescheduleAll reschedules every project that needs it. A locked project
// is left for the next round (its apply places with the fleet as it is).
func (s rescheduler) rescheduleAll(ctx context.Context) error {
	hosts, err := s.deps.Providers.Hosts(ctx)
	if err != nil {
		return err
	}
	projects, err := s.deps.Projects.ListProjects(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range projects {
		recs, err := s.deps.Resources.ListResources(ctx, p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !s.deps.Providers.NeedsPlacing(recs, hosts, s.now()) {
			continue
		}
		if err := s.reschedule(ctx, p); err != nil {
			errs = append(errs, fmt.Errorf("reschedule %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

func (s rescheduler) reschedule(ctx context.Context, project string) error {
	l, err := s.acquire(ctx, project, "reschedule")
	if err != nil {
		return err
	}
	defer l.release()
	ctx = l.fenced(ctx)
	recs, err := s.deps.Resources.ListResources(ctx, project)
	if err != nil {
		return err
	}
	changed, err := s.deps.Providers.Reschedule(ctx, project, recs)
	for _, rec := range changed {
		if perr := s.putRecord(ctx, project, rec); perr != nil {
			return errors.Join(err, perr)
		}
		hosts, _ := rec.Outputs["hosts"].([]any)
		msg := fmt.Sprintf("egg %s of %s is placed again: it runs on %v", rec.Name, project, hosts)
		if n, ok := rec.Outputs["unplaced"]; ok {
			msg += fmt.Sprintf(", %v replicas not placed", n)
		}
		if why, ok := rec.Outputs["waiting"].(string); ok {
			msg += " (" + why + ")"
		}
		s.event(ctx, store.Event{Type: store.EventEggRescheduled, Project: project, Resource: rec.Key(), Message: msg})
	}
	return err
}
