// Package serverd assembles a control plane server from a plain Config:
// its data dir and store, its transport (HTTPS from its own CA or the
// operator's certificate), the admin token, the providers, the apply
// protocol, the fleet, the background loops, the ACME client and the API
// over them, and its entry in the live server list. It is the daemon ("d",
// as in sshd) behind `hatch server` and the server half of `hatch up`, kept
// apart from the CLI (as Nomad's command/agent keeps setupServer apart from
// its commands) so that the CLI only parses flags. Errors name the
// `hatch server` flag that sets the field at fault, since that is what the
// operator typed.
package serverd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/acme"
	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/backup"
	"github.com/hatchery/hatchery/internal/blob"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/deploy"
	"github.com/hatchery/hatchery/internal/desired"
	"github.com/hatchery/hatchery/internal/fleet"
	"github.com/hatchery/hatchery/internal/fsutil"
	"github.com/hatchery/hatchery/internal/imageref"
	"github.com/hatchery/hatchery/internal/jobs"
	"github.com/hatchery/hatchery/internal/leader"
	"github.com/hatchery/hatchery/internal/pki/authority"
	"github.com/hatchery/hatchery/internal/placement"
	"github.com/hatchery/hatchery/internal/provider"
	"github.com/hatchery/hatchery/internal/seal"
	"github.com/hatchery/hatchery/internal/server"
	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/volumes"
)

// backupSetup is the backups' key and store, chosen at start.
type backupSetup struct {
	key   []byte
	store backup.Store
}

// Files of the control plane's data dir, beside hatch.db, tls/ and blobs/.
const (
	adminTokenFile = "admin-token"
	sealKeyFile    = "seal.key"
	// acmeAccountFile keeps the ACME account's key, sealed.
	acmeAccountFile = "acme-account.key"
	// acmeStateFile keeps the ACME client's back-off per name.
	acmeStateFile = "acme-state.json"
)

// Config is a server's settings: `hatch server` fills it from its flags
// (each field's flag is named beside it), and `hatch up` for the server it
// runs in its own process. Start from DefaultConfig.
type Config struct {
	// Listen is where the API is served (--listen), and DataDir where the
	// database, blobs, keys and the admin token are kept (--data-dir).
	Listen, DataDir string
	// Store is --store, and StoreEnv the value of HATCH_STORE, read when
	// Store is empty (see ResolveStore).
	Store, StoreEnv string
	TLS             TLS
	// AdvertiseURL is where hosts and clients reach this server, as the
	// live server list names it ("": the listen address if it is a
	// specific one; --advertise-url).
	AdvertiseURL string
	ACME         ACME
	// Notify are the webhooks' settings.
	Notify Notify
	// BackupStore is where volume backups go (--backup-store): "" for the
	// control plane's blob store, or s3://bucket/prefix, reached with the
	// credentials, endpoint and region of the environment (Getenv).
	BackupStore string
	// Getenv reads the environment (os.Getenv but in tests).
	Getenv func(string) string
	// LivenessTimeout is how long a host may go without a report before it
	// is marked down (--liveness-timeout).
	LivenessTimeout time.Duration
	// AuthFailureBurst and AuthFailureRefill limit failed authentications
	// per client address (--auth-failure-burst, --auth-failure-refill).
	AuthFailureBurst  int
	AuthFailureRefill time.Duration
	// RequestTimeout is the deadline of a plain API request
	// (--request-timeout).
	RequestTimeout time.Duration
	// FenceAfter is how long an agent whose status reports go unanswered
	// keeps running the eggs of failover volumes (--fence-after), handed
	// to every host in its desired state; 0: no fencing (docs/BACKUPS.md,
	// "Failover").
	FenceAfter time.Duration
	// MaxReplicas is the most replicas a plan may ask for per egg
	// (--max-replicas), and KeepApplies how many applies of each project
	// the history keeps (--keep-applies).
	MaxReplicas, KeepApplies int
	// MaxHostCapacity caps what a host's report of its capacity is
	// believed at (--max-host-memory, --max-host-cpus).
	MaxHostCapacity placement.Resources
	// LoopsLease and ProjectLease are the terms of the background loops'
	// lease and of a project's (--loops-lease, --project-lease; short ones
	// for tests of takeovers).
	LoopsLease, ProjectLease time.Duration
	// WriteCLIConfig, if set, is given the URL a CLI on this machine
	// reaches the server at and the admin token, once the server listens:
	// `hatch server` and `hatch up` write their CLI config with it. Its
	// error is logged: the server serves anyway.
	WriteCLIConfig func(url, adminToken string) error
	// Out is where the server prints what its operator needs once: the
	// admin token at the first start, the CA fingerprint, its URL.
	Out io.Writer
	// Logger is where the server logs.
	Logger *zap.Logger
}

// ACME configures the control plane's ACME client (none without a CA).
type ACME struct {
	// CA is the ACME directory URL (--acme-ca), Email the account's contact
	// (--acme-email), CARoot a PEM file of roots to trust for the CA's own
	// HTTPS (--acme-ca-root).
	CA, Email, CARoot string
	// Challenge is the ACME challenge type answered (--acme-challenge).
	Challenge string
	// CheckEvery is how often the names are checked for renewal
	// (--acme-check-interval, for tests).
	CheckEvery time.Duration
}

// DefaultFenceAfter is --fence-after's default: a minute of unanswered
// status reports (a few heartbeats) before an agent stops its failover eggs.
const DefaultFenceAfter = time.Minute

// DefaultConfig is the server's settings when no flag changes them: the
// flags' defaults, and what `hatch up` runs its server with.
func DefaultConfig() Config {
	return Config{
		LivenessTimeout:   fleet.DefaultConfig().LivenessTimeout,
		AuthFailureBurst:  server.DefaultConfig().AuthFailureBurst,
		AuthFailureRefill: server.DefaultConfig().AuthFailureRefill,
		RequestTimeout:    server.DefaultConfig().RequestTimeout,
		FenceAfter:        DefaultFenceAfter,
		MaxReplicas:       deploy.DefaultMaxReplicas,
		MaxHostCapacity:   placement.DefaultMaxHostCapacity,
		KeepApplies:       store.DefaultKeepApplies,
		LoopsLease:        leader.DefaultTTL,
		ProjectLease:      deploy.DefaultConfig().LeaseTTL,
		ACME:              ACME{Challenge: acme.ChallengeHTTP01, CheckEvery: time.Minute},
	}
}

// components checks the settings, before Run makes any state, and makes
// the configs of the server's parts from them.
func (c Config) components() (server.Config, fleet.Config, deploy.Config, error) {
	cfg := server.DefaultConfig()
	cfg.AuthFailureBurst, cfg.AuthFailureRefill = c.AuthFailureBurst, c.AuthFailureRefill
	if c.RequestTimeout <= 0 {
		return cfg, fleet.Config{}, deploy.Config{}, fmt.Errorf("--request-timeout: must be positive, not %v", c.RequestTimeout)
	}
	cfg.RequestTimeout = c.RequestTimeout
	if c.FenceAfter < 0 {
		return cfg, fleet.Config{}, deploy.Config{}, fmt.Errorf("--fence-after: must be 0 (no fencing) or positive, not %v", c.FenceAfter)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fleet.Config{}, deploy.Config{}, err
	}
	deployCfg := deploy.DefaultConfig()
	deployCfg.MaxReplicas, deployCfg.LeaseTTL = c.MaxReplicas, c.ProjectLease
	deployCfg.FenceAfter, deployCfg.RequestTimeout = c.FenceAfter, c.RequestTimeout
	if err := deployCfg.Validate(); err != nil {
		return cfg, fleet.Config{}, deployCfg, fmt.Errorf("--max-replicas, --project-lease: %w", err)
	}
	if c.LoopsLease <= 0 {
		return cfg, fleet.Config{}, deployCfg, fmt.Errorf("--loops-lease: must be positive, not %v", c.LoopsLease)
	}
	if c.KeepApplies < 1 || c.KeepApplies > deploy.MaxKeepApplies {
		return cfg, fleet.Config{}, deployCfg, fmt.Errorf("--keep-applies: %d is not between 1 and %d", c.KeepApplies, deploy.MaxKeepApplies)
	}
	deployCfg.KeepApplies = c.KeepApplies
	fleetCfg := fleet.DefaultConfig()
	fleetCfg.LivenessTimeout, fleetCfg.MaxHostCapacity = c.LivenessTimeout, c.MaxHostCapacity
	if err := fleetCfg.Validate(); err != nil {
		return cfg, fleetCfg, deployCfg, err
	}
	if (c.ACME.CA == "") != (c.ACME.Email == "") {
		return cfg, fleetCfg, deployCfg, errors.New("--acme-ca and --acme-email go together: the CA needs a contact for the account")
	}
	if err := c.Notify.check(); err != nil {
		return cfg, fleetCfg, deployCfg, err
	}
	if c.Out == nil || c.Logger == nil {
		return cfg, fleetCfg, deployCfg, errors.New("server: no output or no logger")
	}
	return cfg, fleetCfg, deployCfg, nil
}

// Run is `hatch server`, and the server half of `hatch up`: it checks cfg,
// opens the data dir and the store, makes or loads the CA, keys and admin
// token, listens, registers in the live server list, and serves until ctx
// ends. Nothing is made on disk before every setting is checked.
func Run(ctx context.Context, c Config) error {
	cfg, fleetCfg, deployCfg, err := c.components()
	if err != nil {
		return err
	}
	loc, err := ResolveStore(c.Store, c.StoreEnv, c.DataDir)
	if err != nil {
		return err
	}
	if err := checkPlainHTTP(ctx, c.TLS, c.Listen); err != nil {
		return err
	}
	// The database, keys and tokens: for the owner's eyes only.
	if err := fsutil.PrivateDir(c.DataDir, "hatch.db", adminTokenFile, sealKeyFile, notifyKeyFile, backupKeyFile); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	log, stdout := c.Logger, c.Out
	st, err := openStore(ctx, loc, log)
	if err != nil {
		return err
	}
	defer st.Close()
	// The fingerprint goes into every token, so that clients can pin the server.
	transport, err := loadServing(c.TLS, c.DataDir, c.Listen, time.Now())
	if err != nil {
		return err
	}
	tokenPath := filepath.Join(c.DataDir, adminTokenFile)
	hash, fresh, err := server.EnsureAdminToken(ctx, st, tokenPath, transport.fingerprint, time.Now())
	if err != nil {
		return err
	}
	if fresh != "" {
		fmt.Fprintf(stdout, "admin token (shown once, kept in %s):\n  %s\n", tokenPath, fresh)
	}
	adminToken, err := repinTokenFile(tokenPath, transport.fingerprint)
	if err != nil {
		return err
	}
	blobs, err := openBlobs(ctx, st, c.DataDir, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// Agents on this machine advertise loopback mesh addresses; a server
	// reached over the network refuses them (fleet.Config.LoopbackMesh).
	fleetCfg.LoopbackMesh = onLoopback(ln.Addr())
	url := localURL(ln.Addr(), transport)
	servers, err := newRoster(st, c, url, log)
	if err != nil {
		ln.Close()
		return err
	}
	backupKey, err := loadBackupKey(ctx, c.DataDir, loc, st)
	if err != nil {
		ln.Close()
		return err
	}
	getenv := c.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	backupStore, err := openBackupStore(c.BackupStore, getenv, blobs, st)
	if err != nil {
		ln.Close()
		return err
	}
	srv, err := wire(st, blobs, c.DataDir, cfg, fleetCfg, deployCfg, c.ACME, c.Notify, c.LoopsLease, hash, transport.fingerprint, servers,
		backupSetup{key: backupKey, store: backupStore}, log)
	if err != nil {
		ln.Close()
		return err
	}
	if transport.tls != nil {
		ln = tls.NewListener(ln, transport.tls)
	} else if !onLoopback(ln.Addr()) { // a name that resolved otherwise since
		ln.Close()
		return errPlainHTTPOffLoopback(ln.Addr().String())
	}
	if c.WriteCLIConfig != nil {
		if err := c.WriteCLIConfig(url, adminToken); err != nil {
			log.Warn("CLI config not written", zap.Error(err))
		}
	}
	fmt.Fprintf(stdout, "CA fingerprint %s\n", transport.fingerprint)
	fmt.Fprintf(stdout, "server URL on this machine: %s\n", url)
	fmt.Fprintf(stdout, "hatch server listening on %s\n", ln.Addr())
	servers.Start(ctx)
	defer closeRoster(servers, log)
	if err := srv.Serve(ctx, ln); err != nil {
		return err
	}
	log.Info("server stopped")
	return nil
}

// wire is the one wiring of the control plane over its store: the
// providers that turn projects into desired state, the apply protocol and
// the fleet over them, and the API over both.
func wire(st controlStore, blobs blob.Storage, dataDir string, cfg server.Config, fleetCfg fleet.Config, deployCfg deploy.Config,
	acmeCfg ACME, notifyCfg Notify, loopsLease time.Duration, adminHash, fingerprint string, servers server.ServerList, backups backupSetup,
	log *zap.Logger) (*server.Server, error) {
	box, err := seal.LoadOrCreate(filepath.Join(dataDir, sealKeyFile))
	if err != nil {
		return nil, err
	}
	id, err := serverID(dataDir)
	if err != nil {
		return nil, err
	}
	// Hosts' mesh certificates come from a CA of their own, never the one
	// clients pin.
	hostCA, err := authority.LoadOrCreateHostCA(filepath.Join(dataDir, "tls"), authority.MaxHostLifetime, time.Now())
	if err != nil {
		return nil, err
	}
	// The ACME client obtains a certificate when an apply lands a route
	// that needs one: the providers kick it.
	var certs *acme.Manager
	providers, err := provider.New(provider.Deps{
		Deps: desired.Deps{Desired: st, Statuses: st, Records: st, Events: st, Secrets: st,
			Fleet: desired.StoreFleet{List: st, Identities: st, Reports: st, Capacities: st,
				MaxCapacity: fleetCfg.MaxHostCapacity, LoopbackMesh: fleetCfg.LoopbackMesh},
			Box:        box,
			ACME:       acmeCfg.CA != "",
			FenceAfter: deployCfg.FenceAfter,
			Logger:     log.With(zap.String("component", "providers")),
			Now:        time.Now,
		},
		OnTLSAuto: func() { certs.Kick() },
	})
	if err != nil {
		return nil, err
	}
	var background server.CertificateLoop
	if acmeCfg.CA != "" {
		if certs, err = newACME(acmeCfg, dataDir, box, providers, st, log); err != nil {
			return nil, err
		}
		background = certs
	}
	volumeTasks, err := newBackups(st, providers.States, backups.store, backups.key, id, log)
	if err != nil {
		return nil, err
	}
	runs, err := newJobs(st, providers, volumeTasks, id, log)
	if err != nil {
		return nil, err
	}
	applies, err := deploy.New(deployCfg, deploy.Deps{
		Resources: st, Plans: st, Leases: st, Applies: st, Projects: st, Events: st, Reports: st,
		Sources: blobs, Providers: providers, Images: imageref.Registry{}, ServerID: id, Logger: log, Now: time.Now,
		Loops: []deploy.Loop{runs, volumeTasks}, // the jobs scheduler and the backups' loop run with the loops, on their holder only
	})
	if err != nil {
		return nil, err
	}
	hosts, err := fleet.New(fleetCfg, fleet.Deps{
		Liveness: st, Statuses: st, Desired: st, Events: st, Retention: st, Applies: st, Projects: st,
		JoinTokens: st, Members: st, AdminTokens: st, Capacities: st, Blobs: volumes.GuardCollector{Blobs: blobs, S: volumeTasks}, Fingerprint: fingerprint, HostCA: hostCA, Peers: providers, Registries: providers,
		Logger: log, Now: time.Now,
	})
	if err != nil {
		return nil, err
	}
	notifications, err := newNotify(notifyCfg, dataDir, st, applies, log)
	if err != nil {
		return nil, err
	}
	loops, err := leader.New(loopsLease, leader.Deps{Leases: st, ServerID: id, Logger: log})
	if err != nil {
		return nil, err
	}
	return server.New(cfg, server.Deps{
		Deploy: applies, Fleet: hosts, Jobs: runs, Backups: volumeTasks, Loops: loops, Desired: st, Box: box, Blobs: blobs,
		Auth: server.NewTokenAuth(adminHash, st, time.Now), Servers: servers, Logger: log, Now: time.Now,
		Certificates: background, TLS: certificateStatus{providers: providers, acme: certs}, Notifications: notifications,
	})
}

// newJobs is the jobs service over the store and the hosts' desired
// states: its API on every server, its scheduler with the background loops.
func newJobs(st controlStore, providers *provider.Set, backups *volumes.Service, serverID string, log *zap.Logger) (*jobs.Service, error) {
	jlog := log.With(zap.String("component", "jobs"))
	return jobs.New(jobs.DefaultConfig(), jobs.Deps{
		Runs: st, Schedules: st, Leases: st, Events: st, Records: st, Hosts: st, Desired: providers.States,
		Sources: []jobs.Source{jobs.EggSchedules{Projects: st, Skipped: func(project, egg string, err error) {
			jlog.Warn("a scheduled egg is skipped: its schedule is unreadable", zap.String("project", project),
				zap.String("egg", egg), zap.Error(err))
		}}, backups}, // the volumes' backup schedules: one scheduler for all timed work
		ServerID: serverID, Logger: log, Now: time.Now,
	})
}

// certificateStatus is what hatch status shows of the certificates: the
// desired states' (issuer, expiry) and the ACME client's last errors.
type certificateStatus struct {
	providers *provider.Set
	acme      *acme.Manager // nil without an ACME CA
}

func (c certificateStatus) Certificates(ctx context.Context) ([]api.Certificate, error) {
	names, err := c.providers.TLSHosts(ctx)
	if err != nil {
		return nil, err
	}
	errs := c.acme.LastErrors()
	out := make([]api.Certificate, 0, len(names))
	for _, n := range names {
		ac := api.Certificate{Host: n.Host, Source: desired.SourceACME, LastError: errs[n.Host]}
		if n.Mode == contract.TLSSecret {
			ac.Source = desired.SourceSecret
		}
		if n.Cert != nil {
			if block, _ := pem.Decode([]byte(n.Cert.Chain)); block != nil {
				if leaf, err := x509.ParseCertificate(block.Bytes); err == nil {
					ac.Issuer, ac.NotAfter = leaf.Issuer.CommonName, leaf.NotAfter
				}
			}
		}
		out = append(out, ac)
	}
	return out, nil
}

// newACME sets up the control plane's ACME client over the providers (the
// desired states carry certificates and challenges to the hosts), its
// account key sealed in the data dir.
func newACME(opts ACME, dataDir string, box *seal.Box, providers *provider.Set, events acmeEvents, log *zap.Logger) (*acme.Manager, error) {
	httpClient := http.DefaultClient
	if opts.CARoot != "" {
		pem, err := os.ReadFile(opts.CARoot)
		if err != nil {
			return nil, fmt.Errorf("--acme-ca-root: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--acme-ca-root %s: no PEM certificate in it", opts.CARoot)
		}
		httpClient = &http.Client{Timeout: 30 * time.Second,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, Proxy: http.ProxyFromEnvironment}}
	}
	m, err := acme.New(acme.Config{
		DirectoryURL: opts.CA, Email: opts.Email, Challenge: opts.Challenge, HTTPClient: httpClient,
		AccountKeyFile: filepath.Join(dataDir, acmeAccountFile), StateFile: filepath.Join(dataDir, acmeStateFile), Box: box,
		Certificates: providers, Events: events, Changes: events.WatchEvents, Logger: log, CheckEvery: opts.CheckEvery,
	})
	if err != nil {
		return nil, fmt.Errorf("--acme-ca: %w", err)
	}
	return m, nil
}

// acmeEvents is the event log as the ACME client uses it: it records its
// outcomes, and wakes at changes recorded through any server.
type acmeEvents interface {
	acme.EventRecorder
	WatchEvents() <-chan struct{}
}

// serverID names this server in the leases it holds: the same after a
// restart (so it releases what its previous life held), and apart from any
// other server on another machine or data dir.
func serverID(dataDir string) (string, error) {
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("server id: %w", err)
	}
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return "", fmt.Errorf("server id: %w", err)
	}
	return host + ":" + dir, nil
}
