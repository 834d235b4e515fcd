package volumes

import (
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
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/store"
)

// Failover (docs/BACKUPS.md): a volume with failover whose host has been
// silent for its after is restored from its last good backup on another
// host, and its egg moves there. Why it never runs twice: the silent
// host's agent stops the egg once no status report of its has been
// answered for fence_after (package agent's fence), and the plan refuses
// an after not above fence_after + the request timeout + the egg's drain
// and stop timeouts; after is counted here from the host's last report
// received (store.Host.LastSeen), which is no earlier than the last answer
// the agent counts from. So by the time the restore is delivered, the old
// container has stopped, and the agent will not start it again: its
// desired state no longer has the egg once it is heard again.
//
// One move, under the project's lease: record the restore task (on the
// new host, trigger failover), move the volume in the desired states (the
// lost host's copy marked stale, the volume kept on the new host, the
// restore delivered, holding the egg at 0 replicas there), then the
// volume's record (its host output, and what the failover was) and the
// egg's (placed on the new host). Records last: a server that dies
// between leaves records that still name the lost host, so the next pass
// moves again, rather than records naming a host whose volume was never
// restored. The restore's end releases the egg (loop.go); a failed one
// leaves it stopped and is tried again (retryFailovers).

// maxFailoverRestores is how many failed restores of one failover are
// tried again before the volume is left to its user.
const maxFailoverRestores = 3

// failoverRetryGap is the least time between a failed failover restore
// and the next try.
const failoverRetryGap = 10 * time.Second

// failover moves the volumes whose host is lost, tries again the
// failovers whose restore failed, and records the stale copies of hosts
// heard again.
func (s *Service) failover(ctx context.Context) error {
	hosts, err := s.deps.Hosts.ListHosts(ctx)
	if err != nil {
		return err
	}
	lost := map[string]store.Host{}
	heard := map[string]time.Time{}
	for _, h := range hosts {
		switch h.State {
		case store.HostDown:
			lost[h.ID] = h
		case store.HostUp:
			heard[h.ID] = h.LastSeen
		}
	}
	errs := []error{s.findStaleCopies(ctx, heard)}
	projects, err := s.deps.Records.ListProjects(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, project := range projects {
		errs = append(errs, s.failoverProject(ctx, project, lost, heard))
	}
	return errors.Join(errs...)
}

// failoverProject moves each of the project's failover volumes whose host
// has been lost for its after, and tries again the failed restores of
// those already moved.
func (s *Service) failoverProject(ctx context.Context, project string, lost map[string]store.Host, live map[string]time.Time) error {
	recs, err := s.deps.Records.ListResources(ctx, project)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range recs {
		if r.Type != resource.Volume || r.Pending {
			continue
		}
		in, err := inputs.Decode[inputs.Volume](r.Inputs)
		if err != nil || in.Failover == nil {
			continue
		}
		after, err := time.ParseDuration(in.Failover.After)
		if err != nil {
			continue // CheckResource refused it
		}
		host, _ := r.Outputs[inputs.OutputHost].(string)
		if h, ok := lost[host]; ok && s.now().Sub(silentSince(h)) >= after {
			errs = append(errs, s.moveVolume(ctx, project, r.Name, h))
			continue
		}
		// Only a volume that failed over has a failover restore to try
		// again: the others cost no query each pass.
		if _, ok := live[host]; ok && r.Outputs[inputs.OutputFailover] != nil {
			errs = append(errs, s.retryRestore(ctx, project, r.Name))
		}
	}
	return errors.Join(errs...)
}

// silentSince is when the host was last heard (its state's change when
// it never reported to this store).
func silentSince(h store.Host) time.Time {
	if h.LastSeen.IsZero() {
		return h.StateSince
	}
	return h.LastSeen
}

// moveVolume fails the project's volume over from its lost host, under
// the project's lease (a project an apply holds waits for the next pass).
func (s *Service) moveVolume(ctx context.Context, project, name string, lostHost store.Host) error {
	err := s.withLease(ctx, project, store.BriefHolder+"volume failover", 0, func(ctx context.Context) error {
		v, err := s.volumeRecord(ctx, project, name)
		if err != nil || v.host != lostHost.ID {
			return err // moved meanwhile
		}
		open, err := s.openTasks(ctx, project, name)
		if err != nil || len(open) > 0 {
			return err // the lost host's tasks end lost first (recordProgress)
		}
		b, err := s.findBackup(ctx, project, name, "")
		if err != nil {
			return s.failoverFailed(ctx, project, name, lostHost, err)
		}
		to, err := s.deps.Desired.FailoverHost(ctx, project, name, v.in)
		if err != nil {
			return s.failoverFailed(ctx, project, name, lostHost, fmt.Errorf("no host can take it: %w", err))
		}
		ns, proj, _ := resource.SplitProject(project)
		now := s.now()
		t := store.VolumeTask{ID: newID(), Kind: string(contract.TaskRestore), Project: project, Volume: name, Host: to,
			Trigger: api.TriggerFailover, CreatedAt: now, State: store.TaskPending, Backup: b.Manifest,
			Target: contract.VolumeName(to, ns, proj, name)}
		d, err := s.delivery(t, v, "")
		if err != nil {
			return err
		}
		if err := s.deps.Tasks.CreateVolumeTask(ctx, t, nil); err != nil {
			return err
		}
		move := desired.FailoverMove{Project: project, Volume: name, From: lostHost.ID, To: to, At: now, Restore: d}
		if err := s.deps.Desired.MoveVolume(ctx, move); err != nil {
			return err
		}
		if err := s.deps.Tasks.DeliverVolumeTask(ctx, t.ID, to, now); err != nil {
			return err
		}
		fo := api.VolumeFailover{From: lostHost.ID, To: to, At: now, Task: t.ID, Backup: b.Manifest, BackupCreated: b.CreatedAt,
			LastHeard: silentSince(lostHost), DataWindow: now.Sub(b.CreatedAt).Round(time.Second).String()}
		if err := s.moveRecords(ctx, project, v, fo); err != nil {
			return err
		}
		names, _ := s.hostNames(ctx)
		s.event(ctx, store.Event{Type: store.EventVolumeFailedOver, Project: project, Host: to, Resource: resource.Key(resource.Volume, name),
			Message: fmt.Sprintf("volume %s of %s fails over: its host %s was last heard %s ago; restoring backup %s (taken %s) on host %s, where %s will run: writes after the backup, up to %s, are lost (a host cut off, not dead, took writes until its fence stopped it, before now)",
				name, project, nameOr(names, lostHost.ID), now.Sub(fo.LastHeard).Round(time.Second), short(b.Manifest),
				b.CreatedAt.UTC().Format(time.RFC3339), nameOr(names, to), eggOr(v.in.Egg), fo.DataWindow)})
		s.forgetNote(project, name)
		return nil
	})
	if errors.Is(err, store.ErrLocked) {
		return nil
	}
	return err
}

// moveRecords writes the failover into the volume's record (its host, and
// what the failover did) and the egg's (its volume's host, and its new
// placement: held at 0 replicas on the new host by the restore).
func (s *Service) moveRecords(ctx context.Context, project string, v volume, fo api.VolumeFailover) error {
	recs, err := s.deps.Records.ListResources(ctx, project)
	if err != nil {
		return err
	}
	for _, r := range recs {
		switch {
		case r.Type == resource.Volume && r.Name == v.name:
			next := r.Clone()
			next.Outputs[inputs.OutputHost] = fo.To
			next.Outputs[inputs.OutputFailover] = inputs.Encode(fo)
			if err := s.deps.Records.PutResource(ctx, project, next); err != nil {
				return fmt.Errorf("record volume %s on host %s: %w", v.name, fo.To, err)
			}
		case r.Type == resource.Egg && r.Name == v.in.Egg && !r.Pending:
			next := r.Clone()
			pl, _ := next.Inputs["placement"].(map[string]any)
			if pl == nil {
				return fmt.Errorf("egg %s's record has no placement", r.Name)
			}
			pl[volumeHostInput] = fo.To
			placed, err := s.deps.Desired.Reschedule(ctx, project, []*resource.Deployed{next})
			if err != nil {
				return fmt.Errorf("place egg %s on host %s: %w", r.Name, fo.To, err)
			}
			if len(placed) == 1 {
				next = placed[0]
			}
			if err := s.deps.Records.PutResource(ctx, project, next); err != nil {
				return fmt.Errorf("record egg %s on host %s: %w", r.Name, fo.To, err)
			}
		}
	}
	return nil
}

// volumeHostInput is inputs.Placement.VolumeHost's key.
const volumeHostInput = "volume_host"

// retryRestore starts the failover's restore again when its last try
// failed (on the volume's new host, live), at most maxFailoverRestores
// times in a row, failoverRetryGap apart. Until one is done the egg stays
// stopped: an empty volume is never started in the data's place.
func (s *Service) retryRestore(ctx context.Context, project, name string) error {
	list, err := s.deps.Tasks.ListVolumeTasks(ctx, store.VolumeTaskFilter{Project: project, Volume: name, Kind: string(contract.TaskRestore)})
	if err != nil {
		return err
	}
	failed := 0
	var last store.VolumeTask
	for _, t := range list { // newest first
		if t.Trigger != api.TriggerFailover || t.State != store.TaskFailed && t.State != store.TaskLost {
			break
		}
		if failed == 0 {
			last = t
		}
		failed++
	}
	if failed == 0 || last.ReleasedAt.IsZero() {
		return nil
	}
	v, err := s.volumeRecord(ctx, project, name)
	if err != nil || v.host != last.Host {
		return err
	}
	if failed >= maxFailoverRestores {
		if s.note(project, name, last.EndedAt) {
			s.event(ctx, store.Event{Type: store.EventVolumeFailoverFailed, Project: project, Host: last.Host, Resource: resource.Key(resource.Volume, name),
				Message: fmt.Sprintf("volume %s of %s: its failover's restore failed %d times (last: %s); %s stays stopped: restore it by hand (hatch volume restore, --from an older backup)",
					name, project, failed, last.Error, eggOr(v.in.Egg))})
		}
		return nil
	}
	if s.now().Sub(last.EndedAt) < failoverRetryGap {
		return nil
	}
	t := store.VolumeTask{ID: newID(), Kind: last.Kind, Project: project, Volume: name, Host: last.Host, Trigger: api.TriggerFailover,
		CreatedAt: s.now(), State: store.TaskPending, Backup: last.Backup, Target: last.Target}
	_, err = s.start(ctx, t, v, "")
	switch {
	case errors.Is(err, ErrRefused):
		return nil // locked, or a task open: the next pass sees
	case err != nil:
		return err
	}
	s.log.Info("failover restore tried again", zap.String("project", project), zap.String("volume", name), zap.Int("failed", failed))
	return nil
}

// failoverFailed records once per loss of its host that the volume could
// not fail over, and why.
func (s *Service) failoverFailed(ctx context.Context, project, name string, lostHost store.Host, why error) error {
	if !s.note(project, name, silentSince(lostHost)) {
		return nil
	}
	names, _ := s.hostNames(ctx)
	s.event(ctx, store.Event{Type: store.EventVolumeFailoverFailed, Project: project, Host: lostHost.ID, Resource: resource.Key(resource.Volume, name),
		Message: fmt.Sprintf("volume %s of %s cannot fail over from host %s, silent since %s: %v", name, project,
			nameOr(names, lostHost.ID), silentSince(lostHost).UTC().Format(time.RFC3339), why)})
	return nil
}

// note says whether the failure of the volume's failover for a loss
// (the time its host went silent) is new, and remembers it.
func (s *Service) note(project, name string, since time.Time) bool {
	s.noted.Lock()
	defer s.noted.Unlock()
	key := project + " " + name
	if s.noted.m[key].Equal(since) {
		return false
	}
	s.noted.m[key] = since
	return true
}

func (s *Service) forgetNote(project, name string) {
	s.noted.Lock()
	defer s.noted.Unlock()
	delete(s.noted.m, project+" "+name)
}

// findStaleCopies records the stale copies of the hosts heard again since
// their failover, with an event each.
func (s *Service) findStaleCopies(ctx context.Context, heard map[string]time.Time) error {
	found, err := s.deps.Desired.FindStaleCopies(ctx, heard)
	if err != nil || len(found) == 0 {
		return err
	}
	names, _ := s.hostNames(ctx)
	for _, project := range slices.Sorted(maps.Keys(found)) {
		ns, proj, _ := resource.SplitProject(project)
		for _, c := range found[project] {
			args := fmt.Sprintf("%s %s -n %s", proj, c.Volume, ns)
			s.event(ctx, store.Event{Type: store.EventVolumeStaleCopy, Project: project, Host: c.Host, Resource: resource.Key(resource.Volume, c.Volume),
				Message: fmt.Sprintf("host %s is back with a stale copy of volume %s of %s (Docker volume %s): the volume failed over to host %s at %s, so this copy is not started and is kept as it is; hatch volume restore %s --from-host %s brings back what it holds, hatch volume forget %s --stale-copy %s deletes it",
					nameOr(names, c.Host), c.Volume, project, c.DockerName, nameOr(names, c.MovedTo), c.Since.UTC().Format(time.RFC3339),
					args, nameOr(names, c.Host), args, nameOr(names, c.Host))})
		}
	}
	return nil
}

// nameOr is the host's name, or its ID when it has none.
func nameOr(names map[string]string, id string) string {
	if n := names[id]; n != "" {
		return n
	}
	return id
}

// eggOr names the volume's egg for messages.
func eggOr(egg string) string {
	if egg == "" {
		return "nothing (no egg mounts it)"
	}
	return "egg " + egg
}
