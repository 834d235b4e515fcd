package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/coder/websocket"
	"github.com/moby/term"
	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/contract"
)

func newExecCmd() *cobra.Command {
	var (
		flags            projectFlags
		interactive, tty bool
		host             string
	)
	cmd := &cobra.Command{
		Use:   "exec PROJECT EGG[/SLOT] [--host H] [-i] [-t] -- CMD ARGS...",
		Short: "Run a command in a running replica, on whichever host runs it",
		Long: "Run a command in a replica of the egg (slot SLOT, else the lowest running), wherever it\n" +
			"runs: the host's agent runs it and streams it back through the control plane. Slots\n" +
			"are numbered per host, as `hatch logs` shows them (web/0 a): --host picks the host. -i\n" +
			"passes your input, -t gives it a terminal (raw mode, window resizes, Ctrl-C and Ctrl-D\n" +
			"go to the command, as with docker exec -it). The command's exit code is this one's.\n" +
			"Admin tokens only; the event log records who ran which program where (not its\n" +
			"arguments, nor the input).",
		Args: cobra.MinimumNArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			if dash != 2 {
				return errors.New("give the project, the egg, then -- and the command: hatch exec demo web -- sh")
			}
			if err := checkName("project", args[0]); err != nil {
				return err
			}
			egg, slot, err := splitEggSlot(args[1])
			if err != nil {
				return err
			}
			q := url.Values{"cmd": args[2:]}
			if slot >= 0 {
				q.Set("slot", strconv.Itoa(slot))
			}
			if cmd.Flags().Changed("host") {
				if host == "" {
					return errors.New("--host: name a host (its name or ID, as `hatch hosts` lists them)")
				}
				q.Set("host", host)
			}
			io := execIO{in: cmd.InOrStdin(), out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr()}
			if tty {
				if err := io.terminal(q); err != nil {
					return fmt.Errorf("%w: drop -t to run it without one", err)
				}
				q.Set("tty", "1")
			}
			if interactive {
				q.Set("stdin", "1")
			}
			return flags.run(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				conn, err := c.Sessions().Exec(ctx, flags.namespace, args[0], egg, q)
				if err != nil {
					return err
				}
				defer conn.CloseNow()
				return runExec(ctx, conn, io, interactive, tty)
			})
		},
	}
	flags.register(cmd)
	cmd.Flags().BoolVarP(&interactive, "interactive", "i", false, "pass stdin to the command")
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "give the command a terminal (needs one here)")
	cmd.Flags().StringVar(&host, "host", "", "run it in a replica on this host (name or ID)")
	return cmd
}

// execIO is where an exec's bytes come from and go.
type execIO struct {
	in          io.Reader
	out, errOut io.Writer
	fd          uintptr // the terminal's, with -t
}

// terminal takes stdin's terminal for the session, and puts its size in
// the query (width, height); it fails if stdin is not a terminal.
func (x *execIO) terminal(q url.Values) error {
	f, ok := x.in.(*os.File)
	if !ok || !term.IsTerminal(f.Fd()) {
		return errors.New("-t needs a terminal on stdin")
	}
	x.fd = f.Fd()
	if ws, err := term.GetWinsize(x.fd); err == nil {
		q.Set("width", strconv.Itoa(int(ws.Width)))
		q.Set("height", strconv.Itoa(int(ws.Height)))
	}
	return nil
}

// runExec passes the stream's bytes to stdout and stderr, stdin's to the
// stream, and the terminal's size on every SIGWINCH; it returns the
// command's exit code as an *exitError (nil for 0).
func runExec(ctx context.Context, conn *websocket.Conn, x execIO, interactive, tty bool) error {
	conn.SetReadLimit(1 << 20)
	if tty {
		state, err := term.SetRawTerminal(x.fd)
		if err != nil {
			return fmt.Errorf("raw mode: %w", err)
		}
		defer func() { _ = term.RestoreTerminal(x.fd, state) }()
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for {
				select {
				case <-winch:
					if ws, err := term.GetWinsize(x.fd); err == nil {
						_ = sendControl(ctx, conn, contract.ExecControl{Width: uint(ws.Width), Height: uint(ws.Height)})
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	if interactive {
		go pumpStdin(ctx, conn, x.in)
	}
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			if err := streamEnd(ctx, err); err != nil {
				return err
			}
			return errors.New("the command's host ended the session without an exit code")
		}
		if typ == websocket.MessageBinary {
			if _, err := x.out.Write(data); err != nil {
				return err
			}
			continue
		}
		var c contract.ExecControl
		if json.Unmarshal(data, &c) != nil {
			continue
		}
		if len(c.Stderr) > 0 {
			_, _ = x.errOut.Write(c.Stderr)
		}
		if c.Exit != nil {
			_ = conn.Close(websocket.StatusNormalClosure, "")
			if *c.Exit == 0 {
				return nil
			}
			return &exitError{code: *c.Exit}
		}
	}
}

// pumpStdin sends what stdin gives as binary messages, then the end of it.
func pumpStdin(ctx context.Context, conn *websocket.Conn, in io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			if conn.Write(ctx, websocket.MessageBinary, buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			_ = sendControl(ctx, conn, contract.ExecControl{CloseStdin: true})
			return
		}
	}
}

func sendControl(ctx context.Context, conn *websocket.Conn, c contract.ExecControl) error {
	data, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return conn.Write(ctx, websocket.MessageText, data)
}
