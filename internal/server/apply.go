package server

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
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/provider"
	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

// ApplyDeps are what plans, applies, rollout restarts, auto-revert and
// rescheduling need beyond Deps. A server without them (tests of other
// concerns) has none of those endpoints or loops.
type ApplyDeps struct {
	// Resources are the deployed resources (the reconciler's storage).
	Resources reconciler.ResourceStorage
	Plans     store.Plans
	Leases    store.Leases
	Providers *provider.Set
	// ServerID names this server in the leases it holds. It must be the same
	// across restarts: a starting server releases what its previous life held.
	ServerID string
	Config   ApplyConfig
}

// ApplyConfig tunes the apply protocol; zero fields take the defaults.
type ApplyConfig struct {
	// PlanTTL is how long a plan may wait for its apply (default 1h).
	PlanTTL time.Duration
	// LeaseTTL is how long a project's lease lasts unless its holder renews
	// it (every third of it): the longest a server that died keeps a project
	// locked from other servers (default 30s).
	LeaseTTL time.Duration
	// RescheduleInterval is how often the fleet is checked for hosts whose
	// replicas must move (default 500ms; the scheduler's delay is 2s).
	RescheduleInterval time.Duration
	// RevertRetry is how long auto-revert waits for a locked project
	// (default 1s, for at most a minute).
	RevertRetry time.Duration
	// Concurrency bounds each apply's provider calls (default the
	// reconciler's).
	Concurrency uint
	// Backoff is the reconciler's retry policy (nil: its default).
	Backoff func() backoff.BackOff
}

func (c ApplyConfig) withDefaults() ApplyConfig {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.PlanTTL, time.Hour)
	def(&c.LeaseTTL, 30*time.Second)
	def(&c.RescheduleInterval, 500*time.Millisecond)
	def(&c.RevertRetry, time.Second)
	return c
}

func (d *ApplyDeps) validate() error {
	if d.Resources == nil || d.Plans == nil || d.Leases == nil || d.Providers == nil {
		return errors.New("server: ApplyDeps needs Resources, Plans, Leases and Providers")
	}
	return nil
}

// applier runs the apply protocol for a Server.
type applier struct {
	s    *Server
	deps ApplyDeps
	cfg  ApplyConfig
	log  *zap.Logger

	mu   sync.Mutex // guards jobs and done
	jobs map[int64]*job
	done []int64 // finished jobs, oldest first, forgotten past maxFinishedJobs

	ctx context.Context // the server's life: jobs and loops end with it
}

// maxFinishedJobs is how many finished applies keep their progress in memory
// for late followers.
const maxFinishedJobs = 100

func newApplier(s *Server, deps ApplyDeps) *applier {
	if deps.ServerID == "" {
		deps.ServerID = "local"
	}
	return &applier{s: s, deps: deps, cfg: deps.Config.withDefaults(), log: s.log.With(zap.String("component", "apply")),
		jobs: map[int64]*job{}, ctx: context.Background()}
}

// start recovers from the previous life of this server (its leases, its
// applies left running, expired plans), then runs the reschedule and revert
// loops on loopCtx.
func (a *applier) start(ctx, loopCtx context.Context) error {
	a.ctx = loopCtx
	released, err := a.deps.Leases.ReleaseServerLeases(ctx, a.deps.ServerID)
	if err != nil {
		return err
	}
	for _, l := range released {
		a.log.Info("released a lease this server held before it restarted",
			zap.String("project", l.Project), zap.String("holder", l.Holder))
	}
	if err := a.failInterrupted(ctx); err != nil {
		return err
	}
	if _, err := a.deps.Plans.DeleteExpiredPlans(ctx, a.s.now()); err != nil {
		return err
	}
	since, err := a.lastEventSeq(ctx)
	if err != nil {
		return err
	}
	a.s.loops.Go(func() { a.rescheduleLoop(loopCtx) })
	a.s.loops.Go(func() { a.revertLoop(loopCtx, since) })
	return nil
}

// failInterrupted finishes the applies a previous life left running: their
// server died, and with it their work. A new apply finishes the job (pending
// records are created again with the same IDs).
func (a *applier) failInterrupted(ctx context.Context) error {
	projects, err := a.s.deps.Projects.ListProjects(ctx)
	if err != nil {
		return err
	}
	for _, p := range projects {
		applies, err := a.s.deps.Applies.Applies(ctx, p)
		if err != nil {
			return err
		}
		for _, ap := range applies {
			if ap.Outcome != store.ApplyRunning {
				continue
			}
			err := a.s.deps.Applies.FinishApply(ctx, ap.ID, store.ApplyFailed,
				"interrupted: the server stopped during this apply; apply again to finish it", a.s.now())
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
	}
	return nil
}

func (a *applier) lastEventSeq(ctx context.Context) (int64, error) {
	var since int64
	for {
		evs, err := a.s.deps.Events.ListEvents(ctx, since, maxEventLimit)
		if err != nil {
			return 0, err
		}
		if len(evs) == 0 {
			return since, nil
		}
		since = evs[len(evs)-1].Seq
	}
}

// lease is a project's lease held by this server, renewed until released.
type lease struct {
	a      *applier
	held   store.Lease
	cancel context.CancelFunc
	lost   chan struct{} // closed if a renewal finds the lease gone
	wg     sync.WaitGroup
	once   sync.Once // release runs once
}

// acquire takes the project's lease for holder, or returns the
// *store.LockedError naming who holds it. The lease is renewed on its own
// goroutine until release.
func (a *applier) acquire(ctx context.Context, project, holder string) (*lease, error) {
	now := a.s.now()
	held, err := a.deps.Leases.AcquireLease(ctx, store.Lease{Project: project, Token: randomID(), Holder: holder,
		Server: a.deps.ServerID, Since: now, Expires: now.Add(a.cfg.LeaseTTL)})
	if err != nil {
		return nil, err
	}
	renewCtx, cancel := context.WithCancel(a.ctx)
	l := &lease{a: a, held: held, cancel: cancel, lost: make(chan struct{})}
	l.wg.Go(func() { l.renew(renewCtx) })
	return l, nil
}

func (l *lease) renew(ctx context.Context) {
	t := time.NewTicker(l.a.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := l.a.deps.Leases.RenewLease(ctx, l.held.Project, l.held.Token, l.a.s.now().Add(l.a.cfg.LeaseTTL))
		switch {
		case errors.Is(err, store.ErrNotFound):
			l.a.log.Error("lost a project's lease", zap.String("project", l.held.Project), zap.String("holder", l.held.Holder))
			close(l.lost)
			return
		case err != nil && ctx.Err() == nil:
			l.a.log.Warn("lease not renewed; retrying", zap.String("project", l.held.Project), zap.Error(err))
		}
	}
}

// release stops renewing and releases the lease, even after a cancel. Calls
// after the first do nothing.
func (l *lease) release() { l.once.Do(l.releaseOnce) }

func (l *lease) releaseOnce() {
	l.cancel()
	l.wg.Wait()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(l.a.ctx), 10*time.Second)
	defer cancel()
	if err := l.a.deps.Leases.ReleaseLease(ctx, l.held.Project, l.held.Token); err != nil {
		l.a.log.Warn("lease not released (it expires by itself)", zap.String("project", l.held.Project), zap.Error(err))
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

// lockedError answers a request for a locked project.
func lockedError(err error) error {
	var locked *store.LockedError
	if errors.As(err, &locked) {
		return errorf(409, "locked", "%s; try again when it is done", locked.Error())
	}
	return err
}

// reconcilerFor returns a reconciler for one operation on the project.
func (a *applier) reconcilerFor(reg reconciler.Registry, log *zap.Logger) *reconciler.Reconciler {
	return &reconciler.Reconciler{
		Resources:   a.deps.Resources,
		Source:      a.s.deps.Blobs,
		Registry:    reg,
		Concurrency: a.cfg.Concurrency,
		Logger:      log,
		Backoff:     a.cfg.Backoff,
	}
}

// putRecord stores a record an egg operation changed, even after a cancel:
// the desired states were written already.
func (a *applier) putRecord(ctx context.Context, project string, r *resource.Deployed) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := a.deps.Resources.PutResource(ctx, project, r); err != nil {
		return fmt.Errorf("record %s: %w", r.Key(), err)
	}
	return nil
}
