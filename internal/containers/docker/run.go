package docker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/containers"
)

// StartRun begins creating and starting a run's container (see
// containers.RunRequest), as a task: get the image, create the networks and
// volumes it lacks, write its secret files, create it under the run's name
// (no restart policy, no health check, never in the ingress), start it.
//
// A run starts at most once: a container of the run's name that exists
// already (a restarted agent, or a List that missed the container a moment
// ago) is left as it is, whatever its state, and so is one Docker refuses to
// create for a name conflict. A failure removes the half-made container and
// its secrets, and is kept in Failures (the agent then reports the run
// failed and never asks again).
func (e *Engine) StartRun(ctx context.Context, req containers.RunRequest) error {
	if req.HostID != e.cfg.HostID {
		return fmt.Errorf("start run %s: host %q is not this host (%q)", req.RunID, req.HostID, e.cfg.HostID)
	}
	task := containers.StartRunTask(req, time.Now())
	return e.run(task, func(ctx context.Context) error {
		if err := e.startRun(ctx, req); err != nil {
			return fmt.Errorf("start run %s: %w", req.RunID, err)
		}
		return nil
	})
}

func (e *Engine) startRun(ctx context.Context, req containers.RunRequest) error {
	w, name := req.Spec, req.Name()
	log := e.log.With(zap.String("workload", w.ID()), zap.String("run", req.RunID), zap.String("container", name))
	if exists, err := e.runExists(ctx, name); exists || err != nil {
		return err
	}
	ref, secretFiles, err := e.prepare(ctx, w, name)
	if err != nil {
		return err
	}
	if e.tasks.RunCancelled(req.RunID) {
		log.Info("run stopped before its container was made: never started")
		return e.secrets().remove(name)
	}
	labels := e.labels(containers.RunLabels(e.cfg.HostID, w, req.SpecHash, req.RunID))
	plan := planCreate(containers.StartRequest{Spec: w}, ref, name, labels, secretFiles)
	if req.TTY {
		withTerminal(plan)
	}
	id, err := e.create(ctx, plan)
	if cerrdefs.IsConflict(err) {
		// Created since runExists looked: the secret files written are the
		// same ones, so they stay for that container.
		log.Info("run's container exists already: not started again")
		return nil
	}
	if err != nil {
		e.secrets().remove(name)
		return err
	}
	if req.TTY {
		log.Info("made a terminal's run: its attach session starts it", zap.String("id", short(id)))
		return nil
	}
	cctx, cancel := e.call(ctx)
	defer cancel()
	if err := e.api.ContainerStart(cctx, id, container.StartOptions{}); err != nil {
		e.discard(id, name, log)
		return fmt.Errorf("start container %s: %w", short(id), err)
	}
	log.Info("started run", zap.String("id", short(id)))
	return nil
}

// withTerminal makes a run's container as `docker run -it` does: a
// terminal, and a stdin held open for the one attach that starts it and
// closed when that attach ends (StdinOnce), so a command reading its input
// sees its end when its operator leaves. Its networks are labelled
// (LabelNetworks) for the attach to wait for. Pure.
func withTerminal(p createPlan) {
	cfg := p.config
	cfg.Tty, cfg.OpenStdin, cfg.StdinOnce = true, true, true
	cfg.AttachStdin, cfg.AttachStdout, cfg.AttachStderr = true, true, true
	var nets []string
	if p.network != nil {
		for n := range p.network.EndpointsConfig {
			nets = append(nets, n)
		}
	}
	for _, c := range p.connect {
		nets = append(nets, c.network)
	}
	slices.Sort(nets)
	cfg.Labels[containers.LabelNetworks] = strings.Join(nets, ",")
}

// runExists reports whether a container of the run's name exists. One that
// is not this host's is an error: its name is taken, and it is not ours to
// report or remove.
func (e *Engine) runExists(ctx context.Context, name string) (bool, error) {
	cctx, cancel := e.call(ctx)
	defer cancel()
	c, err := e.api.ContainerInspect(cctx, name)
	switch {
	case cerrdefs.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("inspect %s: %w", name, err)
	case c.Config == nil || !containers.Owned(c.Config.Labels, e.cfg.HostID):
		return false, fmt.Errorf("a container named %s exists and is not this host's: remove it", name)
	}
	e.log.Info("run's container exists already: not started again", zap.String("container", name), zap.String("id", short(c.ID)))
	return true, nil
}

// StopRun begins stopping a run's container and keeps it: its stop signal,
// req.StopTimeout, then a kill. Its exit code and output stay for the run's
// record and `hatch logs --run`; it is removed (Stop) once the run has left
// the desired state.
func (e *Engine) StopRun(ctx context.Context, req containers.StopRequest) error {
	c, err := e.inspectOwned(ctx, "stop run "+req.WorkloadID, req.ID)
	if c == nil {
		return err
	}
	return e.run(containers.Task{Kind: containers.TaskHalt, Container: c.ID}, func(ctx context.Context) error {
		return e.stop(ctx, c.ID, req.StopTimeout)
	})
}

// CancelRun asks a run's start in progress to make no container (see
// containers.Tasks.CancelRun).
func (e *Engine) CancelRun(runID string) { e.tasks.CancelRun(runID) }

// ForgetRun drops the failure of a run's start (see containers.Tasks.ForgetRun).
func (e *Engine) ForgetRun(runID string) { e.tasks.ForgetRun(runID) }
