package cli

import (
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/hatchery/hatchery/internal/agent"
	"github.com/hatchery/hatchery/internal/agentd"
	"github.com/hatchery/hatchery/internal/apiclient"
	"github.com/hatchery/hatchery/internal/ingress"
	"github.com/hatchery/hatchery/internal/mesh"
)

func newAgentCmd() *cobra.Command {
	var (
		opts    agentd.Config
		labels  []string
		proxies []string
		servers []string
		debug   bool
	)
	cmd := &cobra.Command{
		Use:   "agent --server URL --join TOKEN [--name NAME] [--data-dir DIR]",
		Short: "Run the host agent: converge this host's Docker containers to the control plane's desired state",
		Long: "Run the host agent on a Docker host. The first start trades a join token (from\n" +
			"`hatch token create --join`) for this host's identity, verifying the server against\n" +
			"the CA fingerprint the token carries; the identity is kept in --data-dir, so later\n" +
			"starts need only --data-dir. The agent keeps the last desired state there too: if\n" +
			"the control plane is unreachable, containers keep running and the agent converges\n" +
			"from its cache. A cache older than the containers (its write failed) rolls nothing\n" +
			"back: every container is labelled with the generation of the desired state that made\n" +
			"it, and while one is newer than the cache, nothing but restarts in place happens until\n" +
			"the control plane answers, however long that takes (the report says so). Containers of\n" +
			"older agents, which carry no generation, are left alone if created after the cache was\n" +
			"written, until the control plane answers or --stale-cache-wait passes.\n\n" +
			"The host's data plane (the ingress's listeners, published ports, relay sockets and the\n" +
			"mesh port) runs in a process of its own that the agent starts and feeds over\n" +
			"--data-dir/dataplane.sock: it keeps serving its last routing table while no agent runs,\n" +
			"so a crashed, restarted or upgraded agent fails no request. The next agent adopts it; an\n" +
			"agent on a new binary upgrades it in place, the listening sockets handed over without\n" +
			"closing. Stopping the agent leaves it running: `hatch agent stop-dataplane` stops it.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := parseLabels(labels)
			if err != nil {
				return err
			}
			opts.Labels = l
			if opts.TrustedProxies, err = parsePrefixes(proxies); err != nil {
				return fmt.Errorf("--trusted-proxy: %w", err)
			}
			opts.Server = apiclient.JoinServers(apiclient.ParseServers(servers...))
			log, err := newDaemonLogger(debug)
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }()
			opts.Logger = log
			return agentd.Run(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&servers, "server", nil, "the control plane's URL, https://host:7700; several servers of one control plane "+
		"comma-separated or repeated (first start only: the agent then keeps the live servers' list the control plane gives)")
	f.StringVar(&opts.JoinToken, "join", "", "a join token (first start only)")
	hostname, _ := os.Hostname() // without one, the server names the host after its ID
	f.StringVar(&opts.Name, "name", hostname, "this host's name, as placement names it (first start only)")
	f.StringVar(&opts.DataDir, "data-dir", "/var/lib/hatch", "where the identity, the desired-state cache and the crash history are kept")
	f.StringVar(&opts.IngressAddr, "ingress-addr", ":8080", "where the ingress serves routed HTTP")
	f.StringVar(&opts.HTTPSAddr, "https-addr", ":443", `where the ingress serves HTTPS for routes with TLS ("" for none); one it cannot listen on is reported as a host problem, HTTP keeps serving`)
	f.StringArrayVar(&proxies, "trusted-proxy", nil, "an address or CIDR of a TLS-terminating proxy in front whose X-Forwarded-Proto: https is believed, so its requests are not redirected to HTTPS (repeatable)")
	f.StringVar(&opts.AdminAddr, "admin-addr", "127.0.0.1:7701", "where /healthz and /metrics are served")
	f.StringVar(&opts.PublishAddr, "publish-addr", "0.0.0.0", "the IP address published ports listen on")
	f.DurationVar(&opts.HoldTimeout, "hold-timeout", ingress.DefaultConfig().HoldTimeout,
		"how long the ingress holds the requests of an egg with a volume while its replica is replaced or restarted (then 503)")
	f.StringVar(&opts.MeshAddr, "mesh-addr", mesh.DefaultConfig().Addr, "where the mesh port listens for the other hosts' agents")
	f.StringSliceVar(&opts.Advertise, "advertise", nil, "ip:port where the other hosts reach this one's mesh port, tried in order (default: every non-loopback address of the host)")
	f.StringVar(&opts.SecretDir, "secret-dir", "", "the tmpfs directory for secret files (default /dev/shm/hatch/<host ID>)")
	f.BoolVar(&opts.NoExec, "no-exec", false, "refuse `hatch exec` on this host (logs are still served)")
	f.StringArrayVar(&labels, "label", nil, "KEY=VALUE put on every Docker object the agent creates (repeatable)")
	f.DurationVar(&opts.ConvergeInterval, "converge-interval", 0, "the timer converge's period (default 30s)")
	f.DurationVar(&opts.StaleCacheWait, "stale-cache-wait", agent.DefaultConfig().StaleCacheWait,
		"at start, how long to leave alone the containers of older agents (no generation label) created after the desired-state cache was written, until the control plane answers; containers of a later generation than the cache are left alone with no time limit")
	f.BoolVar(&debug, "debug", false, "log at debug level")
	for _, hidden := range []string{"secret-dir", "label", "converge-interval"} {
		_ = f.MarkHidden(hidden) // for tests and unusual hosts; the names exist, so this cannot fail
	}
	cmd.AddCommand(newStopDataPlaneCmd())
	return cmd
}

// parseLabels reads KEY=VALUE pairs.
func parseLabels(pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--label %q: want KEY=VALUE", p)
		}
		out[k] = v
	}
	return out, nil
}

// parsePrefixes reads IP addresses (one address each) and CIDRs.
func parsePrefixes(values []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range values {
		if p, err := netip.ParsePrefix(v); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(v)
		if err != nil {
			return nil, fmt.Errorf("%q is neither an IP address nor a CIDR (10.0.0.0/8)", v)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// newDaemonLogger returns the JSON logger of a long-running command, on
// stderr.
func newDaemonLogger(debug bool) (*zap.Logger, error) {
	cfg := zap.NewProductionConfig()
	cfg.EncoderConfig.TimeKey = "time"
	cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	cfg.Sampling = nil
	if debug {
		cfg.Level = zap.NewAtomicLevelAt(zap.DebugLevel)
	}
	log, err := cfg.Build()
	if err != nil {
		return nil, fmt.Errorf("logger: %w", err)
	}
	return log, nil
}
