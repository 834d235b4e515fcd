package volumes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/desired"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

// manifestSkew is how far a host's clock may be behind the control
// plane's when it dates a backup's manifest.
const manifestSkew = 5 * time.Minute

// retentionEvery is how often the volumes' old backups are forgotten.
const retentionEvery = time.Minute

// BeginLoops returns the service's loop, which the server runs while it
// holds the loops' lease, on a context fenced by it (package leader).
func (s *Service) BeginLoops(ctx context.Context) (run func(ctx context.Context), err error) {
	return s.loop, nil
}

// loop runs a pass every Tick until ctx ends.
func (s *Service) loop(ctx context.Context) {
	began := s.now()
	var kept time.Time
	for {
		s.Pass(ctx, began)
		if now := s.now(); now.Sub(kept) >= retentionEvery {
			if err := s.Retain(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("volumes: retention incomplete; retrying", zap.Error(err))
			} else if err == nil {
				kept = now
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.cfg.Tick):
		}
	}
}

// Pass is one round of the loop: record what hosts reported of their
// tasks, deliver the tasks recorded and not delivered (scheduled ones),
// and take ended tasks out of the desired states. began is when this
// server's loop began: a report received before it is not acted on (the
// host is heard first, or marked down by the fleet).
func (s *Service) Pass(ctx context.Context, began time.Time) {
	for _, step := range []struct {
		name string
		fn   func(context.Context) error
	}{
		{"record progress", func(ctx context.Context) error { return s.recordProgress(ctx, began) }},
		{"fail over", s.failover},
		{"deliver", s.deliverPending},
		{"release", s.releaseEnded},
	} {
		if err := step.fn(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("volumes: "+step.name+" incomplete; retrying", zap.Error(err))
		}
	}
}

// knownStates are the task states an agent reports.
var knownStates = map[contract.TaskState]bool{
	contract.TaskPending: true, contract.TaskRunning: true, contract.TaskDone: true, contract.TaskFailed: true,
}

// recordProgress records what the hosts' reports say of the tasks
// delivered to them, and ends lost those of hosts that went down. A
// host's claims are taken only for the tasks delivered to it.
func (s *Service) recordProgress(ctx context.Context, began time.Time) error {
	list, err := s.deps.Tasks.ListVolumeTasks(ctx, store.VolumeTaskFilter{Unreleased: true, Forgotten: true})
	if err != nil {
		return err
	}
	byHost := map[string]map[string]store.VolumeTask{}
	for _, t := range list {
		if store.TaskEnded(t.State) || t.DeliveredAt.IsZero() {
			continue
		}
		if byHost[t.Host] == nil {
			byHost[t.Host] = map[string]store.VolumeTask{}
		}
		byHost[t.Host][t.ID] = t
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
		if err := s.recordHost(ctx, host, down[host], began, byHost[host]); err != nil {
			errs = append(errs, fmt.Errorf("host %s: %w", host, err))
		}
	}
	return errors.Join(errs...)
}

// recordHost records the progress of one host's open tasks.
func (s *Service) recordHost(ctx context.Context, host string, down bool, began time.Time, open map[string]store.VolumeTask) error {
	progress := map[string]store.VolumeTaskProgress{}
	if down {
		for id, t := range open {
			progress[id] = store.VolumeTaskProgress{State: store.TaskLost, StartedAt: t.StartedAt, EndedAt: s.now(),
				Error: "its host went down before it reported the task's end"}
		}
	} else {
		st, err := s.deps.Hosts.Status(ctx, host)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if st.ReceivedAt.Before(began) {
			return nil // heard before this loop began: wait for a fresh report
		}
		rep, err := contract.DecodeStatusReport(bytes.NewReader(st.Report))
		if err != nil {
			return fmt.Errorf("its report: %w", err)
		}
		for _, ts := range rep.VolumeTasks {
			t, ok := open[ts.ID]
			if !ok || !knownStates[ts.State] {
				continue
			}
			p := store.VolumeTaskProgress{State: string(ts.State), Phase: ts.Phase, StartedAt: ts.StartedAt, EndedAt: ts.EndedAt,
				Manifest: ts.Manifest, Bytes: ts.Bytes, Chunks: ts.Chunks, NewChunks: ts.NewChunks, SentBytes: ts.SentBytes,
				StoredBytes: ts.StoredBytes, Output: ts.Output, Error: ts.Error}
			if store.TaskEnded(p.State) && p.EndedAt.IsZero() {
				p.EndedAt = st.ReceivedAt
			}
			if t.Kind == string(contract.TaskRestore) {
				p.Manifest = ""
			}
			if p.State == store.TaskDone && t.Kind == string(contract.TaskBackup) {
				p = s.checkDone(ctx, t, p)
			}
			progress[ts.ID] = p
		}
	}
	var errs []error
	for _, id := range slices.Sorted(maps.Keys(progress)) {
		p := progress[id]
		changed, err := s.deps.Tasks.RecordVolumeTaskProgress(ctx, id, p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if changed && store.TaskEnded(p.State) {
			t := open[id]
			t.State, t.Error, t.EndedAt, t.Manifest, t.Bytes, t.SentBytes = p.State, p.Error, p.EndedAt, p.Manifest, p.Bytes, p.SentBytes
			s.endEvent(ctx, t)
		}
	}
	return errors.Join(errs...)
}

// checkDone checks a backup its host reports done: the manifest it names
// must be in the store, open with the volume's key, name the volume, and
// list only chunks the store holds. Its chunks are then retained (before
// the backup is recorded good); otherwise the backup failed.
func (s *Service) checkDone(ctx context.Context, t store.VolumeTask, p store.VolumeTaskProgress) store.VolumeTaskProgress {
	fail := func(err error) store.VolumeTaskProgress {
		p.State, p.Manifest = store.TaskFailed, ""
		p.Error = fmt.Sprintf("its host reported it done, but its manifest %q does not check: %v", short(p.Manifest), err)
		return p
	}
	m, err := s.openManifest(ctx, s.deps.Store, t, p.Manifest)
	if err != nil {
		return fail(err)
	}
	if m.Created.Before(t.CreatedAt.Add(-manifestSkew)) {
		// An older backup of the volume, passed off as this one.
		return fail(fmt.Errorf("it was made at %s, before the backup was asked for at %s", m.Created.Format(time.RFC3339),
			t.CreatedAt.Format(time.RFC3339)))
	}
	if err := s.allStored(ctx, m); err != nil {
		return fail(err)
	}
	keep := make([]string, 0, len(m.Chunks)+1)
	keep = append(keep, digestOf(m.ID))
	for _, c := range m.Chunks {
		keep = append(keep, digestOf(c.ID))
	}
	if err := s.deps.Retention.RetainBlobs(ctx, retentionOwner(t.ID), keep); err != nil {
		return fail(fmt.Errorf("retain its chunks: %w", err))
	}
	return p
}

// deliverPending delivers the recorded tasks not yet delivered, project
// by project under each project's lease; a project an apply holds waits
// for the next pass.
func (s *Service) deliverPending(ctx context.Context) error {
	list, err := s.deps.Tasks.ListVolumeTasks(ctx, store.VolumeTaskFilter{Unreleased: true})
	if err != nil {
		return err
	}
	byProject := map[string][]string{}
	for _, t := range list {
		if !store.TaskEnded(t.State) && t.DeliveredAt.IsZero() {
			byProject[t.Project] = append(byProject[t.Project], t.ID)
		}
	}
	var errs []error
	for _, project := range slices.Sorted(maps.Keys(byProject)) {
		err := s.withLease(ctx, project, store.BriefHolder+"volume task delivery", 0, func(ctx context.Context) error {
			return s.deliver(ctx, project, byProject[project])
		})
		if errors.Is(err, store.ErrLocked) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("project %s: %w", project, err))
		}
	}
	return errors.Join(errs...)
}

// deliver puts one project's recorded tasks in their hosts' desired
// states, each read again under the lease. A task whose volume is gone
// or has no host fails.
func (s *Service) deliver(ctx context.Context, project string, ids []string) error {
	var ds []desired.VolumeTaskDelivery
	var errs []error
	for _, id := range ids {
		t, err := s.deps.Tasks.VolumeTask(ctx, id)
		if err != nil {
			return err
		}
		if store.TaskEnded(t.State) || !t.DeliveredAt.IsZero() {
			continue
		}
		v, err := s.volumeRecord(ctx, project, t.Volume)
		if errors.Is(err, ErrNotFound) || err == nil && (v.host == "" || v.host != t.Host) {
			if err == nil {
				err = fmt.Errorf("volume %s is not on host %s any more", t.Volume, t.Host)
			}
			errs = append(errs, s.endUndelivered(ctx, t, err.Error()))
			continue
		}
		if err != nil {
			return err
		}
		d, err := s.delivery(t, v, "")
		if err != nil {
			return err
		}
		ds = append(ds, d)
	}
	if len(ds) == 0 {
		return errors.Join(errs...)
	}
	if err := s.deps.Desired.DeliverVolumeTasks(ctx, ds); err != nil {
		return err
	}
	for _, d := range ds {
		errs = append(errs, s.deps.Tasks.DeliverVolumeTask(ctx, d.Task.ID, d.Host, s.now()))
	}
	return errors.Join(errs...)
}

// endUndelivered fails a task that was never delivered.
func (s *Service) endUndelivered(ctx context.Context, t store.VolumeTask, why string) error {
	p := store.VolumeTaskProgress{State: store.TaskFailed, EndedAt: s.now(), Error: why}
	changed, err := s.deps.Tasks.RecordVolumeTaskProgress(ctx, t.ID, p)
	if err != nil {
		return err
	}
	if changed {
		t.State, t.EndedAt, t.Error = p.State, p.EndedAt, p.Error
		s.endEvent(ctx, t)
	}
	return s.deps.Tasks.ReleaseVolumeTask(ctx, t.ID, s.now())
}

// releaseEnded takes the ended tasks out of their hosts' desired states,
// and places again the eggs they held stopped.
func (s *Service) releaseEnded(ctx context.Context) error {
	list, err := s.deps.Tasks.ListVolumeTasks(ctx, store.VolumeTaskFilter{Unreleased: true, Forgotten: true})
	if err != nil {
		return err
	}
	byProject := map[string][]store.VolumeTask{}
	for _, t := range list {
		if !store.TaskEnded(t.State) {
			continue
		}
		if t.DeliveredAt.IsZero() {
			if err := s.deps.Tasks.ReleaseVolumeTask(ctx, t.ID, s.now()); err != nil {
				return err
			}
			continue
		}
		byProject[t.Project] = append(byProject[t.Project], t)
	}
	var errs []error
	for _, project := range slices.Sorted(maps.Keys(byProject)) {
		if err := s.releaseProject(ctx, project, byProject[project]); err != nil && !errors.Is(err, store.ErrLocked) {
			errs = append(errs, fmt.Errorf("project %s: %w", project, err))
		}
	}
	return errors.Join(errs...)
}

// releaseProject releases one project's ended tasks under its lease.
func (s *Service) releaseProject(ctx context.Context, project string, ended []store.VolumeTask) error {
	recs, err := s.deps.Records.ListResources(ctx, project)
	if err != nil {
		return err
	}
	eggs := map[string]*resource.Deployed{}
	for _, r := range recs {
		if r.Type == resource.Egg && !r.Pending {
			eggs[r.Name] = r
		}
	}
	var ids []string
	var restart []*resource.Deployed
	for _, t := range ended {
		ids = append(ids, t.ID)
		v, err := s.volumeRecord(ctx, project, t.Volume)
		if err != nil {
			continue // the volume is gone: no egg to place again for it
		}
		d, err := s.delivery(t, v, "")
		if err != nil {
			return err
		}
		if t.Trigger == api.TriggerFailover && t.State != store.TaskDone {
			continue // an empty volume is never started in the data's place: retryRestore tries again
		}
		if rec, ok := eggs[v.in.Egg]; ok && desired.HoldsEgg(d.Task) && !slices.Contains(restart, rec) {
			restart = append(restart, rec)
		}
	}
	return s.withLease(ctx, project, store.BriefHolder+"volume task release", 0, func(ctx context.Context) error {
		if err := s.deps.Desired.ReleaseVolumeTasks(ctx, project, ids, restart); err != nil {
			return err
		}
		for _, id := range ids {
			if err := s.deps.Tasks.ReleaseVolumeTask(ctx, id, s.now()); err != nil {
				return err
			}
			s.lists.drop(id)
		}
		return nil
	})
}

// Retain forgets, for every deployed volume, its good backups past its
// keep (newest kept), which releases their chunks.
func (s *Service) Retain(ctx context.Context) error {
	projects, err := s.deps.Records.ListProjects(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, project := range projects {
		recs, err := s.deps.Records.ListResources(ctx, project)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if r.Type != resource.Volume || r.Pending {
				continue
			}
			v, err := s.volumeRecord(ctx, project, r.Name)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			list, err := s.deps.Tasks.ListVolumeTasks(ctx, store.VolumeTaskFilter{Project: project, Volume: r.Name,
				Kind: string(contract.TaskBackup)}) // newest first
			if err != nil {
				return err
			}
			good := 0
			for _, t := range list {
				if t.State != store.TaskDone {
					continue
				}
				if good++; good > v.keep() {
					errs = append(errs, s.forget(ctx, project, r.Name, t.ID, fmt.Sprintf("retention: volume %s keeps its last %d", r.Name, v.keep())))
				}
			}
		}
	}
	return errors.Join(errs...)
}
