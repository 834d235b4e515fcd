package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	dockerclient "github.com/docker/docker/client"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/hatchery/hatchery/internal/agent"
	"github.com/hatchery/hatchery/internal/agentd"
	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/fsutil"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/serverd"
	"github.com/hatchery/hatchery/internal/spec"
)

// upOptions are hatch up's flags.
type upOptions struct {
	deploy                              deployOptions
	listen                              string
	hostName                            string
	ingressAddr, adminAddr, publishAddr string
	labels                              []string
}

// The layout of ./.hatch, everything hatch up keeps.
const (
	upDir       = ".hatch"
	upServerDir = "server"    // the control plane's data dir
	upAgentDir  = "agent"     // the agent's data dir
	upLogFile   = "hatch.log" // the control plane's and the agent's logs
)

func newUpCmd() *cobra.Command {
	var (
		files projectFiles
		opts  upOptions
	)
	cmd := &cobra.Command{
		Use:   "up -f FILE [--yes]",
		Short: "All in one: a control plane and an agent for the local Docker, then apply and follow",
		Long: "Run Hatchery on this machine in one process: a control plane and an agent for the\n" +
			"local Docker Engine, joined to each other, with all their state under ./.hatch.\n" +
			"Then the project is applied (as `hatch apply`) and followed; its routes are printed.\n" +
			"`hatch status`, `hatch apply` and `hatch destroy` run from this directory in another\n" +
			"terminal talk to it without flags. Ctrl-C stops the control plane and the agent;\n" +
			"the containers keep running until `hatch destroy`.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := loadDeployable(cmd, &files)
			if err != nil {
				return err
			}
			if err := checkName("namespace", opts.deploy.namespace); err != nil {
				return err
			}
			wd, err := os.Getwd()
			if err != nil {
				return err
			}
			return runUp(cmd, p, filepath.Join(wd, upDir), opts)
		},
	}
	files.register(cmd, "hatch.yaml", false)
	f := cmd.Flags()
	f.StringVarP(&opts.deploy.namespace, "namespace", "n", defaultNamespace, "the namespace to deploy the project in")
	f.BoolVarP(&opts.deploy.yes, "yes", "y", false, "apply without asking")
	f.StringVar(&opts.listen, "listen", "127.0.0.1:7700", "where the control plane serves its API")
	f.StringVar(&opts.hostName, "name", "local", "this host's name, as placement and plans show it")
	f.StringVar(&opts.ingressAddr, "ingress-addr", "127.0.0.1:8080", "where the ingress serves the routes")
	f.StringVar(&opts.adminAddr, "admin-addr", "127.0.0.1:7701", "where the agent serves /healthz and /metrics")
	f.StringVar(&opts.publishAddr, "publish-addr", "127.0.0.1", "the IP address published ports listen on")
	f.StringArrayVar(&opts.labels, "label", nil, "KEY=VALUE put on every Docker object the agent creates (repeatable)")
	_ = f.MarkHidden("label") // for tests, as hatch agent's
	return cmd
}

// runUp starts the control plane, then the agent, applies the project and
// follows its events until the command's context ends (Ctrl-C); then it
// stops the agent, then the control plane.
func runUp(cmd *cobra.Command, p *spec.Project, dir string, opts upOptions) error {
	ctx, out := cmd.Context(), cmd.OutOrStdout()
	labels, err := parseLabels(opts.labels)
	if err != nil {
		return err
	}
	if err := prepareUpDir(dir); err != nil {
		return err
	}
	if err := pingDocker(ctx); err != nil {
		return err
	}
	logFile, err := os.OpenFile(filepath.Join(dir, upLogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("log file: %w", err)
	}
	defer logFile.Close()
	logs := zapcore.Lock(zapcore.AddSync(logFile))
	logName := filepath.Join(upDir, upLogFile)

	local := &localRun{}
	defer local.stop()
	cp, err := local.startServer(ctx, dir, opts, logs)
	if err != nil {
		return upError(err, logName)
	}
	defer cp.Close()
	hostID, err := local.startAgent(ctx, cp, dir, opts, labels, logs)
	if err != nil {
		return upError(err, logName)
	}
	fmt.Fprintf(out, "Hatchery is up: control plane %s, host %s (%s) on the local Docker Engine, ingress %s; logs in %s.\n",
		cp.Server(), opts.hostName, hostID, ingressURL(opts.ingressAddr), logName)

	d := newDeployer(cmd, cp)
	switch err := d.deploy(ctx, p, opts.deploy); {
	case ctx.Err() != nil:
	case errors.Is(err, errApplyFailed):
		fmt.Fprintf(out, "Still running: fix %s and run `hatch apply -f %s` in another terminal; Ctrl-C stops.\n", p.File, p.File)
	case errors.Is(err, errNotConfirmed):
		return err
	case err != nil:
		return upError(explainErr(cp.Server(), err), logName)
	default:
		printRoutes(out, p, opts.ingressAddr)
		fmt.Fprintf(out, "Following %s/%s (Ctrl-C stops; `hatch status` in another terminal shows where it stands):\n", opts.deploy.namespace, p.Name)
	}
	events, err := cp.Events().LastSeq(ctx)
	if err != nil && ctx.Err() == nil {
		return upError(explainErr(cp.Server(), err), logName)
	}
	filter := eventFilter{project: resource.Project(opts.deploy.namespace, p.Name)}
	followErr := cp.Events().Follow(local.ctxUntilStopped(ctx), events, func(e api.Event) error {
		if filter.keep(e) {
			printEvent(out, e)
		}
		return nil
	})
	left := projectRunsContainers(cp, opts.deploy.namespace, p.Name)
	stopErr := local.stop()
	fmt.Fprintln(out, "\nStopped the control plane and the agent.")
	if left {
		fmt.Fprintf(out, "The containers keep running: to remove them, start `hatch up` again and run\n"+
			"`hatch destroy %s` in another terminal (with --volumes to delete their data too).\n", p.Name)
	}
	if stopErr != nil {
		return upError(stopErr, logName)
	}
	if followErr != nil && ctx.Err() == nil {
		return upError(explainErr(cp.Server(), followErr), logName)
	}
	return nil
}

// projectRunsContainers reports whether a host reports a container of the
// project; when in doubt (the control plane does not answer), it says yes.
func projectRunsContainers(c *client.Client, namespace, project string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hosts, err := fetchHosts(ctx, c)
	if err != nil {
		return true
	}
	for _, h := range hosts {
		if h.Report != nil && slices.ContainsFunc(h.Report.Containers, func(c contract.ContainerStatus) bool {
			return strings.HasPrefix(c.WorkloadID, namespace+"/"+project+"/")
		}) {
			return true
		}
	}
	return false
}

// prepareUpDir makes ./.hatch (0700: it holds the admin token; an open one
// of an earlier run is tightened) and its .gitignore, so that a project
// directory under Git never commits it.
func prepareUpDir(dir string) error {
	if err := fsutil.PrivateDir(dir, upServerDir, upAgentDir, upLogFile, client.ConfigFile, ".gitignore"); err != nil {
		return err
	}
	ignore := filepath.Join(dir, ".gitignore")
	if _, err := os.Stat(ignore); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(ignore, []byte("# hatch up's state: keys, tokens, the database. Never commit it.\n*\n"), 0o600); err != nil {
			return fmt.Errorf("write %s: %w", ignore, err)
		}
	}
	return nil
}

// pingDocker checks that the local Docker Engine answers, before anything
// starts that needs it.
func pingDocker(ctx context.Context) error {
	cli, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		return fmt.Errorf("docker client: %w", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		return fmt.Errorf("the Docker Engine does not answer at %s: start Docker (or set DOCKER_HOST), then run hatch up again", cli.DaemonHost())
	}
	return nil
}

// upError adds where the details are to an error of hatch up, and says
// what to do about an address already in use.
func upError(err error, logName string) error {
	var exit *exitError
	switch {
	case errors.As(err, &exit):
		return err
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("%w: another hatch up or hatch server may be running; stop it, or choose other addresses (--listen, --ingress-addr, --admin-addr)", err)
	}
	return fmt.Errorf("%w (details in %s)", err, logName)
}

// localRun owns the control plane's and the agent's goroutines: each runs
// until its own context is cancelled, the agent stopping first so that it
// never sees its control plane go away.
type localRun struct {
	mu      sync.Mutex // guards the fields below
	stops   []func() error
	stopped chan struct{} // closed when one of them ended on its own
	once    sync.Once
}

// run starts fn on its own goroutine, with a context stop cancels; ended
// receives fn's error if fn returns before it is stopped.
func (l *localRun) run(ctx context.Context, fn func(context.Context) error) <-chan error {
	l.mu.Lock()
	if l.stopped == nil {
		l.stopped = make(chan struct{})
	}
	l.mu.Unlock()
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	early := make(chan error, 1)
	go func() {
		err := fn(ctx)
		if ctx.Err() == nil { // ended on its own
			early <- err
			l.once.Do(func() { close(l.stopped) })
		}
		done <- err
	}()
	l.mu.Lock()
	l.stops = append(l.stops, func() error { cancel(); return <-done })
	l.mu.Unlock()
	return early
}

// ctxUntilStopped is ctx, also cancelled when the server or the agent ends
// on its own.
func (l *localRun) ctxUntilStopped(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	l.mu.Lock()
	stopped := l.stopped
	l.mu.Unlock()
	go func() {
		select {
		case <-stopped:
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx
}

// stop stops what runs, last started first, and returns the first error of
// one that ended on its own or failed to stop. It may be called again.
func (l *localRun) stop() error {
	l.mu.Lock()
	stops := l.stops
	l.stops = nil
	l.mu.Unlock()
	var errs []error
	for i := len(stops) - 1; i >= 0; i-- {
		if err := stops[i](); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// startServer runs `hatch server` in this process, with its data under
// dir/server and the CLI config at dir/config.json, and returns a client
// once it answers.
func (l *localRun) startServer(ctx context.Context, dir string, opts upOptions, logs zapcore.WriteSyncer) (*client.Client, error) {
	configPath := client.ProjectConfigPath(filepath.Dir(dir))
	cfg := serverd.DefaultConfig()
	cfg.Listen, cfg.DataDir = opts.listen, filepath.Join(dir, upServerDir)
	cfg.WriteCLIConfig = func(url, adminToken string) error {
		return writeCLIConfig(configPath, client.Config{Server: url, Token: adminToken}, io.Discard)
	}
	// The server prints its admin token on stdout at its first start: here it
	// goes nowhere, since the token is kept in dir (and must not reach a log).
	cfg.Out, cfg.Logger = io.Discard, newServerLogger(logs)
	early := l.run(ctx, func(ctx context.Context) error { return serverd.Run(ctx, cfg) })
	return waitFor(ctx, early, 30*time.Second, "the control plane did not start", func(ctx context.Context) (*client.Client, error) {
		cfg, ok, err := client.Load(configPath)
		if err != nil || !ok {
			return nil, errors.New("no CLI config yet")
		}
		c, err := client.New(cfg)
		if err != nil {
			return nil, err
		}
		if _, err := c.Hosts().List(ctx); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	})
}

// startAgent runs `hatch agent` for the local Docker Engine in this
// process, joining the control plane at the first start, and returns the
// host's ID once the control plane sees it up.
func (l *localRun) startAgent(ctx context.Context, cp *client.Client, dir string, opts upOptions, labels map[string]string, logs zapcore.WriteSyncer) (string, error) {
	alog := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(logEncoderConfig()), logs, zap.InfoLevel))
	aopts := agentd.Config{
		Name: opts.hostName, DataDir: filepath.Join(dir, upAgentDir), Labels: labels,
		IngressAddr: opts.ingressAddr, AdminAddr: opts.adminAddr, PublishAddr: opts.publishAddr,
		MeshAddr: "127.0.0.1:0", // one host: the mesh has no peer to serve
		// The host lives as long as the command: so does its data plane.
		InProcessDataPlane: true,
		Logger:             alog,
	}
	id, joined, err := agent.LoadIdentity(aopts.DataDir)
	switch {
	case err != nil:
		return "", err
	case joined && id.Server != cp.Server():
		return "", fmt.Errorf("the agent in %s belongs to the control plane at %s, not %s: run hatch up with --listen %s, or remove %s to start afresh",
			aopts.DataDir, id.Server, cp.Server(), strings.TrimPrefix(id.Server, "https://"), filepath.Dir(aopts.DataDir))
	case !joined:
		joinCtx, cancel := context.WithTimeout(ctx, apiTimeout)
		tok, err := cp.JoinTokens().Create(joinCtx, 10*time.Minute, 1)
		cancel()
		if err != nil {
			return "", fmt.Errorf("make a join token for the local agent: %w", err)
		}
		aopts.Server, aopts.JoinToken = cp.Server(), tok.Token
	}
	early := l.run(ctx, func(ctx context.Context) error { return agentd.Run(ctx, aopts) })
	hostID, err := waitFor(ctx, early, 30*time.Second, "the agent did not report to the control plane", func(ctx context.Context) (string, error) {
		hosts, err := cp.Hosts().List(ctx)
		if err != nil {
			return "", err
		}
		for _, h := range hosts {
			if h.Name == opts.hostName && h.RemovedAt.IsZero() && h.State == "up" {
				return h.ID, nil
			}
		}
		return "", errors.New("not up yet")
	})
	return hostID, err
}

// waitFor calls check every 100 ms until it succeeds, the goroutine it
// waits on ends (its error), ctx ends or the timeout passes (what, with the
// last check's error).
func waitFor[T any](ctx context.Context, early <-chan error, timeout time.Duration, what string, check func(context.Context) (T, error)) (T, error) {
	var zero T
	deadline := time.Now().Add(timeout)
	for {
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		v, err := check(callCtx)
		cancel()
		if err == nil {
			return v, nil
		}
		if time.Now().After(deadline) {
			return zero, fmt.Errorf("%s within %v: %w", what, timeout, err)
		}
		select {
		case err := <-early:
			if err == nil {
				err = errors.New("it stopped")
			}
			return zero, err
		case <-ctx.Done():
			return zero, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ingressURL is the ingress's base URL: its listen address, "localhost"
// when it listens on every address.
func ingressURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// printRoutes prints the URL of each route of the project on the ingress.
func printRoutes(w io.Writer, p *spec.Project, ingressAddr string) {
	_, port, err := net.SplitHostPort(ingressAddr)
	if err != nil {
		return
	}
	suffix := ":" + port
	if port == "80" {
		suffix = ""
	}
	for _, e := range p.Eggs {
		for _, r := range e.Routes {
			path := r.Path
			if path == "" {
				path = "/"
			}
			fmt.Fprintf(w, "%s answers at http://%s%s%s\n", e.Name, r.Host, suffix, path)
		}
	}
}

// logEncoderConfig is the JSON log format of the daemons.
func logEncoderConfig() zapcore.EncoderConfig {
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = "time"
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	return enc
}
