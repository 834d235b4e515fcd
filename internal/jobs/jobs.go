// Package jobs runs eggs' commands in containers of their own: one-off
// runs (`hatch run`) and the ticks of eggs' schedules. Its scheduler is the
// one place the control plane's timed work is decided: it runs only in the
// server holding the background loops' lease (package leader), and every
// other kind of timed work plugs in as a Source whose Scheduled carry
// their own Ticks (volume backups: package volumes), recorded in their
// own table under the same rules.
//
// Invariants (the exactly-once argument):
//   - A tick is recorded before anything runs it: a run row whose
//     (project, egg, tick) is unique in the store, written in the same
//     transaction that moves the schedule's last decided tick, fenced by
//     the loops' lease. Two schedulers (a holder paused past its lease and
//     its successor) can never both record a tick: the loser's transaction
//     is fenced or meets the unique key, and keeps nothing.
//   - A run is delivered (put in its host's desired state) only once it is
//     recorded, under its project's lease (an apply holding it delays the
//     run; the delay is recorded). Any holder of the loops delivers the
//     recorded runs not yet delivered, so a takeover loses none; delivering
//     again is idempotent (a run already in a desired state stays there),
//     and an agent starts a run ID at most once (its container is named by
//     it).
//   - A run's end is taken from its host's report only for a run its own
//     desired state holds, and its first recorded end stands; a run whose
//     host went down before reporting its end is recorded lost and leaves
//     the desired state: it never runs again.
package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/desired"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

// The errors the API maps to HTTP codes; each is wrapped with the reason.
var (
	// ErrNotFound: no such project, egg or run.
	ErrNotFound = errors.New("not found")
	// ErrRefused: the request cannot be done as asked (a stateful egg that
	// runs, without --stop; a host that may not run the egg; pausing an egg
	// with no schedule; a project locked past the wait).
	ErrRefused = errors.New("refused")
	// ErrNoHost: no eligible host is up to run it.
	ErrNoHost = errors.New("no host")
)

// Config tunes the jobs service. Start from DefaultConfig.
type Config struct {
	// Tick is the longest the scheduler sleeps between passes; it wakes
	// sooner at the next due tick.
	Tick time.Duration
	// LeaseTTL is the term of the project leases the service takes to
	// change desired states (each change takes well under it).
	LeaseTTL time.Duration
	// LeaseWait is how long `hatch run` waits for a project an apply holds
	// before it is refused (the scheduler's runs wait as long as it takes).
	LeaseWait time.Duration
	// ListLimit bounds the runs List returns.
	ListLimit int
	// KeepRecords is how many records of runs out of the desired states
	// each egg keeps (`hatch runs` shows them), checked every PruneEvery.
	KeepRecords int
	PruneEvery  time.Duration
	// OutputGrace is how long a `hatch run` that keeps nothing keeps its
	// container past its end, for the logs session its CLI follows it
	// through (and, with --stop, how much longer its egg stays stopped).
	OutputGrace time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Tick: time.Second, LeaseTTL: 30 * time.Second, LeaseWait: 10 * time.Second, ListLimit: 200,
		KeepRecords: 1000, PruneEvery: time.Minute, OutputGrace: 5 * time.Second}
}

// Validate reports every setting that cannot work.
func (c Config) Validate() error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"tick", c.Tick}, {"lease TTL", c.LeaseTTL}, {"lease wait", c.LeaseWait}, {"prune every", c.PruneEvery},
		{"output grace", c.OutputGrace}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("jobs config: %s must be positive, not %v", d.name, d.v))
		}
	}
	if c.ListLimit < 1 {
		errs = append(errs, fmt.Errorf("jobs config: list limit must be at least 1, not %d", c.ListLimit))
	}
	if c.KeepRecords < 1 {
		errs = append(errs, fmt.Errorf("jobs config: keep records must be at least 1, not %d", c.KeepRecords))
	}
	return errors.Join(errs...)
}

// Desired is what the service changes of the hosts' desired states
// (desired.States).
type Desired interface {
	DeliverRuns(ctx context.Context, project string, runs []desired.RunDelivery,
		before func(hosts map[string]string, refused map[string]error) error) (hosts map[string]string, refused map[string]error, err error)
	StopRuns(ctx context.Context, ids []string) error
	ReleaseRuns(ctx context.Context, project string, ids []string, eggs []*resource.Deployed) error
}

// Records lists a project's deployed resources (its eggs).
type Records interface {
	ListResources(ctx context.Context, project string) ([]*resource.Deployed, error)
}

// Hosts is what the service reads of the hosts: their liveness and
// latest reports, and their names.
type Hosts interface {
	ListHosts(ctx context.Context) ([]store.Host, error)
	Status(ctx context.Context, hostID string) (store.Status, error)
	ListHostIdentities(ctx context.Context) ([]store.HostIdentity, error)
}

// Deps are what the service works with; every one is required.
type Deps struct {
	Runs      store.Runs
	Schedules store.ScheduleStates
	Leases    store.Leases
	Events    store.Events
	Records   Records
	Hosts     Hosts
	Desired   Desired
	// Sources list the timed work the scheduler decides (EggSchedules).
	Sources []Source
	// ServerID names this server in the leases it takes.
	ServerID string
	Logger   *zap.Logger
	Now      func() time.Time
}

func (d Deps) validate() error {
	if d.Runs == nil || d.Schedules == nil || d.Leases == nil || d.Events == nil || d.Records == nil || d.Hosts == nil ||
		d.Desired == nil || len(d.Sources) == 0 || d.Logger == nil || d.Now == nil || d.ServerID == "" {
		return errors.New("jobs: every dependency must be set (and at least one source)")
	}
	return nil
}

// Service is the jobs service: its API runs on every server, its
// scheduler (BeginLoops) on the loops' holder only.
type Service struct {
	cfg   Config
	deps  Deps
	log   *zap.Logger
	now   func() time.Time
	timed *timedWork // the scheduler's copy of its sources' work
}

// New returns a service.
func New(cfg Config, deps Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := deps.validate(); err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, deps: deps, log: deps.Logger.With(zap.String("component", "jobs")), now: deps.Now,
		timed: &timedWork{sources: deps.Sources, watch: deps.Events.WatchEvents}}, nil
}

// newRunID returns a new run ID: 16 random hex digits.
func newRunID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// eggRecord returns the deployed record of project's egg, or ErrNotFound.
func (s *Service) eggRecord(ctx context.Context, project, egg string) (*resource.Deployed, error) {
	if _, _, err := resource.SplitProject(project); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	recs, err := s.deps.Records.ListResources(ctx, project)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if r.Type == resource.Egg && r.Name == egg && !r.Pending {
			return r, nil
		}
	}
	return nil, fmt.Errorf("%w: project %s has no egg %q (apply it first)", ErrNotFound, project, egg)
}

// event records an event; a failure is logged: what it tells of happened.
func (s *Service) event(ctx context.Context, e store.Event) {
	e.Time = s.now()
	if _, err := s.deps.Events.AppendEvent(context.WithoutCancel(ctx), e); err != nil {
		s.log.Warn("event not recorded", zap.String("type", string(e.Type)), zap.Error(err))
	}
}

// endEvent records the event a run's end calls for, if any.
func (s *Service) endEvent(ctx context.Context, r store.Run) {
	key := resource.Key(resource.Egg, r.Egg)
	var typ store.EventType
	var msg string
	switch {
	case r.State == store.RunExited && r.ExitCode != 0:
		typ, msg = store.EventRunFailed, fmt.Sprintf("run %s of egg %s exited with code %d", r.ID, r.Egg, r.ExitCode)
	case r.State == store.RunFailed:
		typ, msg = store.EventRunFailed, fmt.Sprintf("run %s of egg %s failed: %s", r.ID, r.Egg, r.Error)
	case r.State == store.RunTimedOut:
		typ, msg = store.EventRunTimedOut, fmt.Sprintf("run %s of egg %s was stopped past its timeout of %s", r.ID, r.Egg, r.Timeout)
	case r.State == store.RunLost:
		typ, msg = store.EventRunLost, fmt.Sprintf("run %s of egg %s was lost with its host %s before it ended; it is not run again", r.ID, r.Egg, r.Host)
	default:
		return
	}
	s.event(ctx, store.Event{Type: typ, Project: r.Project, Host: r.Host, Resource: key, Message: msg})
}

// progressOf is a host's report of a run as the record takes it.
func progressOf(st contract.RunStatus) store.RunProgress {
	return store.RunProgress{State: string(st.State), StartedAt: st.StartedAt, EndedAt: st.EndedAt, ExitCode: st.ExitCode, Error: st.Error}
}
