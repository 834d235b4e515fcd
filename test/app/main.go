// Command app is the test application of Hatchery's end-to-end tests: a tiny
// HTTP server, built with CGO_ENABLED=0 and packaged FROM scratch by
// internal/testutil/dockertest, whose behaviour is chosen by environment
// variables (see Config), so one image plays every part a scenario needs: a
// healthy service, a slow starter, a crasher, a service that turns unhealthy,
// a one-shot job, a stateful counter on a volume, a TCP echo backend.
//
// Endpoints: GET /healthz, GET /version, POST /hit (count one request in
// APP_COUNT_FILE, answer the count), GET /count, GET /env/{name},
// GET and PUT /file?path=, GET /whoami, GET /dns/{name}.
//
// `app -check` probes the app's own /healthz once, exiting 0 on a 2xx or 3xx
// answer: a Docker HEALTHCHECK command for an image without a shell. `app
// -append FILE=LINE`, `app -fail MSG` and `app -wait-for FILE` are commands
// to exec in a running container (a backup's hooks): one leaves a trace,
// one refuses, one holds until the test lets it go.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run is the whole program; it returns the exit status.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("app", flag.ContinueOnError)
	flags.SetOutput(stderr)
	checkMode := flags.Bool("check", false, "probe http://127.0.0.1:$APP_PORT/healthz once; exit 0 on 2xx/3xx (a Docker HEALTHCHECK)")
	checkURL := flags.String("check-url", "", "the URL -check probes instead of the app's own /healthz")
	promptMode := flags.Bool("prompt", false, "an interactive program for `hatch exec -it` (see prompt)")
	sleepMode := flags.Bool("sleep", false, "print \"sleeping\" and sleep until killed, deaf to stdin's end and to signals")
	exitCode := flags.Int("exit", -1, "run once as the one-shot job (APP_JOB=1) exiting with this code: `hatch run`'s command")
	appendLine := flags.String("append", "", "FILE=LINE: append LINE to FILE and exit (a backup hook that leaves a trace)")
	fail := flags.String("fail", "", "print this to stderr and exit 3 (a backup hook that refuses)")
	waitFor := flags.String("wait-for", "", "wait until this file exists (at most 5 minutes), then exit 0 (a backup hook a test holds)")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if *appendLine != "" {
		return appendTo(*appendLine, stdout, stderr)
	}
	if *waitFor != "" {
		return waitForFile(*waitFor, stdout, stderr)
	}
	if *fail != "" {
		fmt.Fprintln(stderr, *fail)
		return 3
	}
	if *promptMode {
		return prompt(os.Stdin, stdout)
	}
	if *sleepMode {
		signal.Ignore(stopSignals...)
		fmt.Fprintln(stdout, "sleeping")
		for { // not select{}: with no other goroutine the runtime calls that a deadlock
			time.Sleep(time.Hour)
		}
	}
	cfg, err := ConfigFromEnv(getenv)
	if err != nil {
		fmt.Fprintln(stderr, "app:", err)
		return 2
	}
	if *exitCode >= 0 {
		cfg.Job, cfg.JobExit = true, *exitCode
	}
	if *checkMode {
		url := *checkURL
		if url == "" {
			url = fmt.Sprintf("http://127.0.0.1:%d/healthz", cfg.Port)
		}
		if err := check(ctx, url, 5*time.Second); err != nil {
			fmt.Fprintln(stderr, "app: check:", err)
			return 1
		}
		return 0
	}
	logger := log.New(stdout, "app: ", log.LstdFlags|log.Lmicroseconds)
	ctx, stop := stopOnSignal(ctx, cfg.IgnoreStop, logger)
	defer stop()
	if cfg.Escape {
		// What a hostile container may write: a terminal would clear the
		// screen and set the clipboard (OSC 52) if shown as is.
		fmt.Fprintf(stdout, "escape \x1b[2J\x1b]52;c;aGk=\x07 end\n")
	}
	if cfg.Tick > 0 {
		go tick(ctx, cfg, stdout)
	}
	return serve(ctx, cfg, getenv, logger, nil)
}

// appendTo appends LINE to FILE, given as FILE=LINE.
func appendTo(arg string, stdout, stderr io.Writer) int {
	file, line, ok := strings.Cut(arg, "=")
	if !ok || file == "" {
		fmt.Fprintf(stderr, "app: -append %q: want FILE=LINE\n", arg)
		return 2
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err == nil {
		_, err = fmt.Fprintln(f, line)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "app: -append:", err)
		return 1
	}
	fmt.Fprintf(stdout, "appended %q to %s\n", line, file)
	return 0
}

// waitForFile polls for file until it exists, for at most 5 minutes.
func waitForFile(file string, stdout, stderr io.Writer) int {
	for end := time.Now().Add(5 * time.Minute); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(file); err == nil {
			fmt.Fprintf(stdout, "%s is there\n", file)
			return 0
		}
	}
	fmt.Fprintf(stderr, "app: -wait-for: %s did not appear in 5 minutes\n", file)
	return 1
}

// stopSignals are the signals the app treats as "stop": any of them may be a
// workload's stop_signal. The app logs the one it got, so a test can tell
// which signal a stop delivered.
var stopSignals = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2}

// stopOnSignal returns a context cancelled by the first stop signal, or one
// that no signal cancels when ignore is set (only SIGKILL ends the app then).
func stopOnSignal(ctx context.Context, ignore bool, logger *log.Logger) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, stopSignals...)
	go func() {
		for {
			select {
			case s := <-ch:
				if ignore {
					logger.Printf("received %s, ignoring it (APP_IGNORE_STOP)", signalName(s))
					continue
				}
				logger.Printf("received %s, shutting down", signalName(s))
				cancel()
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return ctx, func() { signal.Stop(ch); cancel() }
}

func signalName(s os.Signal) string {
	names := map[os.Signal]string{
		syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT", syscall.SIGHUP: "SIGHUP",
		syscall.SIGUSR1: "SIGUSR1", syscall.SIGUSR2: "SIGUSR2",
	}
	if n, ok := names[s]; ok {
		return n
	}
	return s.String()
}

// serve runs the app until ctx is done (exit 0), APP_CRASH_AFTER passes
// (exit 1) or, for a job, at once. listening, if not nil, is told the
// addresses once the listeners are open (tests use port 0).
func serve(ctx context.Context, cfg Config, getenv func(string) string, logger *log.Logger, listening func(http, echo net.Addr)) int {
	logger.Printf("starting version=%q", cfg.Version)
	if cfg.Job {
		return runJob(cfg, logger)
	}
	if cfg.BootDelay > 0 {
		logger.Printf("booting for %s", cfg.BootDelay)
		select {
		case <-time.After(cfg.BootDelay):
		case <-ctx.Done():
			return 0
		}
	}
	ln, err := net.Listen("tcp", fmt.Sprintf(":%d", cfg.Port))
	if err != nil {
		logger.Printf("listen: %v", err)
		return 1
	}
	srv := &http.Server{Handler: newApp(cfg, time.Now, getenv).routes(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	var echoAddr net.Addr
	echoDone := make(chan error, 1)
	echoCtx, stopEcho := context.WithCancel(ctx)
	defer stopEcho()
	if cfg.Echo {
		eln, err := net.Listen("tcp", fmt.Sprintf(":%d", cfg.EchoPort))
		if err != nil {
			srv.Close()
			logger.Printf("listen echo: %v", err)
			return 1
		}
		echoAddr = eln.Addr()
		go func() { echoDone <- serveEcho(echoCtx, eln, logger) }()
	} else {
		echoDone <- nil
	}
	logger.Printf("listening on %s", ln.Addr())
	if listening != nil {
		listening(ln.Addr(), echoAddr)
	}

	var crash <-chan time.Time
	if cfg.CrashAfter > 0 {
		crash = time.After(cfg.CrashAfter)
	}
	select {
	case <-crash:
		logger.Printf("crashing, as APP_CRASH_AFTER=%s asked", cfg.CrashAfter)
		srv.Close()
		stopEcho()
		<-echoDone
		return 1
	case err := <-served:
		logger.Printf("serve: %v", err)
		stopEcho()
		<-echoDone
		return 1
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(shutdownCtx)
	stopEcho()
	if eerr := <-echoDone; err == nil {
		err = eerr
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Printf("shutdown: %v", err)
		return 1
	}
	logger.Printf("stopped")
	return 0
}

// runJob is the one-shot mode: count this run, then exit with APP_JOB_EXIT.
func runJob(cfg Config, logger *log.Logger) int {
	if cfg.CountFile != "" {
		n, err := newCounter(cfg.CountFile).Add()
		if err != nil {
			logger.Printf("job: %v", err)
			return 1
		}
		logger.Printf("job run %d", n)
	}
	if cfg.Version != "" {
		logger.Printf("job version %s", cfg.Version)
	}
	logger.Printf("job done, exit %d", cfg.JobExit)
	return cfg.JobExit
}
