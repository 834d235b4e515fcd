package agent

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/converge"
)

// keepCache writes the desired state to the cache unless the cache holds it
// already. A write that fails is retried by the next converge (the loop
// wakes for it): a cache left stale would be converged to at the next start.
// The error is logged when writing starts failing and when it works again;
// meanwhile it is in every status report.
func (a *Agent) keepCache(d contract.DesiredState, generation int64, now time.Time) error {
	if d.Version == a.cachedVersion {
		return nil
	}
	if err := a.cache.Save(d, now, generation); err != nil {
		if !a.cacheFailing {
			a.log.Error("cannot cache the desired state; retrying", zap.Error(err),
				zap.String("version", d.Version), zap.Duration("retry_every", a.cfg.CacheRetryInterval))
			a.cacheFailing = true
		}
		return fmt.Errorf("%w (retrying every %s; until it works, a restart would converge to version %q)",
			err, a.cfg.CacheRetryInterval, cmp.Or(a.cachedVersion, "none"))
	}
	if a.cacheFailing {
		a.log.Info("desired state cached again", zap.String("version", d.Version))
		a.cacheFailing = false
	}
	a.cachedVersion, a.cacheWritten = d.Version, now
	return nil
}

// desiredAndHold returns the desired state to converge towards, if any,
// whether it is the cache's (the control plane has not answered: containers
// of a later generation are left alone, see converge.HoldNewer) and, when
// it is and StaleCacheWait has not passed since Start, when the cache was
// written: containers created after that are left alone too (see
// converge.Hold; for containers of older agents, which carry no
// generation). All are read under one lock: read apart,
// a poll answered between the two reads lifted the hold of a converge
// towards the cache's state (seen: a stateful replica newer than the cache
// replaced at a restart, then replaced again by the next converge).
func (a *Agent) desiredAndHold(now time.Time) (d contract.DesiredState, known bool, holdSince time.Time, fromCache bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.desired == nil {
		return contract.DesiredState{}, false, time.Time{}, false
	}
	if !a.heard && now.Before(a.holdUntil) {
		holdSince = a.cacheWritten
	}
	return *a.desired, true, holdSince, !a.heard
}

func (a *Agent) holdEnd() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.holdUntil
}

// stampFor returns the stamp of the desired state version: the current one
// if it is that version's, else a new generation, above the last one and
// above every container's (listed first if they have not been since Start:
// a container may carry a generation the cache never recorded).
func (a *Agent) stampFor(ctx context.Context, version string) (containers.StateStamp, error) {
	if version == a.stamp.Version {
		return a.stamp, nil
	}
	if !a.listed {
		actual, err := a.cfg.Docker.List(ctx)
		if err != nil {
			return containers.StateStamp{}, fmt.Errorf("list containers for the generation of version %s: %w", version, err)
		}
		a.noteGenerations(actual)
	}
	a.stamp = containers.StateStamp{Version: version, Generation: max(a.stamp.Generation, a.topGeneration) + 1}
	return a.stamp, nil
}

// noteGenerations records the highest generation on the containers.
func (a *Agent) noteGenerations(actual []containers.Container) {
	a.listed = true
	for _, c := range actual {
		a.topGeneration = max(a.topGeneration, c.Stamp.Generation)
	}
}

// noteNewer turns a plan held back from containers newer than the cached
// state into an error for the status report (the host's problem, in `hatch
// hosts`), logged when the hold begins and when it ends. The hold lasts
// until the control plane answers, however long: only it knows the state
// those containers were made for.
func (a *Agent) noteNewer(plan converge.Plan, stamp containers.StateStamp) error {
	if len(plan.Newer) == 0 {
		if a.holdingNewer {
			a.log.Info("no container is newer than the desired state any more; converging", zap.String("version", stamp.Version))
			a.holdingNewer = false
		}
		return nil
	}
	top := plan.Newer[0]
	for _, c := range plan.Newer {
		if c.Stamp.Generation > top.Stamp.Generation {
			top = c
		}
	}
	if !a.holdingNewer {
		a.log.Warn("the cached desired state is older than the containers running: holding every change until the control plane answers",
			zap.String("cached_version", stamp.Version), zap.Int64("cached_generation", stamp.Generation),
			zap.String("newer_version", top.Stamp.Version), zap.Int64("newer_generation", top.Stamp.Generation),
			zap.Int("newer_containers", len(plan.Newer)), zap.Strings("held", stepStrings(plan.Held)))
		a.holdingNewer = true
	}
	return fmt.Errorf("desired-state cache holds version %s (generation %d), older than %d containers created for version %s (generation %d) (its write failed?): holding %d changes until the control plane answers; restarts in place go on",
		stamp.Version, stamp.Generation, len(plan.Newer), top.Stamp.Version, top.Stamp.Generation, len(plan.Held))
}

func stepStrings(steps []converge.Step) []string {
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = s.String()
	}
	return out
}
