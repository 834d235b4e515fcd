package agent

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// heartbeat sends the latest status report every HeartbeatInterval, and at
// once after each converge, from the first converge (or failed attempt) on. It runs on its own goroutine so that a slow
// control plane never holds up a converge, and a long converge never
// silences the heartbeat.
func (a *Agent) heartbeat(ctx context.Context) {
	t := time.NewTicker(a.cfg.HeartbeatInterval)
	defer t.Stop()
	failing := false
	server := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.report.C():
		}
		r, ok := a.Status()
		if !ok {
			// Nothing seen yet: an empty report would tell the control plane
			// that nothing runs here. The first converge comes at once.
			continue
		}
		r.Time = a.now()
		a.tasks.overlay(&r)
		r.Engine = a.engine.current()
		r.FencedAt = a.fence.fencedSince()
		rctx, cancel := context.WithTimeout(ctx, max(a.cfg.HeartbeatInterval, 5*time.Second))
		err := a.cfg.ControlPlane.ReportStatus(rctx, r)
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case a.checkTrust(err):
			// A configuration error, not an outage: checkTrust logs it.
		case err != nil && !failing:
			a.log.Warn("cannot report status", zap.Error(err))
			failing = true
		case err == nil && failing:
			a.log.Info("status reported again")
			failing = false
			a.reachable.Fire()
		}
		if err == nil {
			server = a.noteServer(server)
			// The fence counts from when the answered report was sent, not
			// answered: the server heard it no earlier, and its failover
			// counts from the last report it heard (docs/BACKUPS.md). The
			// lease first: a converge this answer wakes may start fenced
			// containers, which an old lapsed lease would stop.
			a.renewFenceLease(r.Time)
			if a.fence.reported(r.Time, a.fenceAfter()) {
				a.changes.Fire()
			}
		}
	}
}

// fenceAfter is the desired state's FenceAfter (0 with none).
func (a *Agent) fenceAfter() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.desired == nil {
		return 0
	}
	return a.desired.FenceAfter
}

// serverNamer is a control plane client that knows several servers and
// says which one it talks to now (HTTPClient).
type serverNamer interface {
	Server() string
}

// noteServer logs a move to another of the control plane's servers (the
// one it talked to stopped answering); last is the server of the last
// report, and it returns the current one.
func (a *Agent) noteServer(last string) string {
	n, ok := a.cfg.ControlPlane.(serverNamer)
	if !ok {
		return last
	}
	now := n.Server()
	if last != "" && now != last {
		a.log.Info("now talking to another server of the control plane", zap.String("server", now), zap.String("was", last))
	}
	return now
}
