// Package agentd assembles a host's agent from a plain Config: the identity
// (joined or loaded), the host certificate, the data plane (the ingress and
// the mesh, in a process of their own that outlives the agent: see package
// dataplane), the Docker adapter, the converge loop and the session runner,
// started in order and closed in reverse. It is the daemon ("d", as in sshd) behind
// `hatch agent` and the agent half of `hatch up`, kept apart from the CLI
// (as Nomad's command/agent keeps setupClient apart from its commands) so
// that the CLI only parses flags, and the parts meet here rather than in the
// command package. Errors name the `hatch agent` flag that sets the field at
// fault, since that is what the operator typed.
package agentd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"time"

	dockerclient "github.com/docker/docker/client"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/agent"
	"github.com/hatchery/hatchery/internal/apiclient"
	"github.com/hatchery/hatchery/internal/containers/docker"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/dataplane"
	"github.com/hatchery/hatchery/internal/mesh"
	"github.com/hatchery/hatchery/internal/relay"
	"github.com/hatchery/hatchery/internal/sessionhost"
)

// Config is an agent's settings: `hatch agent` fills it from its flags, and
// `hatch up` for the agent it runs in its own process.
type Config struct {
	// Server and JoinToken are needed for the first start only: the identity
	// the join gives is kept in DataDir.
	Server    string
	JoinToken string
	// Name is this host's name for placement (default: the control plane's
	// choice).
	Name    string
	DataDir string

	// IngressAddr, AdminAddr and PublishAddr configure the host's proxy:
	// routed HTTP, /healthz and /metrics, and the IP published ports bind.
	IngressAddr, AdminAddr, PublishAddr string
	// HTTPSAddr is where the ingress serves HTTPS ("" for none), and
	// TrustedProxies the TLS-terminating proxies whose X-Forwarded-Proto it
	// believes.
	HTTPSAddr      string
	TrustedProxies []netip.Prefix
	// HoldTimeout overrides ingress.DefaultConfig's bound on holding a
	// stateful egg's requests while it has no replica, when non-zero.
	HoldTimeout time.Duration
	// MeshAddr is where the mesh port listens (host:port), and Advertise
	// where peers reach it, tried in order (default: the listening IP if it
	// is a specific one, else every non-loopback address of the host).
	MeshAddr  string
	Advertise []string
	// SecretDir holds secret files (default /dev/shm/hatch/<host ID>).
	SecretDir string
	// Labels are put on every Docker object the agent creates (tests mark
	// their objects with a run label this way).
	Labels map[string]string
	// ConvergeInterval overrides agent.DefaultConfig's when non-zero.
	ConvergeInterval time.Duration
	// StaleCacheWait overrides agent.DefaultConfig's when non-zero: how
	// long, at start, the agent leaves alone the containers newer than its
	// desired-state cache until the control plane answers.
	StaleCacheWait time.Duration
	// NoExec refuses `hatch exec` sessions on this host.
	NoExec bool
	// InProcessDataPlane runs the data plane inside the agent's process,
	// stopped with it, instead of a process of its own that outlives it:
	// for `hatch up`, whose host lives as long as the command, and for
	// tests that run an agent in a test binary (which has no `hatch
	// dataplane` to start).
	InProcessDataPlane bool
	// Logger is where the agent logs (required).
	Logger *zap.Logger
}

// The parts meet here, each through the small interface its consumer
// declares.
var (
	_ agent.Router          = (*dataplane.Client)(nil)
	_ agent.Mesh            = (*dataplane.Client)(nil)
	_ docker.Ingress        = (*dataplane.Client)(nil)
	_ mesh.HostCertificates = (*agent.HostCerts)(nil)
)

// closeTimeout bounds the close of each part of the agent at its stop.
const closeTimeout = 15 * time.Second

// Run is `hatch agent`, and the agent half of `hatch up`: the one place
// the agent's parts are assembled. It joins (first start) or loads the
// identity, then adopts or starts the data plane, starts the Docker adapter
// and the agent, runs them until ctx ends, and closes them in the reverse
// order. Containers and the data plane keep running after it returns (but
// an InProcessDataPlane).
func Run(ctx context.Context, opts Config) error {
	log := opts.Logger
	if log == nil {
		return errors.New("agent: no logger")
	}
	if opts.DataDir == "" {
		return errors.New("no data directory (--data-dir)")
	}
	if err := agent.PrepareDataDir(opts.DataDir, log); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	id, err := ensureIdentity(ctx, opts, log)
	if err != nil {
		return err
	}
	hostLog := log.With(zap.String("host", id.HostID))
	cp, err := agent.NewHTTPClient(id)
	if err != nil {
		return err
	}
	defer cp.Close()
	cp.OnServers(func(live []string, err error) { keepServers(opts.DataDir, id, live, err, hostLog) })
	// The mesh certificate: renewed at half-life, and asked for at once by
	// an agent that has none (one that joined before host certificates).
	certs, err := agent.OpenHostCerts(opts.DataDir, id.HostID, cp, hostLog)
	if err != nil {
		return err
	}
	certsCtx, stopCerts := context.WithCancel(ctx)
	certsDone := make(chan struct{})
	go func() { defer close(certsDone); certs.Run(certsCtx) }()
	defer func() { stopCerts(); <-certsDone }()

	// The data plane (ingress and mesh) runs apart from the agent and
	// outlives it: adopted if one runs, upgraded in place if it is another
	// binary's, started if none. Not cut short by ctx: an agent told to
	// stop meanwhile stops what it started the usual way.
	setup, endSetup := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer endSetup()
	changes := agent.NewSignal()
	dp, stopDataPlane, err := startDataPlane(setup, opts, id.HostID, changes.Fire, hostLog)
	if err != nil {
		return err
	}
	defer stopDataPlane()
	if err := dp.ReloadCerts(setup); err != nil {
		hostLog.Info("the data plane has no host certificate yet: its mesh starts once the agent has one", zap.Error(err))
	}
	addrs, err := dp.Status(setup)
	if err != nil {
		return err
	}
	advertise, err := advertiseFor(addrs.Mesh, opts.Advertise)
	if err != nil {
		return err
	}

	dc, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		return fmt.Errorf("docker client: %w", err)
	}
	defer dc.Close()
	ecfg := docker.DefaultConfig(id.HostID)
	if opts.SecretDir != "" {
		ecfg.SecretDir = opts.SecretDir
	}
	ecfg.Labels, ecfg.Blobs, ecfg.Ingress, ecfg.OnChange, ecfg.Logger = opts.Labels, cp, dp, changes.Fire, log
	relayImage, buildRelay, err := relayImageOf(os.Executable)
	if err != nil {
		// The agent still serves; the status report says relays cannot run.
		hostLog.Error("no relay image: eggs cannot be reached by name across hosts", zap.Error(err))
	} else {
		ecfg.BuiltinImages = map[string]docker.BuiltinImage{relayImage: buildRelay}
	}
	eng, err := docker.New(ctx, dc, ecfg)
	if err != nil {
		return fmt.Errorf("docker adapter: %w", err)
	}
	defer closeWithin(hostLog, "docker adapter", eng.Close)

	cfg := agent.DefaultConfig()
	cfg.HostID, cfg.DataDir, cfg.Logger = id.HostID, opts.DataDir, log
	dp.DockerHost = dc.DaemonHost() // the fence lease's Engine: this agent's
	cfg.Docker, cfg.ControlPlane, cfg.Events, cfg.Changes, cfg.Router = eng, cp, dc, changes, dp
	cfg.Mesh, cfg.MeshAddresses, cfg.RelayImage = dp, advertise, relayImage
	cfg.HTTPPort, cfg.HTTPSPort = portOf(addrs.HTTP), portOf(addrs.HTTPS)
	cfg.Capacity = hostCapacity(ctx, dc, hostLog)
	cfg.NoExec = opts.NoExec
	if opts.ConvergeInterval > 0 {
		cfg.ConvergeInterval = opts.ConvergeInterval
	}
	if opts.StaleCacheWait > 0 {
		cfg.StaleCacheWait = opts.StaleCacheWait
	}
	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	if err := a.Start(); err != nil {
		return err
	}
	// Sessions (hatch logs, hatch exec) run beside the agent: their
	// streams end (and their commands are killed) before the agent stops.
	sess, err := sessionhost.New(sessionhost.Config{HostID: id.HostID, Servers: sessionServers{cp}, Docker: dc, NoExec: opts.NoExec,
		Kill: sessionhost.KillProcess, Logger: hostLog, Wait: 30 * time.Second})
	if err != nil {
		closeWithin(hostLog, "agent", a.Close)
		return err
	}
	sess.Start()
	hostLog.Info("agent running", zap.String("server", cp.Server()), zap.Strings("servers", id.URLs()),
		zap.String("ingress", addrs.HTTP), zap.String("https", addrs.HTTPS), zap.String("admin", addrs.Admin),
		zap.String("mesh", addrs.Mesh), zap.Strings("advertise", advertise))
	<-ctx.Done()
	hostLog.Info("agent stopping; containers and the data plane keep running")
	closeWithin(hostLog, "sessions", sess.Close)
	closeWithin(hostLog, "agent", a.Close)
	return nil
}

// ensureIdentity loads the identity kept in the data directory, or joins
// with the server and token given and keeps the identity it gets.
func ensureIdentity(ctx context.Context, opts Config, log *zap.Logger) (agent.Identity, error) {
	id, ok, err := agent.LoadIdentity(opts.DataDir)
	if err != nil {
		return agent.Identity{}, err
	}
	if ok {
		if opts.JoinToken != "" {
			log.Info("already joined: the identity in the data directory is used, the join token is not",
				zap.String("host", id.HostID), zap.String("server", id.Server))
		}
		if given := apiclient.ParseServers(opts.Server); len(given) > 0 && !slices.ContainsFunc(given, func(u string) bool {
			return slices.Contains(id.URLs(), u)
		}) {
			return agent.Identity{}, fmt.Errorf("the data directory belongs to server %s, not %s: use another --data-dir to join another server",
				apiclient.JoinServers(id.URLs()), opts.Server)
		}
		return id, nil
	}
	if opts.Server == "" || opts.JoinToken == "" {
		return agent.Identity{}, fmt.Errorf("no identity in %s yet: the first start needs --server and --join (a token from `hatch token create --join`)", opts.DataDir)
	}
	return agent.JoinHost(ctx, opts.DataDir, opts.Server, opts.JoinToken, opts.Name, log)
}

// keepServers keeps the control plane's list of live servers with the
// identity, so that a restarted agent can go to any of them. The identity
// is written atomically; a failure is logged (the list is sent again with
// the next change).
func keepServers(dataDir string, id agent.Identity, live []string, err error, log *zap.Logger) {
	if err != nil {
		log.Warn("the control plane listed servers this agent cannot use; it keeps the ones it has",
			zap.Strings("servers", live), zap.Error(err))
		return
	}
	id.Servers = live
	if err := agent.SaveIdentity(dataDir, id, nil); err != nil {
		log.Warn("the list of live servers was not kept", zap.Error(err))
		return
	}
	log.Info("live servers", zap.Strings("servers", live))
}

// advertiseFor works out the mesh addresses to advertise: those given
// (checked by contract.CheckMeshAddresses), else the listening IP when it
// is a specific one, else every non-loopback address of the host, each with
// the port listened on (meshAddr, the data plane's).
func advertiseFor(meshAddr string, advertise []string) ([]string, error) {
	if len(advertise) > 0 {
		// The control plane refuses a report with an address no peer may
		// dial: say so now, not in every report. Loopback is the control
		// plane's to judge (it takes it when it listens on loopback).
		if err := contract.CheckMeshAddresses(advertise, true); err != nil {
			return nil, fmt.Errorf("--advertise: %w", err)
		}
		return advertise, nil
	}
	ap, err := netip.ParseAddrPort(meshAddr)
	if err != nil {
		return nil, fmt.Errorf("the data plane's mesh address %q: %w", meshAddr, err)
	}
	if !ap.Addr().IsUnspecified() {
		return []string{ap.String()}, nil
	}
	return mesh.DefaultAdvertise(int(ap.Port()))
}

// relayImageOf returns the relay image's reference for the running hatch
// binary, and the function that makes its build context when the Docker
// adapter first needs it. The context (the whole binary) is made again then
// rather than kept in memory; a binary replaced on disk since the start is
// refused, since its image would not be the one the reference names.
func relayImageOf(executable func() (string, error)) (string, docker.BuiltinImage, error) {
	path, err := executable()
	if err != nil {
		return "", nil, fmt.Errorf("relay image: find the hatch binary: %w", err)
	}
	img, err := relay.ImageFromBinary(path)
	if err != nil {
		return "", nil, err
	}
	ref := img.Ref
	return ref, func() (io.Reader, error) {
		again, err := relay.ImageFromBinary(path)
		if err != nil {
			return nil, err
		}
		if again.Ref != ref {
			return nil, fmt.Errorf("relay image %s: %s changed since the agent started (now %s): restart the agent", ref, path, again.Ref)
		}
		return bytes.NewReader(again.Context), nil
	}, nil
}

// hostCapacity reads the host's memory and CPUs from Docker for placement;
// nil (placement then does not know them) if Docker cannot tell.
func hostCapacity(ctx context.Context, dc *dockerclient.Client, log *zap.Logger) *contract.HostCapacity {
	info, err := dc.Info(ctx)
	if err != nil {
		log.Warn("cannot read the host's capacity from Docker; placement will not know it", zap.Error(err))
		return nil
	}
	return &contract.HostCapacity{MemoryBytes: info.MemTotal, MilliCPU: int64(info.NCPU) * 1000}
}

// closeWithin closes one part of the agent, giving it closeTimeout; a
// failure is logged, since the other parts still have to close.
func closeWithin(log *zap.Logger, what string, closeFn func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if err := closeFn(ctx); err != nil {
		log.Warn("close "+what, zap.Error(err))
	}
}

// portOf is the port of a listening address, 0 for none.
func portOf(addr string) int {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return 0
	}
	return int(ap.Port())
}

// sessionServers is the agent's client as the session runner sees it.
type sessionServers struct{ cp *agent.HTTPClient }

func (s sessionServers) SessionServers() []string { return s.cp.SessionServers() }

func (s sessionServers) At(server string) (sessionhost.Offers, error) { return s.cp.At(server) }
