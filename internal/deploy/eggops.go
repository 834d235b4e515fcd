package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

// RestartEgg is hatch rollout restart: the egg's revision is bumped, so
// the same spec rolls again on every host that runs it. It holds the
// project's lease while it works (api.CodeLocked when another holds it); an
// egg not deployed gives api.CodeNotFound.
func (s *Service) RestartEgg(ctx context.Context, project, egg string) (api.RestartResult, error) {
	l, err := s.acquire(ctx, project, "rollout restart of egg/"+egg)
	if err != nil {
		return api.RestartResult{}, lockedError(err)
	}
	defer l.release()
	rec, err := s.record(ctx, project, resource.Key("egg", egg))
	if err != nil {
		return api.RestartResult{}, err
	}
	next, err := s.deps.Providers.RestartEgg(ctx, project, rec)
	if err != nil {
		return api.RestartResult{}, err
	}
	if err := s.putRecord(ctx, project, next); err != nil {
		return api.RestartResult{}, err
	}
	var rev int64 // as the provider wrote it, or as a store gave it back
	switch n := next.Outputs["revision"].(type) {
	case int:
		rev = int64(n)
	case float64:
		rev = int64(n)
	}
	s.event(ctx, store.Event{Type: store.EventRolloutRestarted, Project: project, Resource: next.Key(),
		Message: fmt.Sprintf("egg %s of %s rolls again at revision %d", egg, project, rev)})
	out := api.RestartResult{Egg: egg, Revision: rev, Hosts: []string{}}
	hosts, _ := next.Outputs["hosts"].([]any)
	for _, h := range hosts {
		out.Hosts = append(out.Hosts, fmt.Sprint(h))
	}
	return out, nil
}

// record returns one deployed record of the project, or a 404.
func (s *Service) record(ctx context.Context, project, key string) (*resource.Deployed, error) {
	recs, err := s.deps.Resources.ListResources(ctx, project)
	if err != nil {
		return nil, err
	}
	for _, rec := range recs {
		if rec.Key() == key && !rec.Pending {
			return rec, nil
		}
	}
	return nil, api.NotFound("%s has no %s (apply it first)", project, key)
}

// revertLoop follows the event log for failed rollouts of eggs with
// rollout.auto_revert, and puts their previous spec back.
func (s *Service) revertLoop(ctx context.Context, since int64) {
	for {
		changed := s.deps.Events.WatchEvents()
		evs, err := s.deps.Events.ListEvents(ctx, since, eventPage)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("events not read for auto-revert", zap.Error(err))
		}
		for _, e := range evs {
			since = e.Seq
			if e.Type == store.EventRolloutFailed && strings.HasPrefix(e.Resource, "egg/") {
				s.work.Go(func() { s.autoRevert(ctx, e) })
			}
		}
		if len(evs) == eventPage {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-time.After(time.Minute): // a read that failed is retried
		}
	}
}

// autoRevert reverts the egg of a rollout.failed event if it asks for it and
// the failure is of its current spec, waiting for the project's lease.
func (s *Service) autoRevert(ctx context.Context, e store.Event) {
	log := s.log.With(zap.String("project", e.Project), zap.String("resource", e.Resource), zap.String("host", e.Host))
	for range 60 {
		done, err := s.tryRevert(ctx, e)
		switch {
		case done:
			return
		case errors.Is(err, store.ErrLocked):
		case err != nil:
			log.Warn("auto-revert failed", zap.Error(err))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.cfg.RevertRetry):
		}
	}
	log.Warn("auto-revert gave up: the project stayed locked")
}

// tryRevert reverts once; done is false (with ErrLocked) when the project is
// locked, and true when there was nothing to do or it was done.
func (s *Service) tryRevert(ctx context.Context, e store.Event) (bool, error) {
	l, err := s.acquire(ctx, e.Project, "auto-revert of "+e.Resource)
	if err != nil {
		return false, err
	}
	defer l.release()
	rec, err := s.record(ctx, e.Project, e.Resource)
	if err != nil {
		return true, nil // gone since: nothing to revert
	}
	rollout, _ := rec.Inputs["rollout"].(map[string]any)
	if on, _ := rollout["auto_revert"].(bool); !on || rec.Outputs["previous"] == nil {
		return true, nil
	}
	reason, failed, err := s.failureOfCurrentSpec(ctx, e.Host, e.Project+"/"+rec.Name)
	if err != nil || !failed {
		return true, err // an apply since changed the spec, or the report moved on
	}
	next, ok, err := s.deps.Providers.Revert(ctx, e.Project, rec)
	if err != nil || !ok {
		return true, err
	}
	if err := s.putRecord(ctx, e.Project, next); err != nil {
		return true, err
	}
	image, _ := next.Inputs["image"].(string)
	msg := fmt.Sprintf("egg %s: the rollout of its new spec failed on host %s (%s); its previous spec is back (rollout.auto_revert)",
		rec.Name, e.Host, reason)
	if image != "" {
		msg += ", image " + image
	}
	s.event(ctx, store.Event{Type: store.EventRolloutReverted, Project: e.Project, Host: e.Host, Resource: e.Resource, Message: msg})
	s.log.Info("reverted a failed rollout", zap.String("project", e.Project), zap.String("resource", e.Resource))
	return true, nil
}

// failureOfCurrentSpec reports whether the host's latest report shows the
// workload's rollout to its current desired spec failed, and why.
func (s *Service) failureOfCurrentSpec(ctx context.Context, host, workload string) (string, bool, error) {
	stored, err := s.deps.Reports.DesiredState(ctx, host)
	if err != nil || stored.Doc == nil {
		return "", false, err
	}
	// Spec hashes leave secret values out: the sealed form serves as it is.
	desired, err := contract.DecodeDesiredState(bytes.NewReader(stored.Doc))
	if err != nil {
		return "", false, err
	}
	w, ok := desired.Workload(workload)
	if !ok {
		return "", false, nil
	}
	st, err := s.deps.Reports.Status(ctx, host)
	if errors.Is(err, store.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	report, err := contract.DecodeStatusReport(bytes.NewReader(st.Report))
	if err != nil {
		return "", false, err
	}
	hash := contract.SpecHash(w)
	for _, c := range report.Containers {
		if c.WorkloadID == workload && c.SpecHash == hash && c.RolloutFailure != "" {
			return c.RolloutFailure, true, nil
		}
	}
	return "", false, nil
}

// rescheduleLoop moves replicas off hosts that are gone (down past the
// reschedule delay, or removed) and places replicas that found no room,
// whenever the fleet's classes change, and every fullCheck in any case.
func (s *Service) rescheduleLoop(ctx context.Context) {
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
		sig, err := s.fleetSignature(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("fleet not read for rescheduling", zap.Error(err))
			}
			continue
		}
		now := s.now()
		if sig == last && now.Sub(lastFull) < fullCheck {
			continue
		}
		if err := s.rescheduleAll(ctx); err != nil {
			if ctx.Err() == nil && !errors.Is(err, store.ErrLocked) {
				s.log.Warn("rescheduling incomplete; retrying", zap.Error(err))
			}
			continue
		}
		last, lastFull = sig, now
	}
}

// fleetSignature says how placement treats each host now.
func (s *Service) fleetSignature(ctx context.Context) (string, error) {
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
func (s *Service) rescheduleAll(ctx context.Context) error {
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

func (s *Service) reschedule(ctx context.Context, project string) error {
	l, err := s.acquire(ctx, project, "reschedule")
	if err != nil {
		return err
	}
	defer l.release()
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
