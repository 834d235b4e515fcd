package agent

import (
	"context"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/containers"
)

// EventSource is Docker's event stream, as the agent uses it. A
// *client.Client of the Docker SDK is one.
type EventSource interface {
	Events(ctx context.Context, options events.ListOptions) (<-chan events.Message, <-chan error)
}

// containerEvent says what a Docker event means to the agent.
type containerEvent int

const (
	eventIgnored containerEvent = iota
	// eventChanged: a container's state or health changed; converge.
	eventChanged
	// eventGone: a container's process ended or the container went away;
	// take it out of the ingress at once, then converge.
	eventGone
)

// classify maps a Docker container event's action to what the agent does.
// Actions are "die", "oom", "destroy", "start", "health_status: healthy"...
func classify(action events.Action) containerEvent {
	a := string(action)
	switch {
	case a == "die" || a == "destroy":
		return eventGone
	case a == "start" || a == "stop" || a == "oom" || strings.HasPrefix(a, "health_status"):
		return eventChanged
	default:
		return eventIgnored
	}
}

// watchEvents follows this host's container events until ctx ends, telling
// onEvent about each one that matters. When the stream drops it reconnects
// with jittered back-off and calls onReconnect, since events may have been
// missed meanwhile.
func watchEvents(ctx context.Context, src EventSource, hostID string, log *zap.Logger,
	onEvent func(containerEvent, string), onReconnect func()) {
	opts := events.ListOptions{Filters: filters.NewArgs(
		filters.Arg("type", string(events.ContainerEventType)),
		filters.Arg("label", containers.LabelManaged+"=true"),
		filters.Arg("label", containers.LabelHost+"="+hostID),
	)}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 200*time.Millisecond, 10*time.Second, 0
	first := true
	for ctx.Err() == nil {
		if !first {
			onReconnect()
		}
		first = false
		began := time.Now()
		err := followEvents(ctx, src, opts, hostID, log, onEvent)
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) > time.Minute {
			b.Reset() // it was a long, healthy connection: reconnect quickly
		}
		wait := b.NextBackOff()
		log.Warn("docker event stream dropped; reconnecting", zap.Error(err), zap.Duration("in", wait))
		if !sleep(ctx, wait) {
			return
		}
	}
}

// followEvents reads one subscription until it fails or ctx ends.
func followEvents(ctx context.Context, src EventSource, opts events.ListOptions, hostID string, log *zap.Logger, onEvent func(containerEvent, string)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the subscription
	msgs, errs := src.Events(ctx, opts)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errs:
			return err
		case m, ok := <-msgs:
			if !ok {
				return nil
			}
			if m.Type != events.ContainerEventType || !containers.Owned(m.Actor.Attributes, hostID) {
				continue // the filter did this already; a second check is cheap
			}
			if kind := classify(m.Action); kind != eventIgnored {
				log.Debug("docker event", zap.String("action", string(m.Action)), zap.String("container", m.Actor.ID))
				onEvent(kind, m.Actor.ID)
			}
		}
	}
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
