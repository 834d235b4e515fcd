package jobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/schedule"
	"github.com/hatchery/hatchery/internal/store"
)

// recordProgress records what the hosts' latest reports say of the runs
// delivered to them, and ends lost the runs of hosts that went down. A
// host's claims are taken only for the runs delivered to it (its own
// desired state holds them until they are released): a report of any
// other run ID, or in a state no agent reports, is ignored.
func (s *Service) recordProgress(ctx context.Context) error {
	runs, err := s.deps.Runs.ListRuns(ctx, store.RunFilter{Unreleased: true})
	if err != nil {
		return err
	}
	byHost := map[string]map[string]store.Run{}
	for _, r := range runs {
		if store.RunEnded(r.State) || r.DeliveredAt.IsZero() {
			continue
		}
		if byHost[r.Host] == nil {
			byHost[r.Host] = map[string]store.Run{}
		}
		byHost[r.Host][r.ID] = r
	}
	if len(byHost) == 0 {
		return nil
	}
	hosts, err := s.deps.Hosts.ListHosts(ctx)
	if err != nil {
		return err
	}
	down := map[string]bool{}
	for _, h := range hosts {
		down[h.ID] = h.State == store.HostDown
	}
	var errs []error
	for _, host := range slices.Sorted(maps.Keys(byHost)) {
		if err := s.recordHost(ctx, host, down[host], byHost[host]); err != nil {
			errs = append(errs, fmt.Errorf("host %s: %w", host, err))
		}
	}
	return errors.Join(errs...)
}

// recordHost records the progress of one host's runs (open: by ID).
func (s *Service) recordHost(ctx context.Context, host string, down bool, open map[string]store.Run) error {
	progress := map[string]store.RunProgress{}
	if down {
		for id := range open {
			progress[id] = store.RunProgress{State: store.RunLost, EndedAt: s.now(), Error: "its host went down before it reported the run's end"}
		}
	} else {
		st, err := s.deps.Hosts.Status(ctx, host)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		rep, err := contract.DecodeStatusReport(bytes.NewReader(st.Report))
		if err != nil {
			return fmt.Errorf("its report: %w", err)
		}
		for _, rs := range rep.Runs {
			if _, ok := open[rs.ID]; ok && knownRunStates[rs.State] {
				p := progressOf(rs)
				if store.RunEnded(p.State) && p.EndedAt.IsZero() {
					p.EndedAt = st.ReceivedAt // an end without its time: when it was reported
				}
				progress[rs.ID] = p
			}
		}
	}
	var errs []error
	for _, id := range slices.Sorted(maps.Keys(progress)) {
		p := progress[id]
		if p.State == store.RunPending && p.Error == "" {
			continue
		}
		changed, err := s.deps.Runs.RecordRunProgress(ctx, id, p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if changed && store.RunEnded(p.State) {
			r := open[id]
			r.State, r.ExitCode, r.Error, r.EndedAt = p.State, p.ExitCode, p.Error, p.EndedAt
			s.endEvent(ctx, r)
		}
	}
	return errors.Join(errs...)
}

// knownRunStates are the states an agent reports.
var knownRunStates = map[contract.RunState]bool{
	contract.RunPending: true, contract.RunRunning: true, contract.RunExited: true, contract.RunTimedOut: true,
	contract.RunStopped: true, contract.RunFailed: true,
}

// releaseEnded takes the ended runs out of their hosts' desired states:
// at once, unless kept (--keep, or a scheduled run among its egg's last
// keep_runs ended ones); the kept ones past keep_runs are pruned (their
// Kept flag stays: they were kept until then). An egg
// whose replica a run stopped (--stop) is placed again.
func (s *Service) releaseEnded(ctx context.Context) error {
	runs, err := s.deps.Runs.ListRuns(ctx, store.RunFilter{Unreleased: true}) // newest first
	if err != nil {
		return err
	}
	byProject := map[string][]store.Run{}
	for _, r := range runs {
		if !store.RunEnded(r.State) {
			continue
		}
		if r.DeliveredAt.IsZero() { // never in a desired state
			if err := s.deps.Runs.ReleaseRun(ctx, r.ID, s.now()); err != nil {
				return err
			}
			continue
		}
		byProject[r.Project] = append(byProject[r.Project], r)
	}
	var errs []error
	for _, project := range slices.Sorted(maps.Keys(byProject)) {
		if err := s.releaseProject(ctx, project, byProject[project]); err != nil {
			errs = append(errs, fmt.Errorf("project %s: %w", project, err))
		}
	}
	return errors.Join(errs...)
}

// releaseProject releases one project's ended runs (newest first) but
// those it keeps, under the project's lease, taken only when there is
// something to release (an apply finds it free otherwise).
func (s *Service) releaseProject(ctx context.Context, project string, ended []store.Run) error {
	eggs, err := s.eggRecords(ctx, project)
	if err != nil {
		return err
	}
	kept := map[string]int{}
	var release []string
	var restart []*resource.Deployed
	for _, r := range ended {
		keepRuns := schedule.DefaultKeepRuns
		if rules, ok := rulesOf(eggs[r.Egg]); ok {
			keepRuns = rules.KeepRuns
		}
		// A run that stopped its egg's replica is released at once, so
		// that the egg starts again, and so is any run of a stateful egg
		// with replicas, which a kept run would hold stopped (see
		// desired's holdForRuns); a lost one has no host to keep it.
		keepable := (r.Kept || r.Trigger != api.TriggerManual) && !r.StopEgg && !holdsReplicas(eggs[r.Egg]) && r.State != store.RunLost
		if keepable && kept[r.Egg] < keepRuns {
			kept[r.Egg]++
			if !r.Kept {
				if err := s.deps.Runs.SetRunKept(ctx, r.ID, true); err != nil {
					return err
				}
			}
			continue
		}
		// A `hatch run` is followed through a logs session of its
		// container, which may reach its host only after a short run
		// ended: its container stays OutputGrace past its end.
		if r.Trigger == api.TriggerManual && r.State != store.RunLost && !r.EndedAt.IsZero() && s.now().Sub(r.EndedAt) < s.cfg.OutputGrace {
			continue
		}
		release = append(release, r.ID)
		if rec, ok := eggs[r.Egg]; ok && r.StopEgg && !slices.Contains(restart, rec) {
			restart = append(restart, rec)
		}
	}
	if len(release) == 0 {
		return nil
	}
	_, err = s.withLease(ctx, project, store.BriefHolder+"release", 0, func(ctx context.Context) error {
		if err := s.deps.Desired.ReleaseRuns(ctx, project, release, restart); err != nil {
			return err
		}
		for _, id := range release {
			if err := s.deps.Runs.ReleaseRun(ctx, id, s.now()); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, store.ErrLocked) {
		return nil // the next pass
	}
	if err == nil {
		s.log.Debug("runs released", zap.String("project", project), zap.Strings("runs", release))
	}
	return err
}
