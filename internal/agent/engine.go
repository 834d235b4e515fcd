package agent

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/contract"
)

// A frozen Docker Engine once went unseen: its calls hang (a converge
// waits out ConvergeTimeout), the heartbeat goes on sending the last
// report, and the control plane showed the host up and its eggs done while
// a replica lay dead under it. The agent probes the engine on a goroutine
// of its own with a short deadline, and every report says whether it
// answers (contract.StatusReport.Engine).

// enginePinger is a Docker client that can ask its engine whether it
// answers (docker.Engine).
type enginePinger interface {
	Ping(ctx context.Context) error
}

// engineWatch is what the agent knows of its engine: nil while it answers.
type engineWatch struct {
	mu      sync.Mutex // guards problem
	problem *contract.EngineProblem
}

// current returns the engine's problem, nil if it answers.
func (w *engineWatch) current() *contract.EngineProblem {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.problem == nil {
		return nil
	}
	p := *w.problem
	return &p
}

// observe records a probe sent at sent that failed with err (nil: it
// answered), and reports whether the engine's state changed. An engine
// failing since an earlier probe keeps its first Since.
func (w *engineWatch) observe(sent time.Time, err error) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case err == nil && w.problem != nil:
		w.problem = nil
		return true
	case err != nil && w.problem == nil:
		w.problem = &contract.EngineProblem{Since: sent, Reason: err.Error()}
		return true
	case err != nil:
		w.problem.Reason = err.Error()
	}
	return false
}

// watchEngine probes the engine every EngineProbeInterval, each probe
// bounded by EngineProbeTimeout, until ctx ends. A change is logged and
// reported at once.
func (a *Agent) watchEngine(ctx context.Context, p enginePinger) {
	t := time.NewTicker(a.cfg.EngineProbeInterval)
	defer t.Stop()
	for {
		sent := a.now()
		pctx, cancel := context.WithTimeout(ctx, a.cfg.EngineProbeTimeout)
		err := p.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if a.engine.observe(sent, err) {
			if err != nil {
				a.log.Error("the Docker Engine does not answer: its replicas are reported as not ready until it does",
					zap.Duration("deadline", a.cfg.EngineProbeTimeout), zap.Error(err))
			} else {
				a.log.Info("the Docker Engine answers again")
			}
			a.report.Fire()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
