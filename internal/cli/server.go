package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/hatchery/hatchery/internal/acme"
	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/blob"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/deploy"
	"github.com/hatchery/hatchery/internal/fleet"
	"github.com/hatchery/hatchery/internal/fsutil"
	"github.com/hatchery/hatchery/internal/leader"
	"github.com/hatchery/hatchery/internal/pki/authority"
	"github.com/hatchery/hatchery/internal/placement"
	"github.com/hatchery/hatchery/internal/provider"
	"github.com/hatchery/hatchery/internal/seal"
	"github.com/hatchery/hatchery/internal/server"
	"github.com/hatchery/hatchery/internal/spec"
	"github.com/hatchery/hatchery/internal/store"
)

// Files of the control plane's data dir, beside hatch.db, tls/ and blobs/.
const (
	adminTokenFile = "admin-token"
	sealKeyFile    = "seal.key"
	// acmeAccountFile keeps the ACME account's key, sealed.
	acmeAccountFile = "acme-account.key"
	// acmeStateFile keeps the ACME client's back-off per name.
	acmeStateFile = "acme-state.json"
)

type serverOptions struct {
	listen  string
	dataDir string
	store   string
	// storeEnv is HATCH_STORE's value, read by `hatch server` only.
	storeEnv string
	liveness time.Duration
	tls      tlsOptions
	// cliConfig is where the local CLI config is written ("" for the user's
	// config dir, "-" for nowhere).
	cliConfig         string
	authFailureBurst  int
	authFailureRefill time.Duration
	// requestTimeout is the deadline of a plain API request.
	requestTimeout time.Duration
	maxReplicas    int
	keepApplies    int
	// maxHostMemory and maxHostCPUs cap what a host's report of its
	// capacity is believed at.
	maxHostMemory string
	maxHostCPUs   float64
	// loopsLease and projectLease are the terms of the background loops'
	// lease and of a project's (short ones for tests of takeovers).
	loopsLease, projectLease time.Duration
	// advertiseURL is where hosts and clients reach this server, as the
	// live server list names it ("": the listen address if it is a specific one).
	advertiseURL string
	acme         acmeOptions
}

// acmeOptions configure the control plane's ACME client (none without a CA).
type acmeOptions struct {
	ca, email, caRoot string
	// challenge is the ACME challenge type answered.
	challenge string
	// checkEvery is how often the names are checked for renewal (tests).
	checkEvery time.Duration
}

// defaultServerOptions are the server's settings when no flag changes them:
// the flags' defaults, and what `hatch up` runs its server with.
func defaultServerOptions() serverOptions {
	return serverOptions{
		liveness:          fleet.DefaultConfig().LivenessTimeout,
		authFailureBurst:  server.DefaultConfig().AuthFailureBurst,
		authFailureRefill: server.DefaultConfig().AuthFailureRefill,
		requestTimeout:    server.DefaultConfig().RequestTimeout,
		maxReplicas:       deploy.DefaultMaxReplicas,
		maxHostMemory:     fleet.MemoryFlag(placement.DefaultMaxHostCapacity.Memory),
		maxHostCPUs:       float64(placement.DefaultMaxHostCapacity.MilliCPU) / 1000,
		keepApplies:       store.DefaultKeepApplies,
		loopsLease:        leader.DefaultTTL,
		projectLease:      deploy.DefaultConfig().LeaseTTL,
		acme:              acmeOptions{challenge: acme.ChallengeHTTP01, checkEvery: time.Minute},
	}
}

func newServerCmd() *cobra.Command {
	opts := defaultServerOptions()
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the control plane",
		Long: `Run the control plane: the API agents pull their desired state from and report
to, and the CLI talks to. It serves HTTPS: at first start it makes a private CA in
<data-dir>/tls and a serving certificate for this machine's names and addresses
(more with --tls-name), or uses --tls-cert/--tls-key. Every token it prints carries
the CA's fingerprint, and clients verify the server against it.

At first start it also makes an admin token, prints it once and writes it to
<data-dir>/admin-token (mode 0600), and writes the CLI config of this machine
(~/.config/hatch/config.json, or --cli-config), so that hatch token create --join
and the other commands work here without flags. The data dir is its owner's only
(0700, files 0600): an existing one open to others is tightened if it holds the
server's files, and refused otherwise. SIGINT or SIGTERM shut it down gracefully.

It keeps its state in <data-dir>/hatch.db (SQLite) unless --store, or the
HATCH_STORE variable, names a PostgreSQL database (postgres://user@host:port/db).
The database's password never goes on the command line: put it in a password
file (PGPASSFILE, ~/.pgpass), or the whole URL in HATCH_STORE. hatch server
migrate copies a SQLite store into PostgreSQL.

Several servers on one PostgreSQL database are given the same CA, seal key and
admin token: hatch server init writes them once, and each server's --data-dir
starts as a copy. Each server registers --advertise-url in the database, and
every desired-state answer lists the live servers: hosts keep that list and go
to the next server when theirs stops answering.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.storeEnv = os.Getenv(storeEnv)
			return runServer(cmd.Context(), opts, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.AddCommand(newServerMigrateCmd(), newServerInitCmd())
	f := cmd.Flags()
	f.StringVar(&opts.listen, "listen", ":7700", "address to serve the API on")
	f.StringVar(&opts.dataDir, "data-dir", "./hatch-data", "directory for the database, blobs, keys and the admin token")
	f.StringVar(&opts.store, "store", "", "store: sqlite:<path> (default sqlite:<data-dir>/hatch.db) or postgres://user@host:port/database, "+
		"its password in PGPASSFILE; or the URL in "+storeEnv)
	f.DurationVar(&opts.liveness, "liveness-timeout", opts.liveness,
		"how long a host may go without a report before it is marked down")
	f.StringVar(&opts.tls.certFile, "tls-cert", "", "serve this certificate (PEM, its chain after it) instead of one from the server's own CA")
	f.StringVar(&opts.tls.keyFile, "tls-key", "", "the private key of --tls-cert (PEM)")
	f.StringArrayVar(&opts.tls.names, "tls-name", nil, "an extra host name or IP address the serving certificate covers (repeatable)")
	f.BoolVar(&opts.tls.insecureHTTP, "insecure-http", false, "serve plain HTTP (tokens travel in the clear): refused unless --listen is a loopback address")
	f.StringVar(&opts.cliConfig, "cli-config", "", `where to write the CLI config of this machine (default <user config dir>/hatch/config.json; "-" for nowhere)`)
	f.IntVar(&opts.authFailureBurst, "auth-failure-burst", opts.authFailureBurst,
		"failed authentications a client address may make in a row before it is answered 429")
	f.DurationVar(&opts.authFailureRefill, "auth-failure-refill", opts.authFailureRefill,
		"how often one failed authentication of an address is forgiven")
	f.DurationVar(&opts.requestTimeout, "request-timeout", opts.requestTimeout,
		"how long the server may take to answer a plain API request (a plan of a large project, say) before it answers that it ran out of time")
	f.StringVar(&opts.advertiseURL, "advertise-url", "", "the URL hosts and clients reach this server at, listed to them "+
		"with the other live servers (default: the --listen address if it names one)")
	f.StringVar(&opts.acme.ca, "acme-ca", "", "the ACME directory URL of the CA certificates for routes come from (tls: auto); without one, routes are served over plain HTTP unless they bring their own certificate")
	f.StringVar(&opts.acme.email, "acme-email", "", "the contact address of the ACME account (required with --acme-ca)")
	f.StringVar(&opts.acme.caRoot, "acme-ca-root", "", "a PEM file of root certificates to trust for the ACME CA's own HTTPS (a private or test CA)")
	f.StringVar(&opts.acme.challenge, "acme-challenge", opts.acme.challenge, "the ACME challenge the hosts answer: http-01 (the CA connects to their port 80) or tls-alpn-01 (to their HTTPS port, 443)")
	f.DurationVar(&opts.acme.checkEvery, "acme-check-interval", opts.acme.checkEvery, "how often certificates are checked for renewal")
	_ = f.MarkHidden("acme-check-interval") // for tests; the name exists, so this cannot fail
	f.IntVar(&opts.maxReplicas, "max-replicas", opts.maxReplicas,
		fmt.Sprintf("the most replicas a plan may ask for per egg (at most %d)", spec.MaxReplicas))
	f.StringVar(&opts.maxHostMemory, "max-host-memory", opts.maxHostMemory,
		"the most memory a host's report is believed to offer (a host reporting more is placed on as if it had this; hatch hosts set pins more)")
	f.Float64Var(&opts.maxHostCPUs, "max-host-cpus", opts.maxHostCPUs,
		"the most CPUs a host's report is believed to offer (as --max-host-memory)")
	f.IntVar(&opts.keepApplies, "keep-applies", opts.keepApplies,
		fmt.Sprintf("how many applies of each project the history keeps, with the build contexts they used: "+
			"hatch rollback reaches that far back (1 to %d)", deploy.MaxKeepApplies))
	f.DurationVar(&opts.loopsLease, "loops-lease", opts.loopsLease,
		"term of the lease of the background loops, which one server runs at a time: another takes them over within it and a third of it")
	f.DurationVar(&opts.projectLease, "project-lease", opts.projectLease,
		"term of a project's lease: how long a server that died keeps the project locked at most")
	return cmd
}

func runServer(ctx context.Context, opts serverOptions, stdout, stderr io.Writer) error {
	cfg := server.DefaultConfig()
	cfg.AuthFailureBurst, cfg.AuthFailureRefill = opts.authFailureBurst, opts.authFailureRefill
	if opts.requestTimeout <= 0 {
		return fmt.Errorf("--request-timeout: must be positive, not %v", opts.requestTimeout)
	}
	cfg.RequestTimeout = opts.requestTimeout
	if err := cfg.Validate(); err != nil {
		return err
	}
	deployCfg := deploy.DefaultConfig()
	deployCfg.MaxReplicas, deployCfg.LeaseTTL = opts.maxReplicas, opts.projectLease
	if err := deployCfg.Validate(); err != nil {
		return fmt.Errorf("--max-replicas, --project-lease: %w", err)
	}
	if opts.loopsLease <= 0 {
		return fmt.Errorf("--loops-lease: must be positive, not %v", opts.loopsLease)
	}
	if opts.keepApplies < 1 || opts.keepApplies > deploy.MaxKeepApplies {
		return fmt.Errorf("--keep-applies: %d is not between 1 and %d", opts.keepApplies, deploy.MaxKeepApplies)
	}
	deployCfg.KeepApplies = opts.keepApplies
	fleetCfg := fleet.DefaultConfig()
	fleetCfg.LivenessTimeout = opts.liveness
	caps, err := hostCapacityCaps(opts.maxHostMemory, opts.maxHostCPUs)
	if err != nil {
		return err
	}
	fleetCfg.MaxHostCapacity = caps
	if err := fleetCfg.Validate(); err != nil {
		return err
	}
	loc, err := resolveStore(opts.store, opts.storeEnv, opts.dataDir)
	if err != nil {
		return err
	}
	if err := checkPlainHTTP(ctx, opts.tls, opts.listen); err != nil {
		return err
	}
	// The database, keys and tokens: for the owner's eyes only.
	if (opts.acme.ca == "") != (opts.acme.email == "") {
		return fmt.Errorf("--acme-ca and --acme-email go together: the CA needs a contact for the account")
	}
	if err := fsutil.PrivateDir(opts.dataDir, "hatch.db", adminTokenFile, sealKeyFile); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	log := newServerLogger(stderr)
	defer func() { _ = log.Sync() }() // stderr may not support sync

	st, err := openStore(ctx, loc, log)
	if err != nil {
		return err
	}
	defer st.Close()
	// The fingerprint goes into every token, so that clients can pin the server.
	transport, err := loadServing(opts.tls, opts.dataDir, opts.listen, time.Now())
	if err != nil {
		return err
	}
	tokenPath := filepath.Join(opts.dataDir, adminTokenFile)
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
	blobs, err := openBlobs(ctx, st, opts.dataDir, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", opts.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// Agents on this machine advertise loopback mesh addresses; a server
	// reached over the network refuses them (fleet.Config.LoopbackMesh).
	fleetCfg.LoopbackMesh = onLoopback(ln.Addr())
	url := localURL(ln.Addr(), transport)
	servers, err := newRoster(st, opts, url, log)
	if err != nil {
		ln.Close()
		return err
	}
	srv, err := wireServer(st, blobs, opts.dataDir, cfg, fleetCfg, deployCfg, opts.acme, opts.loopsLease, hash, transport.fingerprint, servers, log)
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
	if err := writeLocalCLIConfig(opts.cliConfig, client.Config{Server: url, Token: adminToken}, stdout); err != nil {
		log.Warn("CLI config not written", zap.Error(err))
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

// wireServer is the one wiring of the control plane over the embedded
// store: the providers that turn projects into desired state, the apply
// protocol and the fleet over them, and the API over both. `hatch server`
// and `hatch up` both run what it returns.
func wireServer(st controlStore, blobs blob.Storage, dataDir string, cfg server.Config, fleetCfg fleet.Config, deployCfg deploy.Config,
	acmeOpts acmeOptions, loopsLease time.Duration, adminHash, fingerprint string, servers server.ServerList, log *zap.Logger) (*server.Server, error) {
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
		Desired: st, Statuses: st, Records: st, Events: st, Secrets: st,
		Fleet: provider.StoreFleet{List: st, Identities: st, Reports: st, Capacities: st,
			MaxCapacity: fleetCfg.MaxHostCapacity, LoopbackMesh: fleetCfg.LoopbackMesh},
		Box:       box,
		ACME:      acmeOpts.ca != "",
		OnTLSAuto: func() { certs.Kick() },
		Logger:    log.With(zap.String("component", "providers")),
		Now:       time.Now,
	})
	if err != nil {
		return nil, err
	}
	var background server.CertificateLoop
	if acmeOpts.ca != "" {
		if certs, err = newACME(acmeOpts, dataDir, box, providers, st, log); err != nil {
			return nil, err
		}
		background = certs
	}
	applies, err := deploy.New(deployCfg, deploy.Deps{
		Resources: st, Plans: st, Leases: st, Applies: st, Projects: st, Events: st, Reports: st,
		Sources: blobs, Providers: providers, ServerID: id, Logger: log, Now: time.Now,
	})
	if err != nil {
		return nil, err
	}
	hosts, err := fleet.New(fleetCfg, fleet.Deps{
		Liveness: st, Statuses: st, Desired: st, Events: st, Retention: st, Applies: st, Projects: st,
		JoinTokens: st, Members: st, AdminTokens: st, Capacities: st, Blobs: blobs, Fingerprint: fingerprint, HostCA: hostCA, Peers: providers,
		Logger: log, Now: time.Now,
	})
	if err != nil {
		return nil, err
	}
	loops, err := leader.New(loopsLease, leader.Deps{Leases: st, ServerID: id, Logger: log})
	if err != nil {
		return nil, err
	}
	return server.New(cfg, server.Deps{
		Deploy: applies, Fleet: hosts, Loops: loops, Desired: st, Box: box, Blobs: blobs,
		Auth: server.NewTokenAuth(adminHash, st, time.Now), Servers: servers, Logger: log, Now: time.Now,
		Certificates: background, TLS: certificateStatus{providers: providers, acme: certs},
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
		ac := api.Certificate{Host: n.Host, Source: provider.SourceACME, LastError: errs[n.Host]}
		if n.Mode == contract.TLSSecret {
			ac.Source = provider.SourceSecret
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
func newACME(opts acmeOptions, dataDir string, box *seal.Box, providers *provider.Set, events acmeEvents, log *zap.Logger) (*acme.Manager, error) {
	httpClient := http.DefaultClient
	if opts.caRoot != "" {
		pem, err := os.ReadFile(opts.caRoot)
		if err != nil {
			return nil, fmt.Errorf("--acme-ca-root: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--acme-ca-root %s: no PEM certificate in it", opts.caRoot)
		}
		httpClient = &http.Client{Timeout: 30 * time.Second,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, Proxy: http.ProxyFromEnvironment}}
	}
	m, err := acme.New(acme.Config{
		DirectoryURL: opts.ca, Email: opts.email, Challenge: opts.challenge, HTTPClient: httpClient,
		AccountKeyFile: filepath.Join(dataDir, acmeAccountFile), StateFile: filepath.Join(dataDir, acmeStateFile), Box: box,
		Certificates: providers, Events: events, Changes: events.WatchEvents, Logger: log, CheckEvery: opts.checkEvery,
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

// writeLocalCLIConfig writes the CLI config where --cli-config says: by
// default the user's config dir (none for a user without a home, as a
// service may be), "-" for nowhere.
func writeLocalCLIConfig(flag string, cfg client.Config, stdout io.Writer) error {
	path := flag
	switch flag {
	case "-":
		return nil
	case "":
		dir, err := os.UserConfigDir()
		if err != nil {
			return fmt.Errorf("no user config dir (%w): pass --cli-config", err)
		}
		path = client.UserConfigPath(dir)
	}
	return writeCLIConfig(path, cfg, stdout)
}

// newServerLogger logs JSON lines at info level to w.
func newServerLogger(w io.Writer) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	return zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(w), zap.InfoLevel))
}
