package volumes

import (
	"context"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

// withLease runs fn under the project's lease (store.BriefLeases): fn runs
// one change of desired states and a few records.
func (s *Service) withLease(ctx context.Context, project, holder string, wait time.Duration, fn func(ctx context.Context) error) error {
	_, err := store.BriefLeases{Leases: s.deps.Leases, Server: s.deps.ServerID, TTL: s.cfg.LeaseTTL, Now: s.now, Log: s.log}.
		Run(ctx, project, holder, wait, fn)
	return err
}
