package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/docker/docker/client"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/containers/docker"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/ingress"
	"github.com/hatchery/hatchery/internal/pki"
)

// Options are `hatch agent`'s settings.
type Options struct {
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
	// SecretDir holds secret files (default /dev/shm/hatch/<host ID>).
	SecretDir string
	// Labels are put on every Docker object the agent creates (tests mark
	// their objects with a run label this way).
	Labels map[string]string
	// Agent overrides timings of DefaultConfig where non-zero.
	ConvergeInterval time.Duration

	Logger *zap.Logger
}

// Run is `hatch agent`: it joins (first start) or loads the identity, then
// runs the ingress, the Docker adapter and the agent until ctx ends, and
// closes them in the reverse order. Containers keep running after it
// returns.
func Run(ctx context.Context, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	if opts.DataDir == "" {
		return errors.New("no data directory (--data-dir)")
	}
	id, err := ensureIdentity(ctx, opts, log)
	if err != nil {
		return err
	}
	log = log.With(zap.String("host", id.HostID))
	cp, err := NewHTTPClient(id)
	if err != nil {
		return err
	}
	// The mesh certificate: renewed at half-life, and asked for at once by
	// an agent that has none (one that joined before host certificates).
	certs, err := OpenHostCerts(opts.DataDir, id.HostID, cp, log)
	if err != nil {
		return err
	}
	certsDone := make(chan struct{})
	certsCtx, stopCerts := context.WithCancel(ctx)
	go func() { defer close(certsDone); certs.Run(certsCtx) }()
	defer func() { stopCerts(); <-certsDone }()

	icfg := ingress.DefaultConfig()
	icfg.HTTPAddr, icfg.AdminAddr, icfg.PublishAddr, icfg.Logger = opts.IngressAddr, opts.AdminAddr, opts.PublishAddr, log
	in, err := ingress.New(icfg)
	if err != nil {
		return err
	}
	if err := in.Start(); err != nil {
		return err
	}
	defer closeWithin(log, "ingress", 15*time.Second, in.Close)

	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return fmt.Errorf("docker client: %w", err)
	}
	defer cli.Close()
	changes := NewSignal()
	ecfg := docker.DefaultConfig(id.HostID)
	if opts.SecretDir != "" {
		ecfg.SecretDir = opts.SecretDir
	}
	ecfg.Labels, ecfg.Blobs, ecfg.Ingress, ecfg.OnChange, ecfg.Logger = opts.Labels, cp, in, changes.Fire, log
	eng, err := docker.New(ctx, cli, ecfg)
	if err != nil {
		return fmt.Errorf("docker engine: %w", err)
	}
	defer closeWithin(log, "docker adapter", 15*time.Second, eng.Close)

	cfg := DefaultConfig()
	cfg.HostID, cfg.DataDir, cfg.Logger = id.HostID, opts.DataDir, log
	cfg.Docker, cfg.ControlPlane, cfg.Events, cfg.Changes = eng, cp, cli, changes
	cfg.Router = in
	if info, err := cli.Info(ctx); err != nil {
		log.Warn("cannot read the host's capacity from Docker; the scheduler will not know it", zap.Error(err))
	} else {
		cfg.Capacity = &contract.HostCapacity{MemoryBytes: info.MemTotal, MilliCPU: int64(info.NCPU) * 1000}
	}
	if opts.ConvergeInterval > 0 {
		cfg.ConvergeInterval = opts.ConvergeInterval
	}
	a, err := New(cfg)
	if err != nil {
		return err
	}
	if err := a.Start(); err != nil {
		return err
	}
	log.Info("agent running", zap.String("server", id.Server),
		zap.String("ingress", addrString(in.HTTPAddr())), zap.String("admin", addrString(in.AdminAddr())))
	<-ctx.Done()
	log.Info("agent stopping; containers keep running")
	closeWithin(log, "agent", 15*time.Second, a.Close)
	return nil
}

// ensureIdentity loads the identity kept in the data directory, or joins
// with the server and token given and keeps the identity it gets.
func ensureIdentity(ctx context.Context, opts Options, log *zap.Logger) (Identity, error) {
	id, ok, err := LoadIdentity(opts.DataDir)
	if err != nil {
		return Identity{}, err
	}
	if ok {
		if opts.JoinToken != "" {
			log.Info("already joined: the identity in the data directory is used, the join token is not",
				zap.String("host", id.HostID), zap.String("server", id.Server))
		}
		if opts.Server != "" && opts.Server != id.Server {
			return Identity{}, fmt.Errorf("the data directory belongs to server %s, not %s: use another --data-dir to join another server", id.Server, opts.Server)
		}
		return id, nil
	}
	if opts.Server == "" || opts.JoinToken == "" {
		return Identity{}, fmt.Errorf("no identity in %s yet: the first start needs --server and --join (a token from `hatch token create --join`)", opts.DataDir)
	}
	// The host key is made here and never sent: the join carries its CSR.
	key, err := pki.NewHostKey()
	if err != nil {
		return Identity{}, err
	}
	csr, err := pki.HostCSR(key, "")
	if err != nil {
		return Identity{}, err
	}
	joined, err := Join(ctx, opts.Server, opts.JoinToken, opts.Name, csr)
	if err != nil {
		return Identity{}, err
	}
	id = joined.Identity
	if err := SaveIdentity(opts.DataDir, id, joined.CAPEM); err != nil {
		return Identity{}, err
	}
	log.Info("joined the control plane", zap.String("host", id.HostID), zap.String("server", id.Server))
	if err := keepJoinCertificate(opts.DataDir, id.HostID, key, joined.HostCert); err != nil {
		// Joined all the same: the renewal route gives the certificate.
		log.Warn("the join's host certificate was not kept: it will be asked for again", zap.Error(err))
	}
	return id, nil
}

func closeWithin(log *zap.Logger, what string, d time.Duration, closeFn func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := closeFn(ctx); err != nil {
		log.Warn("close "+what, zap.Error(err))
	}
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
