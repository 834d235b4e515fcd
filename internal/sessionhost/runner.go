// Package sessionhost serves, on a host, the sessions the control plane
// offers it: `hatch logs` (the output of a project's containers, following
// new replicas as a roll starts them) and `hatch exec` (a command run in one
// container). The agent learns of each on a long-poll of its own, apart from
// the desired state, on every server of the control plane (a session waits
// on the server its operator reached), and opens an outbound WebSocket to the
// server that offered it; the control plane never connects to a host.
//
// Only containers labelled as Hatchery's and this host's are read or run in.
// Engine API 1.41 has no call to stop an exec, so a session that ends before
// its command does (the operator went away, the agent stops) kills the
// command's process, by the PID the exec's inspect gives, and leaves nothing
// behind.
package sessionhost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/contract"
)

// Servers is the control plane as sessions see it: several servers, each
// offering its own operators' sessions (an operator's stream waits on the
// server it reached), so the runner polls every one and opens each stream
// on the server that offered it.
type Servers interface {
	// SessionServers returns the URLs of the servers to poll now.
	SessionServers() []string
	// At returns one server's offers.
	At(server string) (Offers, error)
}

// Offers is one server's sessions for this host.
type Offers interface {
	// SessionOffers long-polls the sessions offered to this host.
	SessionOffers(ctx context.Context, wait time.Duration) ([]contract.SessionOffer, error)
	// OpenSession opens this host's stream for a session.
	OpenSession(ctx context.Context, id string) (*websocket.Conn, error)
}

// Docker is what sessions use of the Docker Engine API.
type Docker interface {
	ContainerList(ctx context.Context, options container.ListOptions) ([]container.Summary, error)
	ContainerLogs(ctx context.Context, id string, options container.LogsOptions) (io.ReadCloser, error)
	ContainerExecCreate(ctx context.Context, id string, options container.ExecOptions) (container.ExecCreateResponse, error)
	ContainerExecAttach(ctx context.Context, execID string, options container.ExecAttachOptions) (types.HijackedResponse, error)
	ContainerExecResize(ctx context.Context, execID string, options container.ResizeOptions) error
	ContainerExecInspect(ctx context.Context, execID string) (container.ExecInspect, error)
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
	ContainerAttach(ctx context.Context, id string, options container.AttachOptions) (types.HijackedResponse, error)
	ContainerResize(ctx context.Context, id string, options container.ResizeOptions) error
	ContainerStart(ctx context.Context, id string, options container.StartOptions) error
	ContainerWait(ctx context.Context, id string, condition container.WaitCondition) (<-chan container.WaitResponse, <-chan error)
}

// Close codes an agent ends a session's stream with, besides the normal one;
// the operator's CLI shows their reason.
const (
	// CodeExecOff: this host's agent runs with --no-exec.
	CodeExecOff websocket.StatusCode = 4403
	// CodeNoContainer: no running container of the egg's slot here.
	CodeNoContainer websocket.StatusCode = 4404
	// CodeFailed: Docker refused what the session asked.
	CodeFailed websocket.StatusCode = 4500
)

// Config is what a Runner needs.
type Config struct {
	HostID  string
	Servers Servers
	Docker  Docker
	// NoExec refuses every exec session (`hatch agent --no-exec`).
	NoExec bool
	// Kill ends a process of the host by PID: syscall.Kill with SIGKILL.
	Kill   func(pid int) error
	Logger *zap.Logger
	// Wait is the long-poll's wait.
	Wait time.Duration
	// Recheck is how often the list of servers to poll is read again
	// (default 2 s).
	Recheck time.Duration
}

// KillProcess kills a host process with SIGKILL.
func KillProcess(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

// Validate names what is missing.
func (c Config) Validate() error {
	if c.HostID == "" || c.Servers == nil || c.Docker == nil || c.Kill == nil || c.Logger == nil || c.Wait <= 0 || c.Recheck < 0 {
		return errors.New("sessionhost: host ID, servers, Docker, kill, logger and a positive wait are all needed")
	}
	return nil
}

// Runner polls for sessions and serves each on a goroutine it owns.
type Runner struct {
	cfg    Config
	log    *zap.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a runner; nothing runs until Start.
func New(cfg Config) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Recheck == 0 {
		cfg.Recheck = 2 * time.Second
	}
	return &Runner{cfg: cfg, log: cfg.Logger.With(zap.String("component", "sessions"))}, nil
}

// Start launches the long-polls: one per server of the control plane.
func (r *Runner) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.pollEvery(ctx)
	}()
}

// pollEvery keeps one long-poll on each server SessionServers names,
// reading the list again every Recheck: a server that joins is polled, one
// that left is not (its sessions being served go on to their end).
func (r *Runner) pollEvery(ctx context.Context) {
	polls := map[string]context.CancelFunc{}
	defer func() {
		for _, stop := range polls {
			stop()
		}
	}()
	t := time.NewTicker(r.cfg.Recheck)
	defer t.Stop()
	for {
		want := r.cfg.Servers.SessionServers()
		for server, stop := range polls {
			if !slices.Contains(want, server) {
				stop()
				delete(polls, server)
			}
		}
		for _, server := range want {
			if _, ok := polls[server]; ok {
				continue
			}
			offers, err := r.cfg.Servers.At(server)
			if err != nil {
				r.log.Warn("sessions of a server not polled", zap.String("server", server), zap.Error(err))
				continue
			}
			pollCtx, stop := context.WithCancel(ctx)
			polls[server] = stop
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				r.poll(pollCtx, ctx, offers)
				if c, ok := offers.(interface{ Close() }); ok {
					c.Close() // its idle connections; streams in use go on
				}
			}()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Close ends every session (their commands killed) and waits for them, or
// for ctx.
func (r *Runner) Close(ctx context.Context) error {
	if r.cancel == nil {
		return nil
	}
	r.cancel()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sessions did not end: %w", ctx.Err())
	}
}

// poll asks one server for offers until ctx ends, backing off on errors;
// the sessions it is offered live until life ends.
func (r *Runner) poll(ctx, life context.Context, from Offers) {
	backoff := 500 * time.Millisecond
	for ctx.Err() == nil {
		offers, err := from.SessionOffers(ctx, r.cfg.Wait)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.log.Debug("session offers", zap.Error(err))
			select {
			case <-time.After(backoff/2 + rand.N(backoff/2)):
			case <-ctx.Done():
				return
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = 500 * time.Millisecond
		for _, o := range offers {
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				r.serve(life, from, o)
			}()
		}
	}
}

// serve opens the session's stream and runs it.
func (r *Runner) serve(ctx context.Context, from Offers, o contract.SessionOffer) {
	log := r.log.With(zap.String("kind", string(o.Kind)), zap.String("actor", o.Actor))
	dialCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := from.OpenSession(dialCtx, o.ID)
	cancel()
	if err != nil {
		log.Warn("session stream not opened", zap.Error(err))
		return
	}
	defer conn.CloseNow()
	conn.SetReadLimit(64 << 10)
	switch {
	case o.Kind == contract.SessionLogs && o.Logs != nil:
		err = r.logs(ctx, conn, *o.Logs)
	case o.Kind == contract.SessionExec && o.Exec != nil && r.cfg.NoExec:
		_ = conn.Close(CodeExecOff, "exec is turned off on this host (hatch agent --no-exec)")
		return
	case o.Kind == contract.SessionExec && o.Exec != nil:
		log.Info("exec", zap.String("egg", o.Exec.Egg), zap.Int("slot", o.Exec.Slot), zap.String("program", o.Exec.Cmd[0]),
			zap.Int("args", len(o.Exec.Cmd)-1))
		err = r.exec(ctx, conn, *o.Exec)
	case o.Kind == contract.SessionAttach && o.Attach != nil && r.cfg.NoExec:
		_ = conn.Close(CodeExecOff, "runs are turned off on this host (hatch agent --no-exec)")
		return
	case o.Kind == contract.SessionAttach && o.Attach != nil:
		log.Info("attach", zap.String("egg", o.Attach.Egg), zap.String("run", o.Attach.Run))
		err = r.attach(ctx, conn, *o.Attach)
	default:
		_ = conn.Close(websocket.StatusUnsupportedData, fmt.Sprintf("this agent does not serve %q sessions", o.Kind))
		return
	}
	var ce *closeError
	switch {
	case errors.As(err, &ce):
		_ = conn.Close(ce.code, ce.reason)
	case err != nil && ctx.Err() != nil:
		_ = conn.Close(websocket.StatusGoingAway, "the host's agent is stopping")
	case err != nil:
		log.Debug("session ended", zap.Error(err))
	default:
		_ = conn.Close(websocket.StatusNormalClosure, "")
	}
}

// closeError ends a session's stream with a code and a reason the operator
// sees.
type closeError struct {
	code   websocket.StatusCode
	reason string
}

func (e *closeError) Error() string { return e.reason }

func refuse(code websocket.StatusCode, format string, args ...any) error {
	reason := fmt.Sprintf(format, args...)
	if len(reason) > 120 {
		reason = reason[:120]
	}
	return &closeError{code, reason}
}
