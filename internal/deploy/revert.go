package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

// reverter follows the event log for failed rollouts of eggs with
// rollout.auto_revert, and puts their previous spec back, under the
// project's lease.
type reverter struct {
	*Service
	// work counts the auto-reverts started, which RunLoops waits for.
	work *sync.WaitGroup
}

// revertLoop follows the event log for failed rollouts of eggs with
// rollout.auto_revert, and puts their previous spec back.
func (s reverter) revertLoop(ctx context.Context, since int64) {
	for {
		changed := s.deps.Events.WatchEvents()
		evs, err := s.deps.Events.ListEvents(ctx, since, eventPage)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("events not read for auto-revert", zap.Error(err))
		}
		for _, e := range evs {
			since = e.Seq
			if e.Type == store.EventRolloutFailed && resource.KindOf(e.Resource) == resource.Egg {
				s.progress.reverting.Add(1)
				s.work.Go(func() {
					defer s.progress.reverting.Add(-1)
					s.autoRevert(ctx, e)
				})
			}
		}
		s.progress.revertReadTo.Store(since)
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
func (s reverter) autoRevert(ctx context.Context, e store.Event) {
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
func (s reverter) tryRevert(ctx context.Context, e store.Event) (bool, error) {
	l, err := s.acquire(ctx, e.Project, "auto-revert of "+e.Resource)
	if err != nil {
		return false, err
	}
	defer l.release()
	ctx = l.fenced(ctx)
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
func (s reverter) failureOfCurrentSpec(ctx context.Context, host, workload string) (string, bool, error) {
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
		if w.Current(hash, c) && c.RolloutFailure != "" {
			return c.RolloutFailure, true, nil
		}
	}
	return "", false, nil
}
