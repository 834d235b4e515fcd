package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/termsafe"
)

func newRunCmd() *cobra.Command {
	var (
		flags                projectFlags
		host                 string
		detach, keep, stopIt bool
		interactive, tty     bool
		timeout              time.Duration
	)
	cmd := &cobra.Command{
		Use:   "run PROJECT EGG [--host H] [--detach] [--keep] [--stop] [--timeout D] [-it] [-- CMD ARGS...]",
		Short: "Run a command in a new container of an egg, print its output, return its exit code",
		Long: "Run a command (else the egg's own) in a new container made from the egg's current spec:\n" +
			"its image or build, env, secrets, volumes, networks and the names it reaches other eggs\n" +
			"by, on a host that may run it (a stateful egg's: the host of its volume). Its output is\n" +
			"shown as it comes and its exit code is this command's. Ctrl-C stops the run and waits\n" +
			"for its end (a second Ctrl-C leaves at once, the run still stopping). The container is\n" +
			"removed after, unless --keep (then `hatch logs PROJECT EGG --run ID` shows its output).\n" +
			"A stateful egg that runs is refused (a second container on its volume) unless --stop:\n" +
			"its replica stops for the run and starts again after. --detach prints the run's ID and\n" +
			"returns; `hatch runs PROJECT` lists the runs. -it gives the command your terminal, as\n" +
			"`hatch exec -it` does (raw mode, window resizes, Ctrl-C and Ctrl-D go to the command):\n" +
			"its container starts once your terminal is attached, so no output is missed.",
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dash := cmd.ArgsLenAtDash(); (dash == -1 && len(args) != 2) || (dash != -1 && dash != 2) {
				return errors.New("give the project, the egg, then -- and the command: hatch run demo web -- ./migrate up")
			}
			if err := checkName("project", args[0]); err != nil {
				return err
			}
			if err := checkName("egg", args[1]); err != nil {
				return err
			}
			req := api.RunRequest{Command: args[2:], Host: host, Keep: keep, Stop: stopIt, TTY: tty}
			x := execIO{in: cmd.InOrStdin(), out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr()}
			attach := url.Values{}
			if err := checkRunTerminal(interactive, tty, detach); err != nil {
				return err
			}
			if tty {
				if err := x.terminal(attach); err != nil {
					return fmt.Errorf("%w: drop -it to run it without one", err)
				}
			}
			if cmd.Flags().Changed("timeout") {
				if timeout <= 0 {
					return fmt.Errorf("--timeout %v: give a positive duration (for example 30m)", timeout)
				}
				req.Timeout = timeout.String()
			}
			return flags.run(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				// The run is started whatever happens to ctx meanwhile: a
				// Ctrl-C then stops it rather than leaving it unknown.
				startCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), apiTimeout)
				run, err := c.Runs().Start(startCtx, flags.namespace, args[0], args[1], req)
				cancel()
				if err != nil {
					return err
				}
				if detach {
					_, err := fmt.Fprintln(cmd.OutOrStdout(), run.ID)
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "run %s of %s on host %s\n", run.ID, args[1], termsafe.Line(runHost(run)))
				f := &runFollower{runs: c.Runs(), sessions: c.Sessions(), ns: flags.namespace, project: args[0],
					out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr(), grace: runOutputGrace, wait: runWait}
				if tty {
					return f.attach(ctx, run, x, attach)
				}
				return f.follow(ctx, run)
			})
		},
	}
	flags.register(cmd)
	f := cmd.Flags()
	f.StringVar(&host, "host", "", "run it on this host (its name or ID; default: one that may run the egg)")
	f.BoolVarP(&detach, "detach", "d", false, "print the run's ID and return at once")
	f.BoolVar(&keep, "keep", false, "keep the container after the run (its output stays readable with hatch logs --run)")
	f.BoolVar(&stopIt, "stop", false, "on a stateful egg that runs: stop its replica for the run, start it again after")
	f.BoolVarP(&interactive, "interactive", "i", false, "pass stdin to the command (with -t: hatch run -it)")
	f.BoolVarP(&tty, "tty", "t", false, "give the command a terminal (with -i; needs one here)")
	f.DurationVar(&timeout, "timeout", 0, "stop the run past this long (default: none, or the egg's schedule's)")
	return cmd
}

// checkRunTerminal refuses the terminal flags hatch run cannot honour: -i
// and -t go together (a run's input is its terminal's), and a detached
// run has no one to attach.
func checkRunTerminal(interactive, tty, detach bool) error {
	switch {
	case interactive != tty:
		return errors.New("-i and -t go together on hatch run (hatch run -it PROJECT EGG -- CMD): its input is its terminal's")
	case tty && detach:
		return errors.New("-it and --detach: a detached run has no terminal; drop one of them")
	}
	return nil
}

// attach gives a terminal's run (-it) this terminal, as hatch exec -it
// does: its host starts it once attached. The exit code is the command's
// as its host saw it; a run that ends without being attached (it could not
// start) ends as runEnd says. An attach refused leaves no run waiting: the
// run is stopped.
func (f *runFollower) attach(ctx context.Context, run api.Run, x execIO, q url.Values) error {
	bg := context.WithoutCancel(ctx)
	conn, err := f.sessions.Attach(ctx, f.ns, f.project, run.ID, q)
	if err != nil {
		stopCtx, cancel := context.WithTimeout(bg, apiTimeout)
		defer cancel()
		if _, serr := f.runs.Stop(stopCtx, f.ns, f.project, run.ID); serr != nil {
			return fmt.Errorf("attach to run %s: %w (and it could not be stopped: %v)", run.ID, err, serr)
		}
		return fmt.Errorf("attach to run %s: %w (the run is stopped)", run.ID, err)
	}
	defer conn.CloseNow()
	session := make(chan error, 1)
	go func() { session <- runExec(ctx, conn, x, true, true) }()
	ended := make(chan api.Run, 1)
	waitCtx, stopWait := context.WithCancel(bg)
	defer stopWait()
	go func() {
		if r, err := f.waitEnd(waitCtx, run); err == nil {
			ended <- r
		}
	}()
	select {
	case err := <-session:
		return err
	case r := <-ended:
		// Its end is recorded: its exit code, if it ran, comes on the
		// stream first; one that never started has none.
		select {
		case err := <-session:
			return err
		case <-time.After(f.grace):
			// The terminal is restored once the session has let it go.
			conn.CloseNow()
			<-session
			return runEnd(r, false)
		}
	}
}

func runHost(r api.Run) string {
	if r.HostName != "" {
		return r.HostName
	}
	if r.Host != "" {
		return r.Host
	}
	return "(not placed yet)"
}

const (
	// runOutputGrace is how long after a run's end its output may still
	// come: its container's stream ends before its host reports the end,
	// so this is only waited when the stream was never found. The control
	// plane keeps the container as long (jobs' OutputGrace).
	runOutputGrace = 5 * time.Second
	// runWait is each long-poll of the run's state.
	runWait = 20 * time.Second
)

// runFollower shows a run's output and returns its end as the command's.
type runFollower struct {
	runs        *client.Runs
	sessions    *client.Sessions
	ns, project string
	out, errOut io.Writer
	grace, wait time.Duration
}

// follow streams the run's output (its container's logs session, from
// its first line; the session ends with the container) while it waits
// for the run's recorded end, and returns that end (runEnd). ctx ending
// (Ctrl-C) asks the server to stop the run, once, and the wait goes on
// under a context of its own until the end is recorded.
func (f *runFollower) follow(ctx context.Context, run api.Run) error {
	bg := context.WithoutCancel(ctx)
	logsCtx, stopLogs := context.WithCancel(bg)
	defer stopLogs()
	logsDone := make(chan struct{})
	go func() {
		defer close(logsDone)
		f.printOutput(logsCtx, run)
	}()
	ended := make(chan api.Run, 1)
	failed := make(chan error, 1)
	go func() {
		r, err := f.waitEnd(bg, run)
		if err != nil {
			failed <- err
			return
		}
		ended <- r
	}()
	interrupted := false
	interrupt := ctx.Done()
	for {
		select {
		case <-interrupt:
			interrupt, interrupted = nil, true
			fmt.Fprintf(f.errOut, "stopping run %s (Ctrl-C again to leave it stopping)\n", run.ID)
			stopCtx, cancel := context.WithTimeout(bg, apiTimeout)
			_, err := f.runs.Stop(stopCtx, f.ns, f.project, run.ID)
			cancel()
			if err != nil {
				return fmt.Errorf("stop run %s: %w", run.ID, err)
			}
		case err := <-failed:
			return err
		case r := <-ended:
			// The output ends before the end is recorded; a stream that
			// never found the container (it failed to start) is not
			// waited for long.
			select {
			case <-logsDone:
			case <-time.After(f.grace):
			}
			return runEnd(r, interrupted)
		}
	}
}

// printOutput prints the run's output lines as they come: stdout's on
// out, stderr's on errOut, control characters shown, never acted on.
func (f *runFollower) printOutput(ctx context.Context, run api.Run) {
	q := url.Values{"egg": {run.Egg}, "run": {run.ID}, "follow": {"1"}}
	conn, err := f.sessions.Logs(ctx, f.ns, f.project, q)
	if err != nil {
		if ctx.Err() == nil {
			fmt.Fprintf(f.errOut, "hatch: the run's output cannot be shown: %v\n", termsafe.Text(err.Error()))
		}
		return
	}
	defer conn.CloseNow()
	conn.SetReadLimit(1 << 20)
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			return
		}
		var r contract.LogRecord
		switch {
		case json.Unmarshal(data, &r) != nil:
			continue
		case r.Event != "":
			// The server's word on the stream (its host could not be
			// read), not the command's output.
			fmt.Fprintf(f.errOut, "hatch: the run's output: %s\n", termsafe.Line(r.Event+": "+r.Line))
			continue
		}
		w := f.out
		if r.Stream == "stderr" {
			w = f.errOut
		}
		fmt.Fprintln(w, termsafe.Line(r.Line))
	}
}

// waitEnd long-polls the run until its state is an end.
func (f *runFollower) waitEnd(ctx context.Context, run api.Run) (api.Run, error) {
	for !run.Ended() {
		next, err := f.runs.Wait(ctx, f.ns, f.project, run.ID, run.State, f.wait)
		if err != nil {
			return run, fmt.Errorf("wait for run %s: %w", run.ID, err)
		}
		run = next
	}
	return run, nil
}

// runEnd is a run's end as the command's: its exit code (an exit code of
// 0 is success), 130 for a run stopped at Ctrl-C, 124 past its timeout
// (as timeout(1)), 125 for one that never started (as docker run), and an
// error saying why for every end that is not the command's own.
func runEnd(r api.Run, interrupted bool) error {
	switch r.State {
	case string(contract.RunExited):
		if r.ExitCode == 0 {
			return nil
		}
		return &exitError{code: r.ExitCode}
	case string(contract.RunStopped):
		if interrupted {
			return &exitError{code: 130}
		}
		return &exitError{code: 1, err: fmt.Errorf("run %s was stopped before its end (hatch run's Ctrl-C or its schedule's concurrency: replace)", r.ID)}
	case string(contract.RunTimedOut):
		return &exitError{code: 124, err: fmt.Errorf("run %s was stopped past its timeout", r.ID)}
	case string(contract.RunFailed):
		return &exitError{code: 125, err: fmt.Errorf("run %s could not start: %s", r.ID, r.Error)}
	case api.RunLost:
		return &exitError{code: 1, err: fmt.Errorf("run %s was lost with its host %s: its end is unknown, and it is not run again", r.ID, runHost(r))}
	}
	return &exitError{code: 1, err: fmt.Errorf("run %s ended as %q", r.ID, r.State)}
}
