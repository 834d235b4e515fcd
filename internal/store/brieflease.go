package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"go.uber.org/zap"
)

// BriefLeases runs short changes of a project (a run or a volume task put
// in a desired state, a record or two) under the project's lease, as the
// jobs and volumes services do outside an apply.
type BriefLeases struct {
	Leases Leases
	// Server names this server in the leases; TTL is their term, which
	// a change takes well under: the lease is not renewed.
	Server string
	TTL    time.Duration
	Now    func() time.Time
	Log    *zap.Logger
}

// briefRetry is how often a wait for a locked project tries again.
const briefRetry = 200 * time.Millisecond

// Run runs fn under the project's lease (holder says who holds it: start it
// with BriefHolder), its writes fenced by it besides ctx's own fences (the
// loops' lease, for a loop's work). A project another operation holds (an
// apply) is tried again for up to wait (0: once), and then gives the
// *LockedError. The lease is given back after fn, even after a cancel. It
// returns how long it waited for the lease.
func (b BriefLeases) Run(ctx context.Context, project, holder string, wait time.Duration, fn func(ctx context.Context) error) (time.Duration, error) {
	start := b.Now()
	waited := func() time.Duration { return max(b.Now().Sub(start), 0) }
	deadline := time.Now().Add(wait)
	for {
		now := b.Now()
		held, err := b.Leases.AcquireLease(ctx, Lease{Project: project, Token: newLeaseToken(), Holder: holder,
			Server: b.Server, Since: now, Expires: now.Add(b.TTL)})
		if err == nil {
			defer b.release(ctx, held)
			w := waited()
			return w, fn(WithFence(ctx, Fence{Project: project, Token: held.Token}))
		}
		if !errors.Is(err, ErrLocked) || !time.Now().Add(briefRetry).Before(deadline) {
			return waited(), err
		}
		select {
		case <-ctx.Done():
			return waited(), ctx.Err()
		case <-time.After(briefRetry):
		}
	}
}

// release gives a project's lease back, even after a cancel.
func (b BriefLeases) release(ctx context.Context, held Lease) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := b.Leases.ReleaseLease(ctx, held.Project, held.Token); err != nil {
		b.Log.Warn("project lease not released (it expires by itself)", zap.String("project", held.Project), zap.Error(err))
	}
}

// newLeaseToken returns a lease's token: 16 random hex digits.
func newLeaseToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
