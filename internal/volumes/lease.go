package volumes

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/store"
)

// leaseRetry is how often a wait for a locked project tries again.
const leaseRetry = 200 * time.Millisecond

// withLease runs fn under the project's lease, its writes fenced by it
// (besides ctx's own: the loops' lease for the loop's work), as the jobs
// service does: fn is one change of desired states and a few records,
// well within the lease's term. A project another operation holds is
// waited for up to wait (0: not at all), then gives the *store.LockedError.
func (s *Service) withLease(ctx context.Context, project, holder string, wait time.Duration, fn func(ctx context.Context) error) error {
	deadline := time.Now().Add(wait)
	for {
		now := s.now()
		held, err := s.deps.Leases.AcquireLease(ctx, store.Lease{Project: project, Token: newID(), Holder: holder,
			Server: s.deps.ServerID, Since: now, Expires: now.Add(s.cfg.LeaseTTL)})
		if err == nil {
			defer s.release(ctx, held)
			return fn(store.WithFence(ctx, store.Fence{Project: project, Token: held.Token}))
		}
		if !errors.Is(err, store.ErrLocked) || !time.Now().Add(leaseRetry).Before(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(leaseRetry):
		}
	}
}

// release gives a project's lease back, even after a cancel.
func (s *Service) release(ctx context.Context, held store.Lease) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := s.deps.Leases.ReleaseLease(ctx, held.Project, held.Token); err != nil {
		s.log.Warn("project lease not released (it expires by itself)", zap.String("project", held.Project), zap.Error(err))
	}
}
