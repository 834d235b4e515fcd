package agent

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/containers/fake"
)

// freezable is the fake engine with a Ping that hangs, as a SIGSTOPped
// engine's does, while frozen is set.
type freezable struct {
	*fake.Fake
	frozen atomic.Bool
}

func (f *freezable) Ping(ctx context.Context) error {
	if f.frozen.Load() {
		<-ctx.Done()
		return fmt.Errorf("ping the Docker Engine: %w", ctx.Err())
	}
	return nil
}

// A frozen engine is reported within a probe's deadline of the first probe
// it fails, with the time it stopped answering; the report goes back to
// saying nothing once it answers again.
func TestAFrozenEngineIsReportedUnresponsiveUntilItAnswers(t *testing.T) {
	f, cp, dir := &freezable{Fake: newFake(t)}, newFakeControlPlane(), t.TempDir()
	cp.set(desiredState(web(1)))
	cfg := testConfig(t, f, cp, dir)
	cfg.EngineProbeInterval, cfg.EngineProbeTimeout = 20*time.Millisecond, 50*time.Millisecond
	startAgent(t, cfg)
	eventually(t, "a report of an engine that answers", func() error {
		if r, n := cp.lastReport(); n == 0 || r.Engine != nil || len(r.Containers) != 1 {
			return fmt.Errorf("last report %+v", r)
		}
		return nil
	})

	frozenAt := time.Now()
	f.frozen.Store(true)
	eventually(t, "a report of an unresponsive engine", func() error {
		r, _ := cp.lastReport()
		if r.Engine == nil {
			return errors.New("the report says nothing of the engine")
		}
		if r.Engine.Since.Before(frozenAt.Add(-cfg.EngineProbeInterval)) || r.Engine.Reason == "" {
			return fmt.Errorf("engine problem %+v, want one since about %v with a reason", r.Engine, frozenAt)
		}
		return nil
	})

	f.frozen.Store(false)
	eventually(t, "a report of an engine that answers again", func() error {
		if r, _ := cp.lastReport(); r.Engine != nil {
			return fmt.Errorf("engine problem %+v after it answered", r.Engine)
		}
		return nil
	})
}

func TestEngineWatchKeepsTheFirstFailuresTime(t *testing.T) {
	var w engineWatch
	t0 := time.Unix(1_700_000_000, 0)
	if w.observe(t0, nil) || w.current() != nil {
		t.Fatal("an engine that answers changed state")
	}
	if !w.observe(t0, context.DeadlineExceeded) {
		t.Fatal("the first failed probe changed nothing")
	}
	if w.observe(t0.Add(2*time.Second), errors.New("still nothing")) {
		t.Fatal("a second failed probe counted as a change")
	}
	if p := w.current(); p == nil || !p.Since.Equal(t0) || p.Reason != "still nothing" {
		t.Fatalf("problem %+v, want since t0 with the last reason", p)
	}
	if !w.observe(t0.Add(4*time.Second), nil) || w.current() != nil {
		t.Fatal("an answer did not clear the problem")
	}
}
