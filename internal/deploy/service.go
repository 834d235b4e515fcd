// Package deploy is the apply protocol of the control plane: plans made
// against a project's deployed state, applies of those plans under the
// project's lease, destroys, rollout restarts, auto-revert of failed
// rollouts and rescheduling of eggs whose hosts are gone. Its Service takes
// and returns plain Go values (package api's); the HTTP API, `hatch up` and
// the dashboard call it alike.
//
// Invariants:
//   - Every change of a project's deployed state happens under its lease,
//     held by one operation of one server at a time and renewed while it
//     runs; a server that dies keeps a project locked for one lease TTL at
//     most.
//   - A plan is applied only if the project's deployed state is still the
//     one it was made against (its state hash), and only once.
//   - An apply runs on the service's life, not its caller's: a client that
//     goes away changes nothing. Its lease is released before its outcome
//     is told.
package deploy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/provider"
	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/spec"
	"github.com/hatchery/hatchery/internal/store"
)

// Config tunes the apply protocol. Start from DefaultConfig.
type Config struct {
	// PlanTTL is how long a plan may wait for its apply.
	PlanTTL time.Duration
	// LeaseTTL is how long a project's lease lasts unless its holder renews
	// it (every third of it): the longest a server that died keeps a project
	// locked from other servers.
	LeaseTTL time.Duration
	// RescheduleInterval is how often the fleet is checked for hosts whose
	// replicas must move (placement's own delay is 2s).
	RescheduleInterval time.Duration
	// RevertRetry is how long auto-revert waits for a locked project (for at
	// most 60 tries).
	RevertRetry time.Duration
	// Concurrency bounds each apply's provider calls (0: the reconciler's
	// default).
	Concurrency uint
	// Backoff is the reconciler's retry policy (nil: its default).
	Backoff func() backoff.BackOff
	// MaxReplicas is the most replicas a plan may ask for per egg (at most
	// spec.MaxReplicas): placement works per replica, so a request for a
	// billion would hold the server for as long as it takes.
	MaxReplicas int
	// KeepApplies is how many applies of each project the history keeps
	// (`hatch server --keep-applies`): a rollback can go back that far, and
	// the build contexts they used are kept from blob collection with them.
	KeepApplies int
	// FenceAfter (`hatch server --fence-after`) and RequestTimeout
	// (--request-timeout) bound how soon a volume may fail over: a plan
	// refuses a failover.after not above them plus the egg's drain and
	// stop timeouts (checkFailover).
	FenceAfter, RequestTimeout time.Duration
}

// DefaultConfig returns the defaults documented in docs/API.md.
func DefaultConfig() Config {
	return Config{PlanTTL: time.Hour, LeaseTTL: 30 * time.Second, RescheduleInterval: 500 * time.Millisecond,
		RevertRetry: time.Second, MaxReplicas: DefaultMaxReplicas, KeepApplies: store.DefaultKeepApplies}
}

// DefaultMaxReplicas is Config.MaxReplicas's default.
const DefaultMaxReplicas = 1000

// Validate reports every setting that cannot work.
func (c Config) Validate() error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"plan TTL", c.PlanTTL}, {"lease TTL", c.LeaseTTL}, {"reschedule interval", c.RescheduleInterval}, {"revert retry", c.RevertRetry}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("deploy config: %s must be positive, not %v", d.name, d.v))
		}
	}
	if c.MaxReplicas < 1 || c.MaxReplicas > spec.MaxReplicas {
		errs = append(errs, fmt.Errorf("deploy config: max replicas must be between 1 and %d, not %d", spec.MaxReplicas, c.MaxReplicas))
	}
	if c.KeepApplies < 1 || c.KeepApplies > MaxKeepApplies {
		errs = append(errs, fmt.Errorf("deploy config: keep applies must be between 1 and %d, not %d", MaxKeepApplies, c.KeepApplies))
	}
	return errors.Join(errs...)
}

// MaxKeepApplies bounds Config.KeepApplies: each kept apply holds its
// inputs and its build contexts' blobs.
const MaxKeepApplies = 1000

// Reports is what auto-revert reads of a host: its desired state and its
// last report, to tell whether a failure is of the current spec.
type Reports interface {
	DesiredState(ctx context.Context, hostID string) (store.DesiredState, error)
	Status(ctx context.Context, hostID string) (store.Status, error)
}

// Deps are what the service works with; every one is required.
type Deps struct {
	// Resources are the deployed resources (the reconciler's storage).
	Resources reconciler.ResourceStorage
	Plans     store.Plans
	Leases    store.Leases
	Applies   store.ApplyHistory
	Projects  store.Projects
	Events    store.Events
	Reports   Reports
	// Sources say whether a blob is uploaded.
	Sources   reconciler.SourceStorage
	Providers *provider.Set
	// Images resolves image tags to digests at plan (imageref.Registry).
	Images ImageResolver
	// ServerID names this server in the leases it holds. It must be the same
	// across restarts: a starting server releases what its previous life held.
	ServerID string
	Logger   *zap.Logger
	// Now is the clock.
	Now func() time.Time
	// Loops are more background loops, begun and run with the revert and
	// reschedule loops on the server that holds the loops' lease: the jobs
	// scheduler (jobs.Service). None is a valid set.
	Loops []Loop
}

// Loop is background work that runs only on the loops' holder, fenced by
// its lease: BeginLoops prepares it and returns what runs it until its
// context ends.
type Loop interface {
	BeginLoops(ctx context.Context) (run func(ctx context.Context), err error)
}

func (d Deps) validate() error {
	if d.Resources == nil || d.Plans == nil || d.Leases == nil || d.Applies == nil || d.Projects == nil ||
		d.Events == nil || d.Reports == nil || d.Sources == nil || d.Providers == nil || d.Images == nil || d.Logger == nil || d.Now == nil {
		return errors.New("deploy: every dependency must be set")
	}
	if d.ServerID == "" {
		return errors.New("deploy: ServerID must name this server")
	}
	return nil
}

// Service runs the apply protocol. Start recovers from a previous life;
// RunLoops runs the revert and reschedule loops; Close stops them and every
// apply still running.
type Service struct {
	cfg  Config
	deps Deps
	log  *zap.Logger
	now  func() time.Time

	mu   sync.Mutex // guards jobs and done
	jobs map[int64]*Job
	done []int64 // finished jobs, oldest first, forgotten past maxFinishedJobs

	life   context.Context // the service's life: jobs and loops end with it
	cancel context.CancelFunc
	work   sync.WaitGroup // applies, loops and auto-reverts

	progress loopProgress
}

// loopProgress is how far the background loops have come: what a caller
// waits on to know a loop has looked at something, rather than sleeping.
type loopProgress struct {
	reschedulePasses atomic.Int64 // ticks of the reschedule loop handled
	revertReadTo     atomic.Int64 // the last event seq the revert loop has read
	reverting        atomic.Int64 // auto-reverts started and not yet ended
}

// LoopProgress is a snapshot of the background loops' progress.
type LoopProgress struct {
	// ReschedulePasses counts the reschedule loop's passes: a pass has
	// read the fleet and moved what it had to.
	ReschedulePasses int64
	// RevertReadTo is the seq of the last event the auto-revert loop read.
	RevertReadTo int64
	// Reverting counts the auto-reverts under way.
	Reverting int64
}

// LoopProgress says how far this service's background loops have come.
// Tests wait on it to know a loop has seen what they did, and that it
// chose to do nothing, without sleeping for "long enough".
func (s *Service) LoopProgress() LoopProgress {
	return LoopProgress{ReschedulePasses: s.progress.reschedulePasses.Load(),
		RevertReadTo: s.progress.revertReadTo.Load(), Reverting: s.progress.reverting.Load()}
}

// maxFinishedJobs is how many finished applies keep their progress in memory
// for late followers.
const maxFinishedJobs = 100

// eventPage is how many events a loop reads at a time.
const eventPage = 1000

// New returns a service; nothing runs until Start.
func New(cfg Config, deps Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := deps.validate(); err != nil {
		return nil, err
	}
	life, cancel := context.WithCancel(context.Background())
	return &Service{cfg: cfg, deps: deps, log: deps.Logger.With(zap.String("component", "deploy")), now: deps.Now,
		jobs: map[int64]*Job{}, life: life, cancel: cancel}, nil
}

// Start recovers from the previous life of this server (its leases, the
// loops' among them, its applies left running, expired plans). The loops
// run apart (RunLoops), on one server at a time.
func (s *Service) Start(ctx context.Context) error {
	released, err := s.deps.Leases.ReleaseServerLeases(ctx, s.deps.ServerID)
	if err != nil {
		return fmt.Errorf("release this server's leases: %w", err)
	}
	for _, l := range released {
		s.log.Info("released a lease this server held before it restarted",
			zap.String("project", l.Project), zap.String("holder", l.Holder))
	}
	if err := s.failInterrupted(ctx); err != nil {
		return fmt.Errorf("finish interrupted applies: %w", err)
	}
	if _, err := s.deps.Plans.DeleteExpiredPlans(ctx, s.now()); err != nil {
		return fmt.Errorf("delete expired plans: %w", err)
	}
	return nil
}

// BeginLoops finds where auto-revert resumes in the event log, begins
// Deps.Loops, and returns the function that runs the reschedule and revert
// loops and those until its context
// (or the service's life) ends and waits for the auto-reverts they started;
// auto-revert follows the failed rollouts recorded from revertLookback
// before the BeginLoops on. The server calls both while it holds the loops'
// lease, with a context fenced by it (package leader): their writes also
// need that lease, besides the project's, so none lands once another server
// took the loops over.
func (s *Service) BeginLoops(ctx context.Context) (run func(ctx context.Context), err error) {
	since, err := s.seqBefore(ctx, s.now().Add(-revertLookback))
	if err != nil {
		return nil, fmt.Errorf("read the event log: %w", err)
	}
	more := make([]func(context.Context), len(s.deps.Loops))
	for i, l := range s.deps.Loops {
		if more[i], err = l.BeginLoops(ctx); err != nil {
			return nil, err
		}
	}
	return func(ctx context.Context) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(s.life, cancel)
		defer stop()
		var loops sync.WaitGroup
		loops.Go(func() { rescheduler{s}.rescheduleLoop(ctx) })
		loops.Go(func() { reverter{s, &loops}.revertLoop(ctx, since) })
		for _, run := range more {
			loops.Go(func() { run(ctx) })
		}
		loops.Wait()
	}, nil
}

// Close stops the loops and the applies still running (they are recorded
// as interrupted) and waits for them.
func (s *Service) Close() {
	s.cancel()
	s.work.Wait()
}

// failInterrupted fails the applies that a server's death cut short: those
// still running whose project nobody holds. An apply holds its project's
// lease from before its record is made until it ends, so a running apply
// whose project is locked is another server's, in flight, and is left
// alone; taking the lease here also keeps an apply from starting while its
// project's interrupted one is being failed. A new apply finishes the job
// (pending records are created again with the same IDs).
func (s *Service) failInterrupted(ctx context.Context) error {
	projects, err := s.deps.Projects.ListProjects(ctx)
	if err != nil {
		return err
	}
	for _, p := range projects {
		applies, err := s.deps.Applies.Applies(ctx, p)
		if err != nil {
			return err
		}
		for _, ap := range applies {
			if ap.Outcome != store.ApplyRunning {
				continue
			}
			if err := s.failIfUnheld(ctx, ap); err != nil {
				return err
			}
		}
	}
	return nil
}

// failIfUnheld fails the running apply ap if its project's lease is free.
func (s *Service) failIfUnheld(ctx context.Context, ap store.Apply) error {
	now := s.now()
	held, err := s.deps.Leases.AcquireLease(ctx, store.Lease{Project: ap.Project, Token: randomID(),
		Holder: fmt.Sprintf("recovery of apply %d", ap.ID), Server: s.deps.ServerID, Since: now, Expires: now.Add(s.cfg.LeaseTTL)})
	if errors.Is(err, store.ErrLocked) {
		s.log.Info("a running apply is another server's: left to it", zap.String("project", ap.Project), zap.Int64("apply", ap.ID))
		return nil
	}
	if err != nil {
		return err
	}
	defer func() {
		if err := s.deps.Leases.ReleaseLease(context.WithoutCancel(ctx), ap.Project, held.Token); err != nil {
			s.log.Warn("recovery lease not released (it expires)", zap.String("project", ap.Project), zap.Error(err))
		}
	}()
	err = s.deps.Applies.FinishApply(ctx, ap.ID, store.ApplyFailed,
		"interrupted: the server stopped during this apply; apply again to finish it", s.now())
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return nil
}

// revertLookback is how far back, by the events' own times, auto-revert
// reads the event log when a server takes the loops: a rollout.failed
// recorded after the previous holder's last read of the log (before it
// died, was paused or stopped, and another took over up to a term and a
// third later; a failed read is retried after a minute), is reverted all the
// same. Reading back is safe: auto-revert decides on what the records and
// the hosts' reports say now, not on the event, so an egg reverted already,
// or whose rollout has since succeeded or changed, is left alone. The margin
// also covers the recording servers' clocks differing.
const revertLookback = 5 * time.Minute

// seqBefore returns the seq of the last event before the first one recorded
// at or after from (the log's end if none is). An event stamped early by a
// server whose clock is ahead only makes the resumption earlier.
func (s *Service) seqBefore(ctx context.Context, from time.Time) (int64, error) {
	var since int64
	for {
		evs, err := s.deps.Events.ListEvents(ctx, since, eventPage)
		if err != nil {
			return 0, err
		}
		for _, e := range evs {
			if !e.Time.Before(from) {
				return since, nil
			}
			since = e.Seq
		}
		if len(evs) < eventPage {
			return since, nil
		}
	}
}

// stateHash identifies a project's deployed state: a plan is applied only
// if the hash it was made against still holds.
func stateHash(recs []*resource.Deployed) string {
	type rec struct {
		Key, ID, Source string
		Pending         bool
		Inputs, Outputs map[string]any
		Parents         []string
	}
	list := make([]rec, len(recs))
	for i, r := range recs {
		list[i] = rec{Key: r.Key(), ID: r.ID, Source: r.Source, Pending: r.Pending, Inputs: r.Inputs, Outputs: r.Outputs,
			Parents: slices.Sorted(slices.Values(r.Parents))}
	}
	slices.SortFunc(list, func(a, b rec) int {
		switch {
		case a.Key < b.Key:
			return -1
		case a.Key > b.Key:
			return 1
		}
		return 0
	})
	b, err := json.Marshal(list) // map keys sorted; numbers as JSON writes them
	if err != nil {
		return "unhashable: " + err.Error()
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// randomID returns 16 random hex digits.
func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// lockedError tells the caller of an operation on a locked project who
// holds it and, when the holder seems to have stopped, when the lock ends.
// A holder renews its lease every third of a term (lease.renew), so a lease
// with less than half a term left missed a renewal: its server died or lost
// its database. The store hands such a lease over as soon as that server
// leaves the live server list; at the latest it expires.
func (s *Service) lockedError(err error) error {
	var locked *store.LockedError
	if !errors.As(err, &locked) {
		return err
	}
	now := s.now()
	if left := locked.Held.Expires.Sub(now); left < s.cfg.LeaseTTL/2 {
		return api.Errorf(api.CodeLocked, "%s, and its server has not renewed the lock for %s: it seems to have stopped answering. "+
			"The lock is taken over as soon as that server leaves the live server list, and expires at %s at the latest (in %s); "+
			"run this again then", locked.Error(), (s.cfg.LeaseTTL - left).Round(time.Second),
			locked.Held.Expires.UTC().Format(time.RFC3339), max(left, 0).Round(time.Second))
	}
	return api.Errorf(api.CodeLocked, "%s; try again when it is done", locked.Error())
}

// reconcilerFor returns a reconciler for one operation on the project.
func (s *Service) reconcilerFor(reg reconciler.Registry, log *zap.Logger) *reconciler.Reconciler {
	return &reconciler.Reconciler{
		Resources:   s.deps.Resources,
		Source:      s.deps.Sources,
		Registry:    reg,
		Concurrency: s.cfg.Concurrency,
		Logger:      log,
		Backoff:     s.cfg.Backoff,
	}
}

// putRecord stores a record an egg operation changed, even after a cancel:
// the desired states were written already.
func (s *Service) putRecord(ctx context.Context, project string, r *resource.Deployed) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := s.deps.Resources.PutResource(ctx, project, r); err != nil {
		return fmt.Errorf("record %s: %w", r.Key(), err)
	}
	return nil
}

// event records an event; its failure is logged: what it tells of happened.
func (s *Service) event(ctx context.Context, e store.Event) {
	e.Time = s.now()
	if _, err := s.deps.Events.AppendEvent(context.WithoutCancel(ctx), e); err != nil {
		s.log.Warn("event not recorded", zap.String("type", string(e.Type)), zap.Error(err))
	}
}
