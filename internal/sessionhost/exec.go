package sessionhost

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"time"

	"github.com/coder/websocket"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/contract"
)

// exec runs the request's command in the egg's slot on this host and
// passes its bytes both ways until it exits (its code is sent, then the
// stream closes) or the operator goes (its process is killed).
func (r *Runner) exec(ctx context.Context, conn *websocket.Conn, req contract.ExecRequest) error {
	found, err := r.list(ctx, contract.LogsRequest{Project: req.Project, Egg: req.Egg, Slot: req.Slot}, true)
	if err != nil {
		return refuse(CodeFailed, "list containers: %v", err)
	}
	if len(found) == 0 {
		return refuse(CodeNoContainer, "no running container of %s/%d on host %s", req.Egg, req.Slot, r.cfg.HostID)
	}
	target := found[0]
	created, err := r.cfg.Docker.ContainerExecCreate(ctx, target.id, container.ExecOptions{Cmd: req.Cmd, Tty: req.TTY,
		AttachStdin: req.Stdin, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return refuse(CodeFailed, "exec: %v", err)
	}
	hr, err := r.cfg.Docker.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{Tty: req.TTY})
	if err != nil {
		return refuse(CodeFailed, "exec: %v", err)
	}
	defer hr.Close()
	// From here the command may run: whatever ends the session first, it
	// leaves no process behind.
	defer r.killExec(created.ID)
	if req.TTY && req.Width > 0 && req.Height > 0 {
		r.resize(ctx, created.ID, req.Width, req.Height)
	}
	if err := writeControl(ctx, conn, contract.ExecControl{Started: true, Container: target.id}); err != nil {
		return err
	}
	output := make(chan error, 1)
	go func() { output <- copyOutput(ctx, conn, hr.Reader, req.TTY) }()
	input := make(chan error, 1)
	resize := func(w, h uint) { r.resize(ctx, created.ID, w, h) }
	go func() { input <- r.input(ctx, conn, resize, hr.Conn, hr.CloseWrite) }()
	select {
	case <-output:
		// The command closed its output: it ended (or closed both streams,
		// and then its process is killed on the way out all the same).
		code, err := r.exitCode(ctx, created.ID)
		if err != nil {
			return refuse(CodeFailed, "exec inspect: %v", err)
		}
		return writeControl(ctx, conn, contract.ExecControl{Exit: &code})
	case err := <-input:
		// The operator's stream ended first (Ctrl-C, a killed CLI, the
		// server gone): the deferred kill ends the command.
		return err
	}
}

// copyOutput passes a command's output to the operator until it ends: a
// terminal's as binary messages, else stdout's so and stderr's as
// ExecControl.Stderr.
func copyOutput(ctx context.Context, conn *websocket.Conn, from io.Reader, tty bool) error {
	out := &binaryWriter{ctx: ctx, conn: conn}
	if tty {
		_, err := io.Copy(out, from)
		return err
	}
	_, err := stdcopy.StdCopy(out, &stderrWriter{ctx: ctx, conn: conn}, from)
	return err
}

// input passes the operator's messages to the command: bytes to its stdin,
// resizes to its terminal, the end of input to its stdin's end.
func (r *Runner) input(ctx context.Context, conn *websocket.Conn, resize func(w, h uint), stdin io.Writer, closeStdin func() error) error {
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			return err
		}
		if typ == websocket.MessageBinary {
			if _, err := stdin.Write(data); err != nil {
				return nil // stdin closed: the command may still be writing
			}
			continue
		}
		var c contract.ExecControl
		if json.Unmarshal(data, &c) != nil {
			continue
		}
		if c.Width > 0 && c.Height > 0 {
			resize(c.Width, c.Height)
		}
		if c.CloseStdin {
			_ = closeStdin()
		}
	}
}

func (r *Runner) resize(ctx context.Context, execID string, w, h uint) {
	if err := r.cfg.Docker.ContainerExecResize(ctx, execID, container.ResizeOptions{Width: w, Height: h}); err != nil {
		r.log.Debug("exec resize", zap.Error(err))
	}
}

// exitCode waits (briefly) for the exec to be over and returns its code.
func (r *Runner) exitCode(ctx context.Context, execID string) (int, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		ins, err := r.cfg.Docker.ContainerExecInspect(ctx, execID)
		if err != nil {
			return 0, err
		}
		if !ins.Running {
			return ins.ExitCode, nil
		}
		if time.Now().After(deadline) {
			return 0, errors.New("the command closed its output but still runs")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// killExec kills the exec's process if it still runs: the Engine API (1.41)
// has no call to stop an exec, so its PID, as the exec's inspect gives it,
// is killed on the host.
func (r *Runner) killExec(execID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ins, err := r.cfg.Docker.ContainerExecInspect(ctx, execID)
	if err != nil || !ins.Running || ins.Pid <= 0 {
		return
	}
	if err := r.cfg.Kill(ins.Pid); err != nil {
		r.log.Warn("exec's process not killed", zap.Int("pid", ins.Pid), zap.Error(err))
		return
	}
	r.log.Info("exec's process killed: its session ended first", zap.Int("pid", ins.Pid))
}

func writeControl(ctx context.Context, conn *websocket.Conn, c contract.ExecControl) error {
	data, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return conn.Write(ctx, websocket.MessageText, data)
}

// binaryWriter sends what it is given as binary messages (stdout).
type binaryWriter struct {
	ctx  context.Context
	conn *websocket.Conn
}

func (w *binaryWriter) Write(p []byte) (int, error) {
	for off := 0; off < len(p); off += 32 << 10 {
		if err := w.conn.Write(w.ctx, websocket.MessageBinary, p[off:min(len(p), off+32<<10)]); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// stderrWriter sends what it is given as ExecControl.Stderr messages.
type stderrWriter struct {
	ctx  context.Context
	conn *websocket.Conn
}

func (w *stderrWriter) Write(p []byte) (int, error) {
	for off := 0; off < len(p); off += 16 << 10 {
		if err := writeControl(w.ctx, w.conn, contract.ExecControl{Stderr: p[off:min(len(p), off+16<<10)]}); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}
