package docker

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

// Stop begins stopping and removing a container (see containers.Client): its
// stop signal (set at create: API 1.41 cannot send another per call), up to
// req.StopTimeout, then a kill, then removal with its secret files. A
// container already gone is not an error; a foreign one is containers.ErrNotFound.
func (e *Engine) Stop(ctx context.Context, req containers.StopRequest) error {
	c, err := e.inspectOwned(ctx, "stop "+describe(req.WorkloadID, req.Slot), req.ID)
	if c == nil {
		return err
	}
	return e.run(containers.Task{Kind: containers.TaskStop, Container: c.ID}, func(ctx context.Context) error {
		e.leaveTraffic(c.ID)
		return e.stopAndRemove(ctx, c.ID, req.StopTimeout)
	})
}

// Drain begins the graceful removal of a container that may be serving: out
// of the ingress, a wait until its requests in flight finished or
// req.DrainTimeout passed (default 10s), then the stop of Stop. The
// connections still open then (a client's keep-alive HTTP connection through
// a published port, a WebSocket) stay open through the stop signal, so that
// the application closes each one cleanly as it shuts down; the ingress
// lets go of them (Gone) only once the container has stopped. Without an
// ingress nothing can be in flight through it, so the stop comes at once.
func (e *Engine) Drain(ctx context.Context, req containers.StopRequest) error {
	c, err := e.inspectOwned(ctx, "drain "+describe(req.WorkloadID, req.Slot), req.ID)
	if c == nil {
		return err
	}
	return e.run(containers.Task{Kind: containers.TaskDrain, Container: c.ID}, func(ctx context.Context) error {
		e.drainRunning(ctx, c, req.WorkloadID, req.Slot, req.DrainTimeout)
		defer e.leaveTraffic(c.ID) // also when the stop failed: the agent retries it, out of traffic
		return e.stopAndRemove(ctx, c.ID, req.StopTimeout)
	})
}

// drainRunning takes a running container out of the ingress and waits until
// its requests in flight finished or timeout passed (the default when zero).
func (e *Engine) drainRunning(ctx context.Context, c *container.InspectResponse, workload string, slot int, timeout time.Duration) {
	if c.State == nil || !c.State.Running {
		return
	}
	if timeout <= 0 {
		timeout = contract.DefaultDrainTimeout
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	err := e.cfg.Ingress.Drain(dctx, c.ID)
	cancel()
	if err != nil && ctx.Err() == nil {
		e.log.Info("drain timeout reached, stopping with requests in flight",
			zap.String("workload", workload), zap.Int("slot", slot), zap.Duration("drain_timeout", timeout))
	}
}

// Restart begins restarting a container in place (same ID and
// configuration): drained out of the ingress if it runs (a container
// restarted for failed checks may still be serving), stopped as Stop does,
// started again. It does nothing if the container started after
// req.StartedAt.
func (e *Engine) Restart(ctx context.Context, req containers.RestartRequest) error {
	what := describe(req.WorkloadID, req.Slot)
	c, err := e.inspectOwned(ctx, "restart "+what, req.ID)
	if c == nil {
		return err
	}
	if c.State != nil && parseTime(c.State.StartedAt).After(req.StartedAt) {
		return nil // someone restarted it since the caller looked
	}
	return e.run(containers.Task{Kind: containers.TaskRestart, Container: c.ID}, func(ctx context.Context) error {
		e.drainRunning(ctx, c, req.WorkloadID, req.Slot, req.DrainTimeout)
		e.mon.forget(c.ID)
		err := e.stop(ctx, c.ID, req.StopTimeout)
		// Once stopped, as for Drain: what was still open had the stop
		// signal to close it. Out of traffic also when the stop failed.
		e.leaveTraffic(c.ID)
		if err != nil {
			return fmt.Errorf("restart %s: %w", what, err)
		}
		w, _ := e.workload(containers.FromLabels(c.ID, "", c.Config.Labels).WorkloadID)
		if err := e.startCreated(ctx, c.ID, w); err != nil {
			return fmt.Errorf("restart %s: %w", what, err)
		}
		e.log.Info("restarted container", zap.String("workload", req.WorkloadID), zap.Int("slot", req.Slot), zap.String("id", short(c.ID)))
		return nil
	})
}

// leaveTraffic tells the ingress that the container stops serving.
func (e *Engine) leaveTraffic(id string) { e.cfg.Ingress.Gone(id) }

// stop sends the container's stop signal and kills it after timeout (the
// container's own stop timeout when zero). A stopped or vanished container is
// not an error.
func (e *Engine) stop(ctx context.Context, id string, timeout time.Duration) error {
	opts := container.StopOptions{}
	wait := contract.DefaultStopTimeout
	if timeout > 0 {
		opts.Timeout = ceilSeconds(timeout)
		wait = timeout
	}
	// The call lasts up to the stop timeout, plus the kill and the bookkeeping.
	cctx, cancel := context.WithTimeout(ctx, wait+e.cfg.CallTimeout)
	defer cancel()
	if err := e.api.ContainerStop(cctx, id, opts); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("stop container %s: %w", short(id), err)
	}
	return nil
}

// stopAndRemove stops the container, removes it and its secret files, and
// stops probing it.
func (e *Engine) stopAndRemove(ctx context.Context, id string, timeout time.Duration) error {
	e.mon.forget(id)
	name := ""
	ictx, cancel := e.call(ctx)
	if c, err := e.api.ContainerInspect(ictx, id); err == nil {
		name = trimSlash(c.Name)
	}
	cancel()
	if err := e.stop(ctx, id, timeout); err != nil {
		return err
	}
	cctx, cancel := e.call(ctx)
	defer cancel()
	// RemoveVolumes removes anonymous volumes only; named ones stay.
	if err := e.api.ContainerRemove(cctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove container %s: %w", short(id), err)
	}
	return e.secrets().remove(name)
}

// Logs returns the last lines of the container's output (stdout and stderr
// interleaved as Docker kept them), oldest first.
func (e *Engine) Logs(ctx context.Context, id string, lines int) ([]string, error) {
	c, err := e.inspectOwned(ctx, "logs", id)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, fmt.Errorf("logs %s: %w", short(id), containers.ErrNotFound)
	}
	cctx, cancel := e.call(ctx)
	defer cancel()
	rc, err := e.api.ContainerLogs(cctx, c.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: strconv.Itoa(lines)})
	if err != nil {
		return nil, fmt.Errorf("logs %s: %w", short(id), err)
	}
	defer rc.Close()
	var r io.Reader = rc
	if !c.Config.Tty {
		// Without a TTY Docker multiplexes stdout and stderr in frames.
		pr, pw := io.Pipe()
		go func() { _, err := stdcopy.StdCopy(pw, pw, rc); pw.CloseWithError(err) }()
		defer pr.Close()
		r = pr
	}
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		out = append(out, strings.TrimRight(sc.Text(), "\r"))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("logs %s: %w", short(id), err)
	}
	if len(out) > lines {
		out = out[len(out)-lines:]
	}
	return out, nil
}

func describe(workloadID string, slot int) string {
	return workloadID + "/" + strconv.Itoa(slot)
}
