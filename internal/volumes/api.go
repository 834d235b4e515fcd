package volumes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/backup"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/desired"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/spec"
	"github.com/hatchery/hatchery/internal/store"
)

// volume is a deployed volume of a project, as a task needs it.
type volume struct {
	project, name string
	host          string // its host's ID ("" if it has none yet)
	in            inputs.Volume
}

// volumeRecord returns the project's deployed volume, or ErrNotFound.
func (s *Service) volumeRecord(ctx context.Context, project, name string) (volume, error) {
	if _, _, err := resource.SplitProject(project); err != nil {
		return volume{}, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	recs, err := s.deps.Records.ListResources(ctx, project)
	if err != nil {
		return volume{}, err
	}
	for _, r := range recs {
		if r.Type != resource.Volume || r.Name != name || r.Pending {
			continue
		}
		in, err := inputs.Decode[inputs.Volume](r.Inputs)
		if err != nil {
			return volume{}, fmt.Errorf("volume %s's inputs: %w", name, err)
		}
		host, _ := r.Outputs[inputs.OutputHost].(string)
		return volume{project: project, name: name, host: host, in: in}, nil
	}
	return volume{}, fmt.Errorf("%w: project %s has no volume %q (apply it first)", ErrNotFound, project, name)
}

// consistency is the volume's backup consistency (hooks by default).
func (v volume) consistency() string {
	if v.in.Backup != nil && v.in.Backup.Consistency == contract.ConsistencyStop {
		return contract.ConsistencyStop
	}
	return contract.ConsistencyHooks
}

// keep is how many good backups the volume keeps.
func (v volume) keep() int {
	if v.in.Backup != nil && v.in.Backup.Keep > 0 {
		return v.in.Backup.Keep
	}
	return inputs.DefaultBackupKeep
}

// Backup records a backup of the project's volume now and delivers it to
// the volume's host (hatch volume backup). Any volume may be backed up by
// hand, with or without a backup policy; one whose backup is still open
// is refused. With fromHost (a host's name or ID), it backs up the
// volume's stale copy on that host instead (hatch volume backup
// --from-host): a copy no egg mounts, so without hooks; restoring that
// backup brings back what the copy held.
func (s *Service) Backup(ctx context.Context, project, name, fromHost, actor string) (api.VolumeTask, error) {
	v, err := s.volumeRecord(ctx, project, name)
	if err != nil {
		return api.VolumeTask{}, err
	}
	if fromHost != "" {
		if v.host, err = s.staleCopyHost(ctx, project, name, fromHost); err != nil {
			return api.VolumeTask{}, err
		}
		v.in.Egg, v.in.Backup = "", nil
	}
	if v.host == "" {
		return api.VolumeTask{}, fmt.Errorf("%w: volume %s has no host yet (its apply has not placed it)", ErrRefused, name)
	}
	if err := s.checkHostUp(ctx, v.host); err != nil {
		return api.VolumeTask{}, err
	}
	t := store.VolumeTask{ID: newID(), Kind: string(contract.TaskBackup), Project: project, Volume: name, Host: v.host,
		Trigger: api.TriggerManual, Actor: actor, CreatedAt: s.now(), State: store.TaskPending, Consistency: v.consistency()}
	return s.start(store.WithActor(ctx, actor), t, v, "")
}

// staleCopyHost returns the ID of the host, named by its name or ID, that
// holds a stale copy of the project's volume.
func (s *Service) staleCopyHost(ctx context.Context, project, name, host string) (string, error) {
	copies, err := s.deps.Desired.StaleCopies(ctx, project)
	if err != nil {
		return "", err
	}
	names, err := s.hostNames(ctx)
	if err != nil {
		return "", err
	}
	var hosts []string
	for _, c := range copies {
		if c.Volume != name {
			continue
		}
		if c.Host == host || names[c.Host] == host {
			return c.Host, nil
		}
		hosts = append(hosts, nameOr(names, c.Host))
	}
	if len(hosts) == 0 {
		return "", fmt.Errorf("%w: volume %s has no stale copy (a failover leaves one on the host it moved from)", ErrNotFound, name)
	}
	return "", fmt.Errorf("%w: volume %s has no stale copy on host %q; it has on: %s", ErrNotFound, name, host, strings.Join(hosts, ", "))
}

// ForgetStaleCopy marks the volume's stale copy on host (a name or an ID)
// for deletion there (hatch volume forget --stale-copy).
func (s *Service) ForgetStaleCopy(ctx context.Context, project, name, host, actor string) error {
	id, err := s.staleCopyHost(ctx, project, name, host)
	if err != nil {
		return err
	}
	ctx = store.WithActor(ctx, actor)
	var docker string
	err = s.withLease(ctx, project, store.BriefHolder+"hatch volume forget", s.cfg.LeaseWait, func(ctx context.Context) error {
		docker, err = s.deps.Desired.DeleteStaleCopy(ctx, project, name, id)
		return err
	})
	if errors.Is(err, desired.ErrNoStaleCopy) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if err != nil {
		return err
	}
	s.event(ctx, store.Event{Type: store.EventVolumeDeleted, Project: project, Host: id, Resource: resource.Key(resource.Volume, name),
		Message: fmt.Sprintf("the stale copy of volume %s of %s on host %s (Docker volume %s) is deleted by %s", name, project, host, docker, actor)})
	return nil
}

// start records t and delivers it at once, under the project's lease
// (waited for up to LeaseWait): a task refused is not recorded. A task
// of a volume that has one open already is refused.
func (s *Service) start(ctx context.Context, t store.VolumeTask, v volume, targetName string) (api.VolumeTask, error) {
	d, err := s.delivery(t, v, targetName)
	if err != nil {
		return api.VolumeTask{}, err
	}
	err = s.withLease(ctx, t.Project, store.BriefHolder+"hatch volume "+t.Kind, s.cfg.LeaseWait, func(ctx context.Context) error {
		open, err := s.openTasks(ctx, t.Project, t.Volume)
		if err != nil {
			return err
		}
		if len(open) > 0 {
			return fmt.Errorf("%w: volume %s has a %s in progress (%s); wait for it to end", ErrRefused, t.Volume, open[0].Kind, open[0].ID)
		}
		if err := s.deps.Tasks.CreateVolumeTask(ctx, t, nil); err != nil {
			return err
		}
		if err := s.deps.Desired.DeliverVolumeTasks(ctx, []desired.VolumeTaskDelivery{d}); err != nil {
			return err
		}
		return s.deps.Tasks.DeliverVolumeTask(ctx, t.ID, t.Host, s.now())
	})
	var locked *store.LockedError
	if errors.As(err, &locked) {
		return api.VolumeTask{}, fmt.Errorf("%w: %s; try again when it is done", ErrRefused, locked.Error())
	}
	if err != nil {
		return api.VolumeTask{}, err
	}
	return s.Get(ctx, t.Project, t.ID)
}

// openTasks returns the volume's tasks that have not ended.
func (s *Service) openTasks(ctx context.Context, project, name string) ([]store.VolumeTask, error) {
	list, err := s.deps.Tasks.ListVolumeTasks(ctx, store.VolumeTaskFilter{Project: project, Volume: name, Unreleased: true})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(list, func(t store.VolumeTask) bool { return store.TaskEnded(t.State) }), nil
}

// delivery is what the desired state needs of a recorded task: the
// volume's own key (hex of its secret), never the cluster's.
func (s *Service) delivery(t store.VolumeTask, v volume, targetName string) (desired.VolumeTaskDelivery, error) {
	ns, proj, err := resource.SplitProject(t.Project)
	if err != nil {
		return desired.VolumeTaskDelivery{}, err
	}
	key, err := s.volumeKey(t.Project, t.Volume)
	if err != nil {
		return desired.VolumeTaskDelivery{}, err
	}
	ct := contract.VolumeTask{ID: t.ID, Kind: contract.VolumeTaskKind(t.Kind),
		Volume: contract.VolumeSpec{Namespace: ns, Project: proj, Name: t.Volume, DockerName: contract.VolumeName(t.Host, ns, proj, t.Volume)},
		Key:    contract.SecretValue(fmt.Sprintf("%x", key.Secret())), Egg: v.in.Egg}
	if t.Kind == string(contract.TaskBackup) {
		ct.Consistency = t.Consistency
		if v.in.Backup != nil {
			ct.Before, ct.After = v.in.Backup.Before, v.in.Backup.After
		}
	} else {
		ct.Backup, ct.Target, ct.Labels = t.Backup, t.Target, v.in.Labels
	}
	return desired.VolumeTaskDelivery{Task: ct, Host: t.Host, TargetName: targetName}, nil
}

// Get returns one task of the project.
func (s *Service) Get(ctx context.Context, project, id string) (api.VolumeTask, error) {
	t, err := s.task(ctx, project, id)
	if err != nil {
		return api.VolumeTask{}, err
	}
	names, err := s.hostNames(ctx)
	if err != nil {
		return api.VolumeTask{}, err
	}
	return toAPI(t, names), nil
}

func (s *Service) task(ctx context.Context, project, id string) (store.VolumeTask, error) {
	t, err := s.deps.Tasks.VolumeTask(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && t.Project != project {
		return store.VolumeTask{}, fmt.Errorf("%w: project %s has no volume task %s", ErrNotFound, project, id)
	}
	return t, err
}

// waitPoll is how often Wait reads the task again.
const waitPoll = 250 * time.Millisecond

// Wait returns the task once its state differs from state, or when ctx
// ends (then the task as it is, no error).
func (s *Service) Wait(ctx context.Context, project, id, state string) (api.VolumeTask, error) {
	for {
		t, err := s.task(context.WithoutCancel(ctx), project, id)
		if err != nil {
			return api.VolumeTask{}, err
		}
		if t.State != state || ctx.Err() != nil {
			return s.Get(context.WithoutCancel(ctx), project, id)
		}
		select {
		case <-ctx.Done():
		case <-time.After(waitPoll):
		}
	}
}

// List returns the project's backups (of volume, or all for ""), newest
// first: those recorded here, and those only the backup store holds (a
// control plane that did not take them, pointed at the same bucket).
func (s *Service) List(ctx context.Context, project, name string) ([]api.VolumeTask, error) {
	ns, proj, err := resource.SplitProject(project)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	recs, err := s.deps.Tasks.ListVolumeTasks(ctx, store.VolumeTaskFilter{Project: project, Volume: name,
		Kind: string(contract.TaskBackup), Forgotten: true})
	if err != nil {
		return nil, err
	}
	names, err := s.hostNames(ctx)
	if err != nil {
		return nil, err
	}
	known := map[string]bool{}
	var out []api.VolumeTask
	for _, t := range recs {
		if t.Manifest != "" {
			known[t.Manifest] = true
		}
		if t.ForgottenAt.IsZero() {
			out = append(out, toAPI(t, names))
		}
	}
	if _, own := s.deps.Store.(*BlobStore); !own {
		// Only a shared bucket holds backups no record here names.
		bs, err := s.storeBackups(ctx)
		if err != nil {
			s.log.Sugar().Warnw("some manifests of the backup store do not open with the backup key", "error", err)
		}
		for _, b := range bs {
			if known[b.task.Manifest] || b.volume.Namespace != ns || b.volume.Project != proj || name != "" && b.volume.Volume != name {
				continue
			}
			out = append(out, b.task)
		}
	}
	slices.SortStableFunc(out, func(a, b api.VolumeTask) int { return b.CreatedAt.Compare(a.CreatedAt) })
	if len(out) > s.cfg.ListLimit {
		out = out[:s.cfg.ListLimit]
	}
	return out, nil
}

// fromManifest is a backup known only from the store's manifest.
func fromManifest(m backup.Manifest) api.VolumeTask {
	var stored int64
	for _, c := range m.Chunks {
		stored += c.Stored
	}
	return api.VolumeTask{ID: m.ID, Kind: string(contract.TaskBackup), Namespace: m.Volume.Namespace, Project: m.Volume.Project,
		Volume: m.Volume.Volume, CreatedAt: m.Created, EndedAt: m.Created, State: store.TaskDone, Manifest: m.ID,
		Bytes: m.Size, Chunks: len(m.Chunks), StoredBytes: stored, FromStore: true}
}

// findBackup returns the volume's good backup whose task or manifest ID
// is from, or its latest good one for "".
func (s *Service) findBackup(ctx context.Context, project, name, from string) (api.VolumeTask, error) {
	list, err := s.List(ctx, project, name)
	if err != nil {
		return api.VolumeTask{}, err
	}
	for _, b := range list {
		if b.State != store.TaskDone || b.Manifest == "" {
			continue
		}
		if from == "" || b.ID == from || b.Manifest == from {
			return b, nil
		}
	}
	if from == "" {
		return api.VolumeTask{}, fmt.Errorf("%w: volume %s has no good backup to restore (hatch volume backups lists them)", ErrNotFound, name)
	}
	return api.VolumeTask{}, fmt.Errorf("%w: volume %s has no good backup %q (hatch volume backups lists them)", ErrNotFound, name, from)
}

// Restore plans a restore of the project's volume from a backup (the
// latest good one by default) and, unless req.DryRun, records and
// delivers it. It writes the volume itself, or with req.To a new volume
// beside it, on the volume's host; it is refused while a running
// container there mounts what it would write, or while that host is down.
func (s *Service) Restore(ctx context.Context, project, name string, req api.RestoreRequest, actor string) (api.RestorePlan, *api.VolumeTask, error) {
	v, err := s.volumeRecord(ctx, project, name)
	if err != nil {
		return api.RestorePlan{}, nil, err
	}
	if v.host == "" {
		return api.RestorePlan{}, nil, fmt.Errorf("%w: volume %s has no host yet (its apply has not placed it)", ErrRefused, name)
	}
	if req.To != "" && (!spec.ValidName(req.To) || req.To == name) {
		return api.RestorePlan{}, nil, fmt.Errorf("%w: to: %q must be a new volume's name ([a-z0-9-], 1 to 40 characters), not the volume's own", ErrInvalid, req.To)
	}
	b, err := s.findBackup(ctx, project, name, req.From)
	if err != nil {
		return api.RestorePlan{}, nil, err
	}
	key, err := s.volumeKey(project, name)
	if err != nil {
		return api.RestorePlan{}, nil, err
	}
	if _, err := backup.OpenManifest(ctx, s.deps.Store, b.Manifest, key); err != nil {
		return api.RestorePlan{}, nil, fmt.Errorf("%w: backup %s cannot be restored: %w", ErrRefused, short(b.Manifest), err)
	}
	ns, proj, _ := resource.SplitProject(project)
	plan := api.RestorePlan{Backup: b, Host: v.host, Target: contract.VolumeName(v.host, ns, proj, name), Replaces: true}
	if names, err := s.hostNames(ctx); err == nil {
		plan.HostName = names[v.host]
	}
	if req.To != "" {
		plan.Target = contract.VolumeName(v.host, ns, proj, req.To)
		host, docker, ok, err := s.deps.Desired.VolumeHost(ctx, project, req.To)
		if err != nil {
			return api.RestorePlan{}, nil, err
		}
		if ok && (host != v.host || docker != plan.Target) {
			return api.RestorePlan{}, nil, fmt.Errorf("%w: volume %s of %s is kept on another host; restore --to a name no volume has", ErrRefused, req.To, project)
		}
		plan.Replaces = ok
	}
	if age := s.now().Sub(b.CreatedAt); age > 24*time.Hour {
		plan.Warnings = append(plan.Warnings, fmt.Sprintf("the backup is %s old: what was written since is lost", age.Round(time.Hour)))
	}
	if plan.Replaces {
		plan.Warnings = append(plan.Warnings, fmt.Sprintf("the content of Docker volume %s is replaced by the backup's", plan.Target))
	}
	if err := s.checkUnmounted(ctx, v.host, plan.Target); err != nil {
		return plan, nil, err
	}
	if req.DryRun {
		return plan, nil, nil
	}
	t := store.VolumeTask{ID: newID(), Kind: string(contract.TaskRestore), Project: project, Volume: name, Host: v.host,
		Trigger: api.TriggerManual, Actor: actor, CreatedAt: s.now(), State: store.TaskPending, Backup: b.Manifest, Target: plan.Target}
	task, err := s.start(store.WithActor(ctx, actor), t, v, req.To)
	if err != nil {
		return plan, nil, err
	}
	return plan, &task, nil
}

// checkUnmounted refuses a restore into a Docker volume that a running
// container mounts, per its host's latest report (the archive PUT would
// write under a live process), or whose host is down.
func (s *Service) checkUnmounted(ctx context.Context, host, dockerName string) error {
	if err := s.checkHostUp(ctx, host); err != nil {
		return err
	}
	workloads, err := s.deps.Desired.VolumeMounts(ctx, host, dockerName)
	if err != nil || len(workloads) == 0 {
		return err
	}
	st, err := s.deps.Hosts.Status(ctx, host)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	rep, err := contract.DecodeStatusReport(bytes.NewReader(st.Report))
	if err != nil {
		return fmt.Errorf("host %s's report: %w", host, err)
	}
	for _, c := range rep.Containers {
		if slices.Contains(workloads, c.WorkloadID) && (c.State == contract.StateRunning || c.State == contract.StateStarting ||
			c.State == contract.StateDraining) {
			return fmt.Errorf("%w: a running container of %s mounts volume %s on its host; stop it first (scale its egg to 0 replicas and apply)",
				ErrRefused, c.WorkloadID, dockerName)
		}
	}
	return nil
}

// checkHostUp refuses a task on a host that is down: it could only be
// lost.
func (s *Service) checkHostUp(ctx context.Context, host string) error {
	hosts, err := s.deps.Hosts.ListHosts(ctx)
	if err != nil {
		return err
	}
	for _, h := range hosts {
		if h.ID == host && h.State == store.HostDown {
			return fmt.Errorf("%w: the volume's host %s is down; try again once it is back", ErrRefused, host)
		}
	}
	return nil
}

// Forget forgets one of the project's backups (by its task's or its
// manifest's ID): it is no longer listed nor restorable, and its chunks
// are collected once no kept backup lists them. A backup still in
// progress is refused.
func (s *Service) Forget(ctx context.Context, project, id, actor string) (api.VolumeTask, error) {
	ctx = store.WithActor(ctx, actor)
	list, err := s.List(ctx, project, "")
	if err != nil {
		return api.VolumeTask{}, err
	}
	for _, b := range list {
		if b.ID != id && (b.Manifest == "" || b.Manifest != id) {
			continue
		}
		if !store.TaskEnded(b.State) {
			return api.VolumeTask{}, fmt.Errorf("%w: backup %s is in progress; forget it once it ended", ErrRefused, b.ID)
		}
		if b.FromStore {
			if err := s.deleteManifest(ctx, b.Manifest); err != nil {
				return api.VolumeTask{}, err
			}
			// Known only from the store: a record says it is forgotten, so
			// that the store's listing does not bring it back.
			t := store.VolumeTask{ID: newID(), Kind: b.Kind, Project: project, Volume: b.Volume, Trigger: api.TriggerManual,
				Actor: actor, CreatedAt: b.CreatedAt, EndedAt: b.EndedAt, State: store.TaskDone, Manifest: b.Manifest,
				ReleasedAt: s.now(), ForgottenAt: s.now()}
			if err := s.deps.Tasks.CreateVolumeTask(ctx, t, nil); err != nil {
				return api.VolumeTask{}, err
			}
			s.forgotten(ctx, project, b.Volume, b.ID, "by "+actor)
			return b, nil
		}
		if err := s.forget(ctx, project, b.Volume, b.ID, "by "+actor); err != nil {
			return api.VolumeTask{}, err
		}
		return b, nil
	}
	return api.VolumeTask{}, fmt.Errorf("%w: project %s has no backup %q (hatch volume backups lists them)", ErrNotFound, project, id)
}

// forget marks a recorded backup forgotten and releases its chunks; in a
// bucket, its manifest is deleted first, so that a failed deletion leaves
// the backup kept and retention tries again.
func (s *Service) forget(ctx context.Context, project, name, id, why string) error {
	t, err := s.deps.Tasks.VolumeTask(ctx, id)
	if err != nil {
		return err
	}
	if err := s.deleteManifest(ctx, t.Manifest); err != nil {
		return err
	}
	changed, err := s.deps.Tasks.ForgetVolumeTask(ctx, id, s.now())
	if err != nil {
		return err
	}
	if err := s.deps.Retention.RetainBlobs(ctx, retentionOwner(id), nil); err != nil {
		return err
	}
	if changed {
		s.forgotten(ctx, project, name, id, why)
	}
	return nil
}

func (s *Service) forgotten(ctx context.Context, project, name, id, why string) {
	s.event(ctx, store.Event{Type: store.EventBackupForgotten, Project: project, Resource: resource.Key(resource.Volume, name),
		Message: fmt.Sprintf("backup %s of volume %s is forgotten (%s)", id, name, why)})
}

// retentionOwner is a backup's owner of its retained blobs.
func retentionOwner(id string) string { return "backup/" + id }
