package fleet

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/store"
)

// A host whose Docker Engine stopped answering its agent says so in its
// reports (contract.StatusReport.Engine): the host is still up, but its
// containers are the last ones the agent could list. Project status and the
// apply's readiness count none of them as ready, placement gives the host
// no new replica (desired.StoreFleet), and nothing is moved off it unless
// the host is lost as well.

const (
	// EventEngineUnresponsive: a host's Docker Engine stopped answering.
	EventEngineUnresponsive store.EventType = "host.engine_unresponsive"
	// EventEngineAnswers: it answers again.
	EventEngineAnswers store.EventType = "host.engine_answers"
)

// recordEngineChange records an event when the report's engine state
// differs from the previous report's (nil: no previous report).
func (s *Service) recordEngineChange(ctx context.Context, host string, prev *contract.StatusReport, report contract.StatusReport, now time.Time) {
	was := prev != nil && prev.Engine != nil
	e := store.Event{Time: now, Host: host}
	switch {
	case report.Engine != nil && !was:
		e.Type = EventEngineUnresponsive
		e.Message = fmt.Sprintf("the Docker Engine has not answered since %s: %s; its replicas count as not ready",
			report.Engine.Since.UTC().Format(time.RFC3339), report.Engine.Reason)
	case report.Engine == nil && was:
		e.Type = EventEngineAnswers
		e.Message = fmt.Sprintf("the Docker Engine answers again (it had not since %s)", prev.Engine.Since.UTC().Format(time.RFC3339))
	default:
		return
	}
	if _, err := s.deps.Events.AppendEvent(context.WithoutCancel(ctx), e); err != nil {
		s.log.Warn("engine event not recorded", zap.String("host", host), zap.Error(err))
	}
}

// recordFence records host.fenced when a report tells of a fence the
// previous report did not: the host stopped its failover eggs while no
// server answered it, and starts them again now that one does.
func (s *Service) recordFence(ctx context.Context, host string, prev *contract.StatusReport, report contract.StatusReport, now time.Time) {
	if report.FencedAt.IsZero() || prev != nil && prev.FencedAt.Equal(report.FencedAt) {
		return
	}
	e := store.Event{Time: now, Host: host, Type: store.EventHostFenced,
		Message: fmt.Sprintf("host %s stopped its eggs whose volume fails over at %s: no status report of its was answered for fence_after; they start again now that one is, unless their volume failed over meanwhile",
			host, report.FencedAt.UTC().Format(time.RFC3339))}
	if _, err := s.deps.Events.AppendEvent(context.WithoutCancel(ctx), e); err != nil {
		s.log.Warn("fence event not recorded", zap.String("host", host), zap.Error(err))
	}
}
