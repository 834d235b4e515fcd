package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/converge"
)

// buildReport assembles the status report from what a converge saw: each
// container's state, health, restarts and crash loop (converge.Status), the
// log tail of the failed rollout on its workload's containers, and the
// errors. Pure; the log tails of crashed containers are added after.
func buildReport(desired contract.DesiredState, actual []containers.Container, mem *memory, errs []string, now time.Time) contract.StatusReport {
	r := contract.StatusReport{HostID: desired.HostID, Version: desired.Version, Time: now, Errors: errs}
	for _, c := range converge.Status(desired, actual, mem.History, now) {
		if c.WorkloadID == "" {
			// The control plane refuses a report with such an entry; the
			// converge removes the container, and the errors say why.
			r.Errors = append(r.Errors, fmt.Sprintf("container %s has no %s label: left out of the report, and removed by the converge",
				c.ContainerID, containers.LabelWorkload))
			continue
		}
		r.Containers = append(r.Containers, c)
	}
	for i := range r.Containers {
		c := &r.Containers[i]
		if c.RolloutFailure != "" {
			if fl, ok := mem.FailureLogs[c.WorkloadID]; ok {
				c.LogTail = fl.Lines
			}
		}
	}
	return r
}

// wantsLogTail reports whether a container's log belongs in the report: it
// crashed, or it is crash-looping.
func wantsLogTail(s contract.ContainerStatus) bool {
	return s.ContainerID != "" && (s.State == contract.StateCrashed || !s.CrashLoopUntil.IsZero())
}

// errorLines splits joined errors into one line each, for the report.
func errorLines(errs ...error) []string {
	var out []string
	for _, err := range errs {
		if err == nil {
			continue
		}
		for line := range strings.SplitSeq(err.Error(), "\n") {
			if line = strings.TrimSpace(line); line != "" {
				out = append(out, line)
			}
		}
	}
	return out
}

// taskErrors formats the Docker adapter's failed tasks (a pull or build that
// failed, a stop that did not happen), oldest first.
func taskErrors(fs []containers.TaskFailure) []string {
	slices.SortFunc(fs, func(a, b containers.TaskFailure) int { return a.At.Compare(b.At) })
	out := make([]string, 0, len(fs))
	for _, f := range fs {
		out = append(out, fmt.Sprintf("%s: %v", f.Task, f.Err))
	}
	return out
}

// logKeeper is the Docker client the agent hands to Converge: it passes every
// call through, and keeps the last log lines of each container it is asked
// to stop, read just before the stop. A failed replacement is stopped and
// removed by the converge that gives up on it; these lines are all that is
// left of it for the status report.
type logKeeper struct {
	containers.Client
	logs  containers.LogReader // nil: the client cannot read logs
	lines int

	mu     sync.Mutex          // guards byID
	byID   map[string][]string // since the last take
	budget time.Duration
}

func newLogKeeper(c containers.Client, lines int) *logKeeper {
	k := &logKeeper{Client: c, lines: lines, byID: map[string][]string{}, budget: 5 * time.Second}
	k.logs, _ = c.(containers.LogReader)
	return k
}

// Stop reads the container's last lines, then asks for the stop.
func (k *logKeeper) Stop(ctx context.Context, req containers.StopRequest) error {
	if k.logs != nil && req.ID != "" {
		lctx, cancel := context.WithTimeout(ctx, k.budget)
		lines, err := k.logs.Logs(lctx, req.ID, k.lines)
		cancel()
		if err == nil {
			k.mu.Lock()
			k.byID[req.ID] = lines
			k.mu.Unlock()
		}
	}
	return k.Client.Stop(ctx, req)
}

// take returns the lines kept since the last take, and forgets them.
func (k *logKeeper) take() map[string][]string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := k.byID
	k.byID = map[string][]string{}
	return out
}

// tail reads a container's last lines now; nil if it cannot.
func (k *logKeeper) tail(ctx context.Context, id string) []string {
	if k.logs == nil || id == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, k.budget)
	defer cancel()
	lines, err := k.logs.Logs(ctx, id, k.lines)
	if err != nil {
		return nil
	}
	return lines
}

// failureContainer returns the container a plan's failure is about: the one
// of the failed spec hash that the plan stops or restarts.
func failureContainer(plan converge.Plan, f converge.Failure) string {
	for _, s := range plan.Steps {
		if s.WorkloadID == f.WorkloadID && s.SpecHash == f.SpecHash && s.ContainerID != "" &&
			(s.Action == converge.ActionStop || s.Action == converge.ActionRestart) {
			return s.ContainerID
		}
	}
	return ""
}

// crashLog is the log tail of one crash of a container, told apart from the
// next by the end of its back-off (which moves with every crash).
type crashLog struct {
	until time.Time
	lines []string
}

// noteFailures keeps, for each rollout the plan gave up on, the last log
// lines of its failing container, and forgets those of rollouts the history
// no longer counts as failed (the spec changed since).
func (a *Agent) noteFailures(ctx context.Context, plan converge.Plan) {
	stopped := a.docker.take()
	for _, f := range plan.Failures {
		id := failureContainer(plan, f)
		lines, ok := stopped[id]
		if !ok {
			lines = a.docker.tail(ctx, id)
		}
		a.mem.FailureLogs[f.WorkloadID] = failureLog{SpecHash: f.SpecHash, ContainerID: id, Lines: lines}
		a.log.Warn("rollout failed", zap.String("workload", f.WorkloadID), zap.String("spec", f.SpecHash),
			zap.String("reason", f.Reason), zap.String("container", id))
	}
	for id, fl := range a.mem.FailureLogs {
		if f, ok := a.mem.History.FailedRollouts[id]; !ok || f.SpecHash != fl.SpecHash {
			delete(a.mem.FailureLogs, id)
		}
	}
}

// attachCrashLogs adds the log tail of crashed and crash-looping containers,
// read once per exit.
func (a *Agent) attachCrashLogs(ctx context.Context, r *contract.StatusReport) {
	live := make(map[string]bool, len(r.Containers))
	for i := range r.Containers {
		c := &r.Containers[i]
		live[c.ContainerID] = true
		if c.LogTail != nil || !wantsLogTail(*c) {
			continue
		}
		cl, ok := a.crashLogs[c.ContainerID]
		if !ok || !cl.until.Equal(c.CrashLoopUntil) {
			cl = crashLog{until: c.CrashLoopUntil, lines: a.docker.tail(ctx, c.ContainerID)}
			a.crashLogs[c.ContainerID] = cl
		}
		c.LogTail = cl.lines
	}
	for id := range a.crashLogs {
		if !live[id] {
			delete(a.crashLogs, id)
		}
	}
}

// setErrorStatus records a converge that failed before it could see the
// containers: the last report's containers stay, with the new errors.
func (a *Agent) setErrorStatus(errs ...error) {
	a.mu.Lock()
	r := contract.StatusReport{HostID: a.cfg.HostID, Time: a.now(), Capacity: a.cfg.Capacity, MeshAddresses: a.cfg.MeshAddresses,
		NoExec: a.cfg.NoExec}
	if a.status != nil {
		r = *a.status
	}
	r.Errors = errorLines(errs...)
	a.status = &r
	a.mu.Unlock()
	a.report.Fire()
}
