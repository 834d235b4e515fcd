package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/deploy"
	"github.com/hatchery/hatchery/internal/fleet"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/serverd"
	"github.com/hatchery/hatchery/internal/spec"
)

// storeEnv is the variable hatch server reads its store from without --store.
const storeEnv = serverd.StoreEnv

func newServerCmd() *cobra.Command {
	cfg := serverd.DefaultConfig()
	maxHostMemory := fleet.MemoryFlag(cfg.MaxHostCapacity.Memory)
	maxHostCPUs := float64(cfg.MaxHostCapacity.MilliCPU) / 1000
	var cliConfig string // "" for the user's config dir, "-" for nowhere
	var notifyJSON, notifySlack []string
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
			caps, err := hostCapacityCaps(maxHostMemory, maxHostCPUs)
			if err != nil {
				return err
			}
			cfg.MaxHostCapacity, cfg.StoreEnv = caps, os.Getenv(storeEnv)
			cfg.Notify.Targets = notifyTargets(notifyJSON, notifySlack)
			cfg.WriteCLIConfig = func(url, adminToken string) error {
				return writeLocalCLIConfig(cliConfig, client.Config{Server: url, Token: adminToken}, cmd.OutOrStdout())
			}
			log := newServerLogger(cmd.ErrOrStderr())
			defer func() { _ = log.Sync() }() // stderr may not support sync
			cfg.Out, cfg.Logger = cmd.OutOrStdout(), log
			return serverd.Run(cmd.Context(), cfg)
		},
	}
	cmd.AddCommand(newServerMigrateCmd(), newServerInitCmd(), newServerNotifyKeyCmd(), newServerBackupKeyCmd())
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", ":7700", "address to serve the API on")
	f.StringVar(&cfg.DataDir, "data-dir", "./hatch-data", "directory for the database, blobs, keys and the admin token")
	f.StringVar(&cfg.Store, "store", "", "store: sqlite:<path> (default sqlite:<data-dir>/hatch.db) or postgres://user@host:port/database, "+
		"its password in PGPASSFILE; or the URL in "+storeEnv)
	f.DurationVar(&cfg.LivenessTimeout, "liveness-timeout", cfg.LivenessTimeout,
		"how long a host may go without a report before it is marked down")
	f.StringVar(&cfg.TLS.CertFile, "tls-cert", "", "serve this certificate (PEM, its chain after it) instead of one from the server's own CA")
	f.StringVar(&cfg.TLS.KeyFile, "tls-key", "", "the private key of --tls-cert (PEM)")
	f.StringArrayVar(&cfg.TLS.Names, "tls-name", nil, "an extra host name or IP address the serving certificate covers (repeatable)")
	f.BoolVar(&cfg.TLS.InsecureHTTP, "insecure-http", false, "serve plain HTTP (tokens travel in the clear): refused unless --listen is a loopback address")
	f.StringVar(&cliConfig, "cli-config", "", `where to write the CLI config of this machine (default <user config dir>/hatch/config.json; "-" for nowhere)`)
	f.IntVar(&cfg.AuthFailureBurst, "auth-failure-burst", cfg.AuthFailureBurst,
		"failed authentications a client address may make in a row before it is answered 429")
	f.DurationVar(&cfg.AuthFailureRefill, "auth-failure-refill", cfg.AuthFailureRefill,
		"how often one failed authentication of an address is forgiven")
	f.DurationVar(&cfg.RequestTimeout, "request-timeout", cfg.RequestTimeout,
		"how long the server may take to answer a plain API request (a plan of a large project, say) before it answers that it ran out of time")
	f.DurationVar(&cfg.FenceAfter, "fence-after", cfg.FenceAfter,
		"how long an agent whose status reports go unanswered keeps running the eggs of volumes with failover before it stops them, so that a volume restored elsewhere never runs twice (0: no fencing)")
	f.StringVar(&cfg.AdvertiseURL, "advertise-url", "", "the URL hosts and clients reach this server at, listed to them "+
		"with the other live servers (default: the --listen address if it names one)")
	f.StringVar(&cfg.ACME.CA, "acme-ca", "", "the ACME directory URL of the CA certificates for routes come from (tls: auto); without one, routes are served over plain HTTP unless they bring their own certificate")
	f.StringVar(&cfg.ACME.Email, "acme-email", "", "the contact address of the ACME account (required with --acme-ca)")
	f.StringVar(&cfg.ACME.CARoot, "acme-ca-root", "", "a PEM file of root certificates to trust for the ACME CA's own HTTPS (a private or test CA)")
	f.StringVar(&cfg.ACME.Challenge, "acme-challenge", cfg.ACME.Challenge, "the ACME challenge the hosts answer: http-01 (the CA connects to their port 80) or tls-alpn-01 (to their HTTPS port, 443)")
	f.DurationVar(&cfg.ACME.CheckEvery, "acme-check-interval", cfg.ACME.CheckEvery, "how often certificates are checked for renewal")
	_ = f.MarkHidden("acme-check-interval") // for tests; the name exists, so this cannot fail
	f.IntVar(&cfg.MaxReplicas, "max-replicas", cfg.MaxReplicas,
		fmt.Sprintf("the most replicas a plan may ask for per egg (at most %d)", spec.MaxReplicas))
	f.StringVar(&maxHostMemory, "max-host-memory", maxHostMemory,
		"the most memory a host's report is believed to offer (a host reporting more is placed on as if it had this; hatch hosts set pins more)")
	f.Float64Var(&maxHostCPUs, "max-host-cpus", maxHostCPUs,
		"the most CPUs a host's report is believed to offer (as --max-host-memory)")
	f.IntVar(&cfg.KeepApplies, "keep-applies", cfg.KeepApplies,
		fmt.Sprintf("how many applies of each project the history keeps, with the build contexts they used: "+
			"hatch rollback reaches that far back (1 to %d)", deploy.MaxKeepApplies))
	f.DurationVar(&cfg.LoopsLease, "loops-lease", cfg.LoopsLease,
		"term of the lease of the background loops, which one server runs at a time: another takes them over within it and a third of it")
	f.DurationVar(&cfg.ProjectLease, "project-lease", cfg.ProjectLease,
		"term of a project's lease: how long a server that died keeps the project locked at most")
	f.StringArrayVar(&notifyJSON, "notify", nil, "a webhook (https; http only on loopback) that every project's apply results, failed or "+
		"reverted rollouts, hosts lost or back, failed certificates and failed runs are posted to as signed JSON (repeatable)")
	f.StringArrayVar(&notifySlack, "notify-slack", nil, "as --notify, with a Slack-compatible body ({\"text\": ...}) (repeatable)")
	f.StringVar(&cfg.BackupStore, "backup-store", "", "where volume backups go: s3://bucket/prefix, its credentials in AWS_ACCESS_KEY_ID and "+
		"AWS_SECRET_ACCESS_KEY (or AWS_SHARED_CREDENTIALS_FILE), its endpoint in AWS_ENDPOINT_URL and region in AWS_REGION; "+
		"default: the control plane's own blob store, lost with its database")
	f.StringVar(&cfg.Notify.SecretFile, "notify-secret-file", "", "the file of the secret webhook deliveries are signed with "+
		"(default <data-dir>/notify.key, made at the first start; hatch server notify-key prints the keys)")
	return cmd
}

// notifyTargets are the --notify and --notify-slack flags' targets.
func notifyTargets(jsonURLs, slackURLs []string) []inputs.NotifyTarget {
	var out []inputs.NotifyTarget
	for _, u := range jsonURLs {
		out = append(out, inputs.NotifyTarget{URL: u})
	}
	for _, u := range slackURLs {
		out = append(out, inputs.NotifyTarget{URL: u, Format: inputs.NotifySlack})
	}
	return out
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
