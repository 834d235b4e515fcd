package fleet

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/store"
)

// liveness marks hosts down when their reports stop. Reports mark them up
// (the status handler); this only looks for silence.
type liveness struct {
	store   store.Liveness
	timeout time.Duration
	now     func() time.Time
	log     *zap.Logger
	started time.Time // set by begin
}

// begin marks every host unknown: the server has heard from none of them.
func (l *liveness) begin(ctx context.Context) error {
	l.started = l.now()
	return l.store.MarkAllHostsUnknown(ctx, l.started)
}

// check marks down every host silent for longer than the timeout.
func (l *liveness) check(ctx context.Context) error {
	hosts, err := l.store.ListHosts(ctx)
	if err != nil {
		return err
	}
	now := l.now()
	for _, h := range hosts {
		if !dueDown(h, l.started, now, l.timeout) {
			continue
		}
		changed, err := l.store.MarkHostDown(ctx, h.ID, now.Add(-l.timeout), now)
		if err != nil {
			return err
		}
		if changed {
			l.log.Info("host down", zap.String("host", h.ID), zap.Time("last_seen", h.LastSeen))
		}
	}
	return nil
}

// dueDown reports whether a host has been silent for longer than timeout,
// counting silence from the server's start at the earliest: before that
// nobody was listening.
func dueDown(h store.Host, started, now time.Time, timeout time.Duration) bool {
	if h.State == store.HostDown {
		return false
	}
	since := h.LastSeen
	if since.Before(started) {
		since = started
	}
	return now.Sub(since) > timeout
}
