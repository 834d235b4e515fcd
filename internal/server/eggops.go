package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

// postRestart is hatch rollout restart PROJECT/EGG: the egg's revision is
// bumped, so the same spec rolls again.
func (a *applier) postRestart(w http.ResponseWriter, r *http.Request) error {
	project, err := projectOf(r)
	if err != nil {
		return err
	}
	egg := r.PathValue("egg")
	l, err := a.acquire(r.Context(), project, "rollout restart of egg/"+egg)
	if err != nil {
		return lockedError(err)
	}
	defer l.release()
	rec, err := a.record(r.Context(), project, resource.Key("egg", egg))
	if err != nil {
		return err
	}
	next, err := a.deps.Providers.RestartEgg(r.Context(), project, rec)
	if err != nil {
		return err
	}
	if err := a.putRecord(r.Context(), project, next); err != nil {
		return err
	}
	rev := next.Outputs["revision"]
	a.event(r.Context(), store.Event{Type: store.EventRolloutRestarted, Project: project, Resource: next.Key(),
		Message: fmt.Sprintf("egg %s of %s rolls again at revision %v", egg, project, rev)})
	writeJSON(w, http.StatusOK, map[string]any{"egg": egg, "revision": rev, "hosts": next.Outputs["hosts"]})
	return nil
}

// record returns one deployed record of the project, or a 404.
func (a *applier) record(ctx context.Context, project, key string) (*resource.Deployed, error) {
	recs, err := a.deps.Resources.ListResources(ctx, project)
	if err != nil {
		return nil, err
	}
	for _, rec := range recs {
		if rec.Key() == key && !rec.Pending {
			return rec, nil
		}
	}
	return nil, notFoundf("%s has no %s (apply it first)", project, key)
}

// event records an event; its failure is logged: what it tells of happened.
func (a *applier) event(ctx context.Context, e store.Event) {
	e.Time = a.s.now()
	if _, err := a.s.deps.Events.AppendEvent(context.WithoutCancel(ctx), e); err != nil {
		a.log.Warn("event not recorded", zap.String("type", string(e.Type)), zap.Error(err))
	}
}

// revertLoop follows the event log for failed rollouts of eggs with
// rollout.auto_revert, and puts their previous spec back.
func (a *applier) revertLoop(ctx context.Context, since int64) {
	for {
		changed := a.s.deps.Events.WatchEvents()
		evs, err := a.s.deps.Events.ListEvents(ctx, since, maxEventLimit)
		if err != nil && ctx.Err() == nil {
			a.log.Warn("events not read for auto-revert", zap.Error(err))
		}
		for _, e := range evs {
			since = e.Seq
			if e.Type == store.EventRolloutFailed && strings.HasPrefix(e.Resource, "egg/") {
				a.s.loops.Go(func() { a.autoRevert(ctx, e) })
			}
		}
		if len(evs) == maxEventLimit {
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
func (a *applier) autoRevert(ctx context.Context, e store.Event) {
	log := a.log.With(zap.String("project", e.Project), zap.String("resource", e.Resource), zap.String("host", e.Host))
	for range 60 {
		done, err := a.tryRevert(ctx, e)
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
		case <-time.After(a.cfg.RevertRetry):
		}
	}
	log.Warn("auto-revert gave up: the project stayed locked")
}

// tryRevert reverts once; done is false (with ErrLocked) when the project is
// locked, and true when there was nothing to do or it was done.
func (a *applier) tryRevert(ctx context.Context, e store.Event) (bool, error) {
	l, err := a.acquire(ctx, e.Project, "auto-revert of "+e.Resource)
	if err != nil {
		return false, err
	}
	defer l.release()
	rec, err := a.record(ctx, e.Project, e.Resource)
	if err != nil {
		return true, nil // gone since: nothing to revert
	}
	rollout, _ := rec.Inputs["rollout"].(map[string]any)
	if on, _ := rollout["auto_revert"].(bool); !on || rec.Outputs["previous"] == nil {
		return true, nil
	}
	reason, failed, err := a.failureOfCurrentSpec(ctx, e.Host, e.Project+"/"+rec.Name)
	if err != nil || !failed {
		return true, err // an apply since changed the spec, or the report moved on
	}
	next, ok, err := a.deps.Providers.Revert(ctx, e.Project, rec)
	if err != nil || !ok {
		return true, err
	}
	if err := a.putRecord(ctx, e.Project, next); err != nil {
		return true, err
	}
	image, _ := next.Inputs["image"].(string)
	msg := fmt.Sprintf("egg %s: the rollout of its new spec failed on host %s (%s); its previous spec is back (rollout.auto_revert)",
		rec.Name, e.Host, reason)
	if image != "" {
		msg += ", image " + image
	}
	a.event(ctx, store.Event{Type: store.EventRolloutReverted, Project: e.Project, Host: e.Host, Resource: e.Resource, Message: msg})
	a.log.Info("reverted a failed rollout", zap.String("project", e.Project), zap.String("resource", e.Resource))
	return true, nil
}

// failureOfCurrentSpec reports whether the host's latest report shows the
// workload's rollout to its current desired spec failed, and why.
func (a *applier) failureOfCurrentSpec(ctx context.Context, host, workload string) (string, bool, error) {
	stored, err := a.s.deps.Desired.DesiredState(ctx, host)
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
	st, err := a.s.deps.Statuses.Status(ctx, host)
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
func (a *applier) rescheduleLoop(ctx context.Context) {
	const fullCheck = 15 * time.Second
	t := time.NewTicker(a.cfg.RescheduleInterval)
	defer t.Stop()
	var last string
	var lastFull time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sig, err := a.fleetSignature(ctx)
		if err != nil {
			if ctx.Err() == nil {
				a.log.Warn("fleet not read for rescheduling", zap.Error(err))
			}
			continue
		}
		now := a.s.now()
		if sig == last && now.Sub(lastFull) < fullCheck {
			continue
		}
		if err := a.rescheduleAll(ctx); err != nil {
			if ctx.Err() == nil && !errors.Is(err, store.ErrLocked) {
				a.log.Warn("rescheduling incomplete; retrying", zap.Error(err))
			}
			continue
		}
		last, lastFull = sig, now
	}
}

// fleetSignature says how placement treats each host now.
func (a *applier) fleetSignature(ctx context.Context) (string, error) {
	hosts, err := a.deps.Providers.Hosts(ctx)
	if err != nil {
		return "", err
	}
	now := a.s.now()
	parts := make([]string, len(hosts))
	for i, h := range hosts {
		parts[i] = h.ID + "=" + a.deps.Providers.HostClass(h, now)
	}
	slices.Sort(parts)
	return strings.Join(parts, ","), nil
}

// rescheduleAll reschedules every project that needs it. A locked project
// is left for the next round (its apply places with the fleet as it is).
func (a *applier) rescheduleAll(ctx context.Context) error {
	hosts, err := a.deps.Providers.Hosts(ctx)
	if err != nil {
		return err
	}
	projects, err := a.s.deps.Projects.ListProjects(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range projects {
		recs, err := a.deps.Resources.ListResources(ctx, p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !a.deps.Providers.NeedsPlacing(recs, hosts, a.s.now()) {
			continue
		}
		if err := a.reschedule(ctx, p); err != nil {
			errs = append(errs, fmt.Errorf("reschedule %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

func (a *applier) reschedule(ctx context.Context, project string) error {
	l, err := a.acquire(ctx, project, "reschedule")
	if err != nil {
		return err
	}
	defer l.release()
	recs, err := a.deps.Resources.ListResources(ctx, project)
	if err != nil {
		return err
	}
	changed, err := a.deps.Providers.Reschedule(ctx, project, recs)
	for _, rec := range changed {
		if perr := a.putRecord(ctx, project, rec); perr != nil {
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
		a.event(ctx, store.Event{Type: store.EventEggRescheduled, Project: project, Resource: rec.Key(), Message: msg})
	}
	return err
}
