package deploy

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/store"
)

// lease is a project's lease held by this server, renewed until released.
type lease struct {
	s      *Service
	held   store.Lease
	cancel context.CancelFunc
	lost   chan struct{} // closed if a renewal finds the lease gone
	wg     sync.WaitGroup
	once   sync.Once // release runs once
}

// lockedWait is how long acquire waits for a project's lease held by
// someone else before it gives up: the jobs scheduler holds it for a few
// milliseconds at a time to deliver a run, and an apply that met such a
// moment must not fail with "locked". An apply held by another apply still
// fails, lockedWait later.
const lockedWait = 2 * time.Second

// acquire takes the project's lease for holder, or returns the
// *store.LockedError naming who holds it once it has waited lockedWait for
// it. The lease is renewed on its own goroutine until release.
func (s *Service) acquire(ctx context.Context, project, holder string) (*lease, error) {
	held, err := s.acquireWaiting(ctx, project, holder, lockedWait)
	if err != nil {
		return nil, err
	}
	renewCtx, cancel := context.WithCancel(s.life)
	l := &lease{s: s, held: held, cancel: cancel, lost: make(chan struct{})}
	l.wg.Go(func() { l.renew(renewCtx) })
	return l, nil
}

// acquireWaiting tries to take the lease every 50 ms until wait has passed.
func (s *Service) acquireWaiting(ctx context.Context, project, holder string, wait time.Duration) (store.Lease, error) {
	deadline := time.Now().Add(wait)
	for {
		now := s.now()
		held, err := s.deps.Leases.AcquireLease(ctx, store.Lease{Project: project, Token: randomID(), Holder: holder,
			Server: s.deps.ServerID, Since: now, Expires: now.Add(s.cfg.LeaseTTL)})
		if !errors.Is(err, store.ErrLocked) || time.Now().After(deadline) {
			return held, err
		}
		select {
		case <-ctx.Done():
			return store.Lease{}, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (l *lease) renew(ctx context.Context) {
	t := time.NewTicker(l.s.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := l.s.deps.Leases.RenewLease(ctx, l.held.Project, l.held.Token, l.s.now().Add(l.s.cfg.LeaseTTL))
		switch {
		case errors.Is(err, store.ErrNotFound):
			l.s.log.Error("lost a project's lease", zap.String("project", l.held.Project), zap.String("holder", l.held.Holder))
			close(l.lost)
			return
		case err != nil && ctx.Err() == nil:
			l.s.log.Warn("lease not renewed; retrying", zap.String("project", l.held.Project), zap.Error(err))
		}
	}
}

// fenced returns ctx with the lease's fence: every store write made with it
// checks, in its own transaction, that this lease is still held with its
// token, so nothing is written once another server took the project over.
func (l *lease) fenced(ctx context.Context) context.Context {
	return store.WithFence(ctx, store.Fence{Project: l.held.Project, Token: l.held.Token})
}

// release stops renewing and releases the lease, even after a cancel. Calls
// after the first do nothing.
func (l *lease) release() { l.once.Do(l.releaseOnce) }

func (l *lease) releaseOnce() {
	l.cancel()
	l.wg.Wait()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(l.s.life), 10*time.Second)
	defer cancel()
	if err := l.s.deps.Leases.ReleaseLease(ctx, l.held.Project, l.held.Token); err != nil {
		l.s.log.Warn("lease not released (it expires by itself)", zap.String("project", l.held.Project), zap.Error(err))
	}
}
