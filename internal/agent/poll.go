package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/contract"
)

// poll long-polls the desired state until ctx ends. A new version is cached
// and converged towards; errors are retried with jittered exponential
// back-off, logged when the control plane becomes unreachable and again when
// it is back. A status report that goes through ends the back-off at once:
// after an outage, an apply must not wait up to PollRetryMax to arrive.
func (a *Agent) poll(ctx context.Context) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = a.cfg.PollRetryMin, a.cfg.PollRetryMax, 0
	b.RandomizationFactor = 0.5
	failing := false
	for ctx.Err() == nil {
		version := ""
		if d, ok := a.Desired(); ok {
			version = d.Version
		}
		// The first poll does not wait: until the control plane answers,
		// the agent holds back from containers newer than its cache.
		wait := a.cfg.PollWait
		if !a.hasHeard() {
			wait = 0
		}
		began := time.Now()
		d, err := a.cfg.ControlPlane.DesiredState(ctx, version, wait)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = a.accept(d, version)
		}
		untrusted := a.checkTrust(err)
		switch {
		case err == nil || errors.Is(err, ErrNotModified):
			a.setHeard()
			if failing {
				a.log.Info("control plane reachable again")
				failing = false
			}
			b.Reset()
			// A server that answers "unchanged" at once, again and again,
			// must not make the agent spin.
			if (err != nil || d.Version == version) && time.Since(began) < a.cfg.PollRetryMin {
				sleep(ctx, b.NextBackOff())
			}
		default:
			wait := b.NextBackOff()
			if untrusted {
				// A configuration error, not an outage: checkTrust logs it.
			} else if !failing {
				a.log.Warn("cannot get the desired state; containers keep running, converging from the cache",
					zap.Error(err), zap.Duration("retry_in", wait))
				failing = true
			} else {
				a.log.Debug("desired state poll failed", zap.Error(err), zap.Duration("retry_in", wait))
			}
			// A report that went through since the last poll (even before
			// this failure) ends the wait: at worst one poll too many.
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
			case <-timer.C:
			case <-a.reachable.C():
			}
			timer.Stop()
		}
	}
}

// accept takes a desired state from the control plane: a new version is
// converged towards at once (the converge caches it first).
func (a *Agent) accept(d contract.DesiredState, held string) error {
	if d.HostID != a.cfg.HostID {
		return fmt.Errorf("desired state for host %q, but this is host %q", d.HostID, a.cfg.HostID)
	}
	if d.Version == "" && (len(d.Workloads) > 0 || len(d.Volumes) > 0) {
		d.Seal() // a server that sent no version: the content's hash is one
	}
	if d.Version == held {
		// Unchanged; or, with nothing held, the empty state (version "") of
		// a host the control plane has never given anything: an agent that
		// holds nothing stays hands-off rather than converging to nothing.
		return nil
	}
	// The loop caches it before converging towards it (and retries a
	// failed write).
	a.mu.Lock()
	a.desired = &d
	a.heard = true // the control plane's own: nothing is held back from it
	a.mu.Unlock()
	a.log.Info("new desired state", zap.String("version", d.Version), zap.Int("workloads", len(d.Workloads)))
	a.changes.Fire()
	return nil
}

// hasHeard reports whether the control plane has answered a poll.
func (a *Agent) hasHeard() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.heard
}

// setHeard records that the control plane answered; the first time, with
// a desired state held, a converge follows, which no longer holds anything
// back.
func (a *Agent) setHeard() {
	a.mu.Lock()
	first := !a.heard && a.desired != nil
	a.heard = true
	a.mu.Unlock()
	if first {
		a.changes.Fire()
	}
}
