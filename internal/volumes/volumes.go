// Package volumes is the control plane's side of volume backups and
// restores (docs/BACKUPS.md): it records each task (store.VolumeTask),
// puts it in the desired state of the one host that does it with that
// volume's own key, takes the host's reports of it, serves the host the
// routes its chunks and manifests travel through, fires the volumes'
// backup schedules from the one scheduler (package jobs), and keeps each
// volume's last good backups.
//
// Invariants:
//   - A task is recorded before it is delivered, and delivered under its
//     project's lease; a host's claims are taken only for a task delivered
//     to that host, and a task's first recorded end stands. A task whose
//     host goes down before reporting its end is lost, never begun again.
//   - A host gets only its volume's key (backup.DeriveVolumeKey of the
//     cluster's backup key), in its own desired state; the cluster key
//     never leaves the control plane.
//   - A host writes only to a backup task of its own that is open, and
//     reads only the manifest and the chunks of its own open restore: the
//     manifest's chunk list, opened here with the volume's key, is what it
//     may read.
//   - A backup is good once the manifest its host named opens with the
//     volume's key and names the volume: every chunk it lists is then
//     retained (store.BlobRetention) until the backup is forgotten, and
//     blob collection never removes a chunk younger than the oldest
//     backup in progress (GuardCollector). In a bucket, forgetting
//     deletes the manifest, and a sweep deletes the chunks no manifest
//     lists once older than the oldest backup in progress (Sweep).
package volumes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/backup"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/desired"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/store"
)

// The errors the API maps to HTTP codes; each is wrapped with the reason.
var (
	// ErrNotFound: no such project, volume, task or backup (404).
	ErrNotFound = errors.New("not found")
	// ErrRefused: the request cannot be done now (409): a running
	// container mounts the volume, its host is down, the project is locked.
	ErrRefused = errors.New("refused")
	// ErrInvalid: the request is wrong (400).
	ErrInvalid = errors.New("invalid")
	// ErrForbidden: a host asked about a task that is not its own, not
	// open, or not of the route's kind (403).
	ErrForbidden = errors.New("forbidden")
)

// Config tunes the service. Start from DefaultConfig.
type Config struct {
	// Tick is how often the loop records reports, delivers and releases.
	Tick time.Duration
	// LeaseTTL is the term of the project leases the service takes, and
	// LeaseWait how long a manual backup or a restore waits for a project
	// an apply holds.
	LeaseTTL, LeaseWait time.Duration
	// ListLimit bounds the tasks List returns.
	ListLimit int
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Tick: time.Second, LeaseTTL: 30 * time.Second, LeaseWait: 10 * time.Second, ListLimit: 500}
}

// Validate reports every setting that cannot work.
func (c Config) Validate() error {
	if c.Tick <= 0 || c.LeaseTTL <= 0 || c.LeaseWait <= 0 || c.ListLimit < 1 {
		return fmt.Errorf("volumes config: tick, lease TTL and lease wait must be positive and the list limit at least 1: %+v", c)
	}
	return nil
}

// Desired is what the service changes and reads of the hosts' desired
// states (desired.States).
type Desired interface {
	DeliverVolumeTasks(ctx context.Context, tasks []desired.VolumeTaskDelivery) error
	ReleaseVolumeTasks(ctx context.Context, project string, ids []string, eggs []*resource.Deployed) error
	VolumeHost(ctx context.Context, project, name string) (host, dockerName string, ok bool, err error)
	VolumeMounts(ctx context.Context, host, dockerName string) ([]string, error)
	// The failover's (failover.go).
	FailoverHost(ctx context.Context, project, name string, in inputs.Volume) (string, error)
	MoveVolume(ctx context.Context, m desired.FailoverMove) error
	Reschedule(ctx context.Context, project string, recs []*resource.Deployed) ([]*resource.Deployed, error)
	FindStaleCopies(ctx context.Context, heard map[string]time.Time) (map[string][]desired.StaleCopy, error)
	StaleCopies(ctx context.Context, project string) ([]desired.StaleCopy, error)
	DeleteStaleCopy(ctx context.Context, project, name, host string) (string, error)
}

// Records lists the projects and their deployed resources, and writes a
// failover into them.
type Records interface {
	ListProjects(ctx context.Context) ([]string, error)
	ListResources(ctx context.Context, project string) ([]*resource.Deployed, error)
	PutResource(ctx context.Context, project string, r *resource.Deployed) error
}

// Hosts is what the service reads of the hosts.
type Hosts interface {
	ListHosts(ctx context.Context) ([]store.Host, error)
	Status(ctx context.Context, hostID string) (store.Status, error)
	ListHostIdentities(ctx context.Context) ([]store.HostIdentity, error)
}

// Deps are what the service works with; every one is required.
type Deps struct {
	Tasks     store.VolumeTasks
	Leases    store.Leases
	Events    store.Events
	Retention store.BlobRetention
	Records   Records
	Hosts     Hosts
	Desired   Desired
	// Store is where backups' chunks and manifests go (BlobStore, or an
	// s3store.Store).
	Store backup.Store
	// ClusterKey is the cluster's backup key (backup.KeySize bytes).
	ClusterKey []byte
	// ServerID names this server in the leases it takes.
	ServerID string
	Logger   *zap.Logger
	Now      func() time.Time
}

func (d Deps) validate() error {
	if d.Tasks == nil || d.Leases == nil || d.Events == nil || d.Retention == nil || d.Records == nil || d.Hosts == nil ||
		d.Desired == nil || d.Store == nil || d.ServerID == "" || d.Logger == nil || d.Now == nil {
		return errors.New("volumes: every dependency must be set")
	}
	if len(d.ClusterKey) != backup.KeySize {
		return fmt.Errorf("volumes: the backup key must be %d bytes, not %d", backup.KeySize, len(d.ClusterKey))
	}
	return nil
}

// Service is the backups service: its API and host routes on every
// server, its loop (BeginLoops) and schedule (Source) on the loops' holder.
type Service struct {
	cfg   Config
	deps  Deps
	log   *zap.Logger
	now   func() time.Time
	lists *chunkLists
	// manifests caches the store's opened manifests (List).
	manifests *manifestCache
	metrics   *lastSuccessMetric
	// noted are the failovers that could not be done, by project and
	// volume, with when their host went silent: one event per loss.
	noted struct {
		sync.Mutex
		m map[string]time.Time
	}
}

// New returns a service.
func New(cfg Config, deps Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := deps.validate(); err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, deps: deps, log: deps.Logger.With(zap.String("component", "volumes")), now: deps.Now,
		lists: newChunkLists(), manifests: newManifestCache()}
	s.metrics = &lastSuccessMetric{s: s}
	s.noted.m = map[string]time.Time{}
	return s, nil
}

// newID returns a new task ID: 16 random hex digits.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// volumeKey derives the volume's own key from the cluster's.
func (s *Service) volumeKey(project, volume string) (backup.VolumeKey, error) {
	ns, proj, err := resource.SplitProject(project)
	if err != nil {
		return backup.VolumeKey{}, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return backup.DeriveVolumeKey(s.deps.ClusterKey, backup.VolumeID{Namespace: ns, Project: proj, Volume: volume})
}

// event records an event; a failure is logged: what it tells of happened.
func (s *Service) event(ctx context.Context, e store.Event) {
	e.Time = s.now()
	if _, err := s.deps.Events.AppendEvent(context.WithoutCancel(ctx), e); err != nil {
		s.log.Warn("event not recorded", zap.String("type", string(e.Type)), zap.Error(err))
	}
}

// endEvent records the event of a task's end, with the actor who asked
// for it (none for a scheduled backup).
func (s *Service) endEvent(ctx context.Context, t store.VolumeTask) {
	var typ store.EventType
	var msg string
	what := "backup"
	if t.Kind == string(contract.TaskRestore) {
		what = "restore"
	}
	switch {
	case t.State == store.TaskDone && t.Kind == string(contract.TaskRestore):
		typ, msg = store.EventRestoreDone, fmt.Sprintf("restore %s of volume %s from backup %s into %s is done", t.ID, t.Volume, short(t.Backup), t.Target)
	case t.State == store.TaskDone:
		typ, msg = store.EventBackupDone, fmt.Sprintf("backup %s of volume %s is done: %d bytes, %d sent (backup %s)", t.ID, t.Volume,
			t.Bytes, t.SentBytes, short(t.Manifest))
	case t.State == store.TaskFailed || t.State == store.TaskLost:
		typ = store.EventBackupFailed
		if t.Kind == string(contract.TaskRestore) {
			typ = store.EventRestoreFailed
		}
		msg = fmt.Sprintf("%s %s of volume %s failed: %s", what, t.ID, t.Volume, t.Error)
	default:
		return
	}
	ctx = store.WithActor(ctx, t.Actor)
	s.event(ctx, store.Event{Type: typ, Project: t.Project, Host: t.Host, Resource: resource.Key(resource.Volume, t.Volume), Message: msg})
}

// short is the first 12 digits of a manifest ID, for messages.
func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
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

// toAPI is what users see of a recorded task.
func toAPI(t store.VolumeTask, names map[string]string) api.VolumeTask {
	ns, proj, _ := resource.SplitProject(t.Project)
	return api.VolumeTask{ID: t.ID, Kind: t.Kind, Namespace: ns, Project: proj, Volume: t.Volume, Host: t.Host,
		HostName: names[t.Host], Trigger: t.Trigger, Actor: t.Actor, ScheduledAt: t.ScheduledAt, CreatedAt: t.CreatedAt,
		DeliveredAt: t.DeliveredAt, StartedAt: t.StartedAt, EndedAt: t.EndedAt, State: t.State, Phase: t.Phase,
		Manifest: t.Manifest, Backup: t.Backup, Target: t.Target, Consistency: t.Consistency, Bytes: t.Bytes, Chunks: t.Chunks,
		NewChunks: t.NewChunks, SentBytes: t.SentBytes, StoredBytes: t.StoredBytes, Output: t.Output, Error: t.Error}
}
