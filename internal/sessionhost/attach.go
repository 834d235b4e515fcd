package sessionhost

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/coder/websocket"
	"github.com/docker/docker/api/types/container"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

// attachPoll is how often attach looks for the run's container while its
// host still makes it (pulls or builds its image).
const attachPoll = 200 * time.Millisecond

// attach gives a terminal's run (contract.Run.TTY) its operator's terminal:
// it waits for the run's container (made by the agent, not started), attaches
// to it, starts it, and then passes bytes both ways as exec does until the
// command ends (its exit code is sent) or the operator goes (the command's
// stdin then ends, and the run goes on to its end, which its record shows).
// Attaching before the start is what `docker run -it` does: no output is
// written before someone reads it. Only a container labelled as this host's
// and the run's, made with a terminal and never started, is attached to: a
// run's terminal is given once.
func (r *Runner) attach(ctx context.Context, conn *websocket.Conn, req contract.AttachRequest) error {
	id, err := r.awaitRunContainer(ctx, req)
	if err != nil {
		return err
	}
	hr, err := r.cfg.Docker.ContainerAttach(ctx, id, container.AttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return refuse(CodeFailed, "attach: %v", err)
	}
	defer hr.Close()
	resize := func(w, h uint) {
		if err := r.cfg.Docker.ContainerResize(ctx, id, container.ResizeOptions{Width: w, Height: h}); err != nil {
			r.log.Debug("attach resize", zap.Error(err))
		}
	}
	if err := r.cfg.Docker.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		return refuse(CodeFailed, "start run %s: %v", req.Run, err)
	}
	if req.Width > 0 && req.Height > 0 {
		resize(req.Width, req.Height)
	}
	if err := writeControl(ctx, conn, contract.ExecControl{Started: true, Container: id}); err != nil {
		return err
	}
	output := make(chan error, 1)
	go func() { output <- copyOutput(ctx, conn, hr.Reader, true) }()
	input := make(chan error, 1)
	go func() { input <- r.input(ctx, conn, resize, hr.Conn, hr.CloseWrite) }()
	select {
	case <-output:
		code, err := r.containerExit(ctx, id)
		if err != nil {
			return refuse(CodeFailed, "run %s: %v", req.Run, err)
		}
		return writeControl(ctx, conn, contract.ExecControl{Exit: &code})
	case err := <-input:
		// The operator left: the command's stdin ends with this attach
		// (StdinOnce); the run's end is recorded as any run's.
		return err
	}
}

// awaitRunContainer returns the ID of the run's container once its host has
// made it, or refuses the session if it cannot be attached to.
func (r *Runner) awaitRunContainer(ctx context.Context, req contract.AttachRequest) (string, error) {
	if req.Run == "" || req.Egg == "" {
		return "", refuse(CodeFailed, "attach: the run and its egg must be named")
	}
	for {
		found, err := r.listOwned(ctx, contract.LogsRequest{Project: req.Project, Egg: req.Egg, Run: req.Run}, false)
		if err != nil {
			return "", refuse(CodeFailed, "list containers: %v", err)
		}
		id, err := attachable(found, r.cfg.HostID, req)
		if err != nil {
			return "", refuse(CodeNoContainer, "%v", err)
		}
		if id != "" {
			ins, err := r.cfg.Docker.ContainerInspect(ctx, id)
			if err != nil {
				return "", refuse(CodeFailed, "inspect run %s: %v", req.Run, err)
			}
			if ins.Config == nil || !ins.Config.Tty || !ins.Config.OpenStdin {
				return "", refuse(CodeNoContainer, "run %s was not made with a terminal (hatch run -it)", req.Run)
			}
			if onNetworks(ins) {
				return id, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(attachPoll):
		}
	}
}

// attachable picks, of the containers listed, the run's one to attach to:
// its ID, "" while it is not made yet, or an error for one that started
// already (its terminal was given, or it is not a terminal's run). Pure.
func attachable(found []container.Summary, hostID string, req contract.AttachRequest) (string, error) {
	for _, c := range found {
		if !containers.Owned(c.Labels, hostID) || c.Labels[containers.LabelRun] != req.Run || c.Labels[containers.LabelEgg] != req.Egg {
			continue
		}
		if c.State != container.StateCreated {
			return "", fmt.Errorf("run %s started already (%s): its terminal is given once", req.Run, c.State)
		}
		return c.ID, nil
	}
	return "", nil
}

// onNetworks reports whether the container is on every network its labels
// list (containers.LabelNetworks): its host has finished making it. Pure.
func onNetworks(ins container.InspectResponse) bool {
	want := ins.Config.Labels[containers.LabelNetworks]
	if want == "" {
		return true
	}
	for _, n := range strings.Split(want, ",") {
		if ins.NetworkSettings == nil || ins.NetworkSettings.Networks[n] == nil {
			return false
		}
	}
	return true
}

// containerExit waits (briefly) for the container to be over, its output
// having ended, and returns its exit code.
func (r *Runner) containerExit(ctx context.Context, id string) (int, error) {
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, errs := r.cfg.Docker.ContainerWait(wctx, id, container.WaitConditionNotRunning)
	select {
	case w := <-res:
		if w.Error != nil && w.Error.Message != "" {
			return 0, errors.New(w.Error.Message)
		}
		return int(w.StatusCode), nil
	case err := <-errs:
		return 0, fmt.Errorf("wait for its end: %w", err)
	}
}
