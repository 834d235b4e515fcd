package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/agent"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/store/postgres"
	"github.com/hatchery/hatchery/internal/store/sqlite"
	"github.com/hatchery/hatchery/internal/testutil/pgtest"
)

// The fleet benchmark's knobs. HATCH_FLEET_AGENTS lists the fleet sizes
// (each a sub-benchmark, agents=N); `-bench 'Fleet/agents=100$'` runs one.
const (
	fleetAgentsEnv = "HATCH_FLEET_AGENTS"
	fleetSizes     = "100,1000,2000"
	// HATCH_FLEET_THROUGHPUT=0 leaves the 50-resource applies out: at 1,000
	// hosts each takes minutes.
	fleetThroughputEnv = "HATCH_FLEET_THROUGHPUT"
	// fleetAPIJoins is how many hosts join through the join API, at most
	// fleetJoinConcurrency at a time; the others are recorded straight in
	// the store (see joinFleet).
	fleetAPIJoins        = 100
	fleetJoinConcurrency = 8
	fleetHeartbeat       = 2 * time.Second  // the agent's HeartbeatInterval
	fleetPollWait        = 30 * time.Second // the agent's PollWait
	fleetWindow          = 20 * time.Second // the steady-state window CPU is measured over
	fleetApplies         = 3                // applies whose delivery is measured
	fleetGoal            = 500 * time.Millisecond
)

// BenchmarkFleet: N simulated agents, each long-polling its desired state
// and reporting its status every 2 s over HTTPS as the real agent does,
// against two `hatch server` processes on one PostgreSQL database (the
// agents spread over both, every apply through the first), then, in the
// same run, one on SQLite. The servers are real processes of the built
// binary, so their CPU and memory are theirs alone.
//
// Per store: from the apply's write of the desired states (their
// updated_at: every host's state of one apply is written in one
// transaction) to each agent receiving its own, p50 and p99, and p99 over
// the goal of 500 ms; the servers' CPU over a steady-state window (no apply: reports
// and long-polls only) per agent, in thousandths of a core, and PostgreSQL's
// own; the servers' resident memory; and applies per second of a
// 50-resource project through the first server, PostgreSQL's over SQLite's.
func BenchmarkFleet(b *testing.B) {
	sizes, err := parseFleetSizes(os.Getenv(fleetAgentsEnv))
	if err != nil {
		b.Fatal(err)
	}
	throughput := 3 // applies of the 50-resource project timed
	if v := os.Getenv(fleetThroughputEnv); v != "" {
		if throughput, err = strconv.Atoi(v); err != nil || throughput < 0 {
			b.Fatalf("%s=%q: want how many applies of the 50-resource project to time (0: none)", fleetThroughputEnv, v)
		}
	}
	raiseFileLimit(b)
	bin := buildHatchBinary(b)
	pg := pgtest.Shared(b)
	for _, n := range sizes {
		b.Run(fmt.Sprintf("agents=%d", n), func(b *testing.B) {
			var onPG, onSQLite fleetFigures
			for range b.N {
				onPG.add(runFleet(b, bin, n, pg, throughput))
				onSQLite.add(runFleet(b, bin, n, nil, throughput))
			}
			onPG.report(b, "pg2")
			onSQLite.report(b, "sqlite1")
			if throughput > 0 {
				b.ReportMetric(onPG.appliesPerSecond()/onSQLite.appliesPerSecond(), "pg/sqlite-applies")
			}
		})
	}
}

// The benchmark's fleet, small, as a test: 10 simulated agents spread over
// two servers (in this process) on one PostgreSQL database, joined through
// both; an apply through the first reaches every agent, those polling the
// second too, well before their 30 s polls end, and each host's desired
// state carries a write time no later than its agent's receipt.
func TestAFleetOnTwoServersGetsEachApplyAtOnce(t *testing.T) {
	const n = 10
	servers := startTwoServers(t)
	cfg, url, dir := servers.cfg, servers.storeURL, servers.dir
	t.Setenv(client.EnvServer, cfg.Server)
	t.Setenv(client.EnvToken, cfg.Token)
	st, err := postgres.Open(t.Context(), url, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	var fig fleetFigures
	ids := joinFleet(t, st, cfg, []*fleetServer{{url: "https://" + servers.addrA}, {url: "https://" + servers.addrB}}, n, &fig)
	agents, stop := startSimAgents(t, st, ids)
	defer stop()
	time.Sleep(time.Second) // every agent is in a 30 s poll
	applyReplicas(t, dir, 0, n)
	for i, d := range deliveries(t, st, agents) {
		if d < 0 || d >= fleetPollWait/2 {
			t.Errorf("host %s (polling %s) received its desired state %v after its write", ids[i].Name, ids[i].Server, d)
		}
	}
}

// parseFleetSizes reads a comma-separated list of fleet sizes ("" gives the
// default).
func parseFleetSizes(s string) ([]int, error) {
	if s == "" {
		s = fleetSizes
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s=%q: want a comma-separated list of fleet sizes, such as %s", fleetAgentsEnv, s, fleetSizes)
		}
		out = append(out, n)
	}
	return out, nil
}

// raiseFileLimit raises the soft limit on open files to the hard one: each
// agent holds up to two connections, and the servers (children, inheriting
// it) as many.
func raiseFileLimit(b *testing.B) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("open files limit %d", lim.Cur)
}

// fleetFigures are one store's figures, pooled over the benchmark's rounds.
type fleetFigures struct {
	delivery    []time.Duration // per agent and apply
	serverMilli []float64       // the servers' CPU per agent, thousandths of a core
	dbMilli     []float64       // PostgreSQL's CPU per agent (0 for SQLite)
	agentMilli  []float64       // the simulated agents' own CPU per agent (this process's)
	rssMB       []float64       // the servers' resident memory, summed
	followed    []time.Duration // `hatch apply` following its rollout to the end, without --no-wait
	status      []time.Duration // `hatch status` of the project on every host
	applies     int             // of the 50-resource project
	appliesTook time.Duration
	joins       int // through the API
	joinsTook   time.Duration
}

func (f *fleetFigures) add(g fleetFigures) {
	f.delivery = append(f.delivery, g.delivery...)
	f.followed = append(f.followed, g.followed...)
	f.status = append(f.status, g.status...)
	f.serverMilli = append(f.serverMilli, g.serverMilli...)
	f.dbMilli = append(f.dbMilli, g.dbMilli...)
	f.agentMilli = append(f.agentMilli, g.agentMilli...)
	f.rssMB = append(f.rssMB, g.rssMB...)
	f.applies += g.applies
	f.appliesTook += g.appliesTook
	f.joins += g.joins
	f.joinsTook += g.joinsTook
}

func (f *fleetFigures) appliesPerSecond() float64 {
	return float64(f.applies) / f.appliesTook.Seconds()
}

func (f *fleetFigures) report(b *testing.B, prefix string) {
	p99 := percentile(f.delivery, 99)
	b.ReportMetric(ms(percentile(f.delivery, 50)), prefix+"-p50-ms")
	b.ReportMetric(ms(p99), prefix+"-p99-ms")
	b.ReportMetric(float64(p99)/float64(fleetGoal), prefix+"-p99/500ms")
	b.ReportMetric(percentile(f.followed, 50).Seconds(), prefix+"-apply-followed-s")
	b.ReportMetric(percentile(f.status, 50).Seconds(), prefix+"-status-s")
	b.ReportMetric(mean(f.serverMilli), prefix+"-server-mcpu/agent")
	if m := mean(f.dbMilli); m > 0 {
		b.ReportMetric(m, prefix+"-db-mcpu/agent")
	}
	b.ReportMetric(mean(f.agentMilli), prefix+"-simagent-mcpu/agent")
	b.ReportMetric(mean(f.rssMB), prefix+"-server-rss-MB")
	if f.applies > 0 {
		b.ReportMetric(f.appliesPerSecond(), prefix+"-applies/s")
	}
	b.ReportMetric(float64(f.joins)/f.joinsTook.Seconds(), prefix+"-joins/s")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

// fleetStore is what the benchmark itself reads and writes of the servers'
// store: hosts recorded as a join would, liveness, desired states.
type fleetStore interface {
	store.JoinTokens
	store.Members
	store.HostList
	store.DesiredStates
	io.Closer
}

// runFleet runs one round on one store: two servers on a new database of
// pg, or one on SQLite when pg is nil; throughput applies of the
// 50-resource project are timed.
func runFleet(b *testing.B, bin string, n int, pg *pgtest.Cluster, throughput int) fleetFigures {
	ctx := b.Context()
	dir := b.TempDir()
	cfgPath := filepath.Join(dir, "config.json")
	var env []string
	var pgURL string
	if pg != nil {
		pgURL = pg.URL(pg.NewDatabase(b))
		env = append(env, storeEnv+"="+pgURL)
	}
	dataA := filepath.Join(dir, "a")
	a := startFleetServer(b, bin, env, n, "--data-dir", dataA, "--cli-config", cfgPath)
	servers := []*fleetServer{a}
	// Stopped at the end of the round, not of the benchmark: the next
	// store's round must have the machine to itself.
	defer func() {
		for _, s := range servers {
			s.stop()
		}
	}()
	cfg, ok, err := client.Load(cfgPath)
	if err != nil || !ok {
		b.Fatalf("server A wrote no CLI config: %v", err)
	}
	if pg != nil {
		dataB := filepath.Join(dir, "b")
		copySharedFiles(b, dataA, dataB)
		servers = append(servers, startFleetServer(b, bin, env, n, "--data-dir", dataB, "--cli-config", "-"))
	}
	b.Setenv(client.EnvServer, cfg.Server)
	b.Setenv(client.EnvToken, cfg.Token)

	var st fleetStore
	if pg != nil {
		st, err = postgres.Open(ctx, pgURL, zap.NewNop())
	} else {
		st, err = sqlite.Open(ctx, filepath.Join(dataA, "hatch.db"), zap.NewNop())
	}
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()

	var fig fleetFigures
	ids := joinFleet(b, st, cfg, servers, n, &fig)

	agents, stopAgents := startSimAgents(b, st, ids)
	defer stopAgents()

	// The first apply places one replica on every host; each of the next
	// changes every host's workload.
	applyFleet := func(round int) []time.Duration {
		applyReplicas(b, dir, round, n)
		return deliveries(b, st, agents)
	}
	applyFleet(0)
	time.Sleep(2 * fleetHeartbeat) // the apply's own reports are over

	cpu0, db0, self0 := cpuTicks(b, servers), pgTicks(b, pg), procTicks(b, os.Getpid(), false)
	time.Sleep(fleetWindow)
	cpu1, db1, self1 := cpuTicks(b, servers), pgTicks(b, pg), procTicks(b, os.Getpid(), false)
	fig.serverMilli = []float64{perAgentMilli(cpu1-cpu0, n)}
	fig.agentMilli = []float64{perAgentMilli(self1-self0, n)}
	if pg != nil {
		fig.dbMilli = []float64{perAgentMilli(db1-db0, n)}
	}
	rss := 0.0
	for _, s := range servers {
		rss += rssMB(b, s.cmd.Process.Pid)
	}
	fig.rssMB = []float64{rss}

	for round := 1; round <= fleetApplies; round++ {
		fig.delivery = append(fig.delivery, applyFleet(round)...)
		time.Sleep(fleetHeartbeat)
	}
	// As a user runs them: an apply following its rollout on every host to
	// the end, then the project's status.
	start := time.Now()
	hatchApply(b, writeReplicas(b, dir, fleetApplies+1, n))
	fig.followed = []time.Duration{time.Since(start)}
	start = time.Now()
	var out, errOut bytes.Buffer
	if code := Run(ctx, []string{"status", "fleet"}, &out, &errOut); code != 0 {
		b.Fatalf("hatch status fleet = %d: %s", code, errOut.String())
	}
	fig.status = []time.Duration{time.Since(start)}
	// On stderr at once: a benchmark's log shows only when it ends, and the
	// applies below take minutes each on a large fleet.
	fmt.Fprintf(os.Stderr, "BenchmarkFleet: %d agents on %d server(s): delivery p50 %v p99 %v, apply followed %v, status %v, "+
		"server CPU %.3f mcore/agent, db %.3f, simulated agents %.3f, RSS %.0f MB, %d API joins in %v\n",
		n, len(servers), percentile(fig.delivery, 50), percentile(fig.delivery, 99), fig.followed[0], fig.status[0],
		mean(fig.serverMilli), mean(fig.dbMilli), mean(fig.agentMilli), rss, fig.joins, fig.joinsTook)

	// Applies per second of a 50-resource project, on this fleet: the
	// first creates, the timed ones change every egg and secret.
	fifty := filepath.Join(dir, "fifty.yaml")
	for round := 0; throughput > 0 && round <= throughput; round++ {
		if err := os.WriteFile(fifty, fiftyResourceProject(round), 0o600); err != nil {
			b.Fatal(err)
		}
		for i := range 10 {
			b.Setenv(fmt.Sprint("S", i), fmt.Sprint("value-", round, "-", i))
		}
		start := time.Now()
		hatchApply(b, fifty, "--no-wait")
		if round > 0 {
			fig.applies++
			fig.appliesTook += time.Since(start)
		}
	}
	if throughput > 0 {
		b.Logf("%d agents on %d server(s): %.3f applies/s of the 50-resource project", n, len(servers), fig.appliesPerSecond())
	}
	return fig
}

// startSimAgents starts a simulated agent for each identity and waits until
// every host is up; stop ends them.
func startSimAgents(tb testing.TB, st fleetStore, ids []agent.Identity) (agents []*simAgent, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	agents = make([]*simAgent, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		agents[i] = newSimAgent(tb, id, fmt.Sprintf("10.%d.%d.%d:7702", 100+i>>16, i>>8&255, i&255))
		wg.Add(1)
		go func() { defer wg.Done(); agents[i].run(ctx) }()
	}
	stop = func() { cancel(); wg.Wait() }
	n := len(ids)
	ok, up := false, 0
	defer func() {
		if !ok {
			tb.Logf("%d of %d hosts were up", up, n)
			stop()
		}
	}()
	eventually(tb, time.Minute+time.Duration(n)*30*time.Millisecond, fmt.Sprintf("all %d hosts are up", n), func() bool {
		hosts, err := st.ListHosts(tb.Context())
		up = 0
		for _, h := range hosts {
			if h.State == store.HostUp {
				up++
			}
		}
		return err == nil && up == n
	})
	ok = true
	return agents, stop
}

// applyReplicas applies with --no-wait (in dir) the project "fleet" of one
// egg of n replicas, its image tagged round: on a fleet of n hosts every
// host gets one, and each new round changes every host's workload.
func applyReplicas(tb testing.TB, dir string, round, n int) {
	hatchApply(tb, writeReplicas(tb, dir, round, n), "--no-wait")
}

// writeReplicas writes applyReplicas's project file and returns its path.
func writeReplicas(tb testing.TB, dir string, round, n int) string {
	project := filepath.Join(dir, "hatch.yaml")
	yaml := fmt.Sprintf("project: fleet\neggs:\n  app:\n    image: registry.local/app:%d\n    pull: missing\n    replicas: %d\n", round, n)
	if err := os.WriteFile(project, []byte(yaml), 0o600); err != nil {
		tb.Fatal(err)
	}
	return project
}

// hatchApply runs `hatch apply -f path --yes` with more flags (in this
// process, against HATCH_SERVER): with --no-wait it returns once the apply
// wrote every desired state, the deliveries being watched here.
//
// An apply that fails is logged and tried once more (applying the same file
// again is safe): at 1,000 agents on a loaded machine a plan can outlast the
// server's 30 s request deadline, and the answer written after it reaches
// the client as "tls: bad record MAC" (Go's TLS on a connection whose write
// deadline passed).
func hatchApply(b testing.TB, path string, flags ...string) {
	for attempt := 1; ; attempt++ {
		var out, errOut bytes.Buffer
		code := Run(context.Background(), append([]string{"apply", "-f", path, "--yes"}, flags...), &out, &errOut)
		if code == 0 {
			return
		}
		if attempt == 2 {
			b.Fatalf("hatch apply -f %s = %d\n%s\n%s", path, code, out.String(), errOut.String())
		}
		b.Logf("hatch apply -f %s = %d, trying again: %s", path, code, errOut.String())
	}
}

// fiftyResourceProject is a project of 50 resources (20 eggs, 10 networks,
// 10 volumes, 10 secrets from $S0..$S9); each round changes every egg.
func fiftyResourceProject(round int) []byte {
	var y strings.Builder
	y.WriteString("project: fifty\neggs:\n")
	for i := range 20 {
		fmt.Fprintf(&y, "  e%d:\n    image: registry.local/e:1\n    pull: missing\n    env: {ROUND: \"%d\"}\n    networks: [n%d]\n    secrets: [s%d]\n", i, round, i%10, i%10)
		if i < 10 {
			fmt.Fprintf(&y, "    volumes: [\"v%d:/data\"]\n", i)
		}
	}
	y.WriteString("networks:\n")
	for i := range 10 {
		fmt.Fprintf(&y, "  n%d: {}\n", i)
	}
	y.WriteString("volumes:\n")
	for i := range 10 {
		fmt.Fprintf(&y, "  v%d: {}\n", i)
	}
	y.WriteString("secrets:\n")
	for i := range 10 {
		fmt.Fprintf(&y, "  s%d: {env: S%d}\n", i, i)
	}
	return []byte(y.String())
}

// joinFleet makes n hosts, spread over the servers in turn. The first
// fleetAPIJoins join through the join API as agents do (agent.JoinHost,
// fleetJoinConcurrency at a time), timed into fig. A join rewrites every
// host's desired state with the new peer set (fleet.Service.Join's
// syncPeers), so joins cost O(hosts) each and a fleet of 1,000 would take
// many minutes to join this way: the rest are recorded straight in the
// store, by the store call the join API makes (Members.JoinHost, spending a
// join token's use), with a host token made as the server makes one. The
// first apply then writes every host's peers once.
func joinFleet(b testing.TB, st fleetStore, cfg client.Config, servers []*fleetServer, n int, fig *fleetFigures) []agent.Identity {
	ctx := b.Context()
	admin, err := pki.ParseToken(cfg.Token)
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]agent.Identity, n)
	viaAPI := min(n, fleetAPIJoins)
	var out, errOut bytes.Buffer
	if code := Run(ctx, []string{"token", "create", "--join", "--uses", strconv.Itoa(viaAPI)}, &out, &errOut); code != 0 {
		b.Fatalf("hatch token create --join = %d %s", code, errOut.String())
	}
	joinToken := strings.TrimSpace(out.String())
	agentsDir := b.TempDir()
	sem := make(chan struct{}, fleetJoinConcurrency)
	errs := make(chan error, viaAPI)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range viaAPI {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			server := servers[i%len(servers)].url
			id, err := agent.JoinHost(ctx, filepath.Join(agentsDir, strconv.Itoa(i)), server, joinToken, fmt.Sprintf("node-%d", i), zap.NewNop())
			if err != nil {
				errs <- err
				return
			}
			ids[i] = id
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatalf("join: %v", err)
	}
	fig.joins, fig.joinsTook = viaAPI, time.Since(start)

	now := time.Now()
	join := pki.NewToken(pki.KindJoin, admin.Fingerprint)
	if err := st.CreateJoinToken(ctx, store.JoinToken{ID: "fleet-bench", Hash: join.Hash(), CreatedAt: now,
		ExpiresAt: now.Add(time.Hour), MaxUses: n}); err != nil {
		b.Fatal(err)
	}
	for i := viaAPI; i < n; i++ {
		host := pki.NewToken(pki.KindHost, admin.Fingerprint)
		id := agent.Identity{Server: servers[i%len(servers)].url, HostID: fmt.Sprintf("h-f1ee%08x", i), Name: fmt.Sprintf("node-%d", i),
			Token: host.String(), CAFingerprint: admin.Fingerprint}
		if err := st.JoinHost(ctx, join.Hash(), store.HostIdentity{ID: id.HostID, Name: id.Name, TokenHash: host.Hash(), JoinedAt: now}); err != nil {
			b.Fatal(err)
		}
		ids[i] = id
	}
	return ids
}

// deliveries waits until every agent received the desired state stored for
// its host (with the fleet's peers, as the agent gets it), and returns, for
// each, the delay from that state's write to its receipt.
func deliveries(b testing.TB, st fleetStore, agents []*simAgent) []time.Duration {
	peers, err := st.DesiredPeers(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	written := make([]store.DesiredState, len(agents))
	for i, a := range agents {
		d, err := st.DesiredState(b.Context(), a.id.HostID)
		if err != nil {
			b.Fatal(err)
		}
		if d.UpdatedAt.IsZero() {
			b.Fatalf("host %s has no desired state", a.id.HostID)
		}
		written[i] = store.DesiredState{Version: contract.CombineVersions(d.Version, peers.Version), UpdatedAt: d.UpdatedAt}
	}
	received := make([]time.Time, len(agents))
	eventually(b, 2*time.Minute, "every agent received its new desired state", func() bool {
		for i, a := range agents {
			if received[i].IsZero() {
				received[i], _ = a.receivedAt(written[i].Version)
				if received[i].IsZero() {
					return false
				}
			}
		}
		return true
	})
	delays := make([]time.Duration, len(agents))
	for i := range agents {
		delays[i] = received[i].Sub(written[i].UpdatedAt)
	}
	fmt.Fprintf(os.Stderr, "BenchmarkFleet: one apply's deliveries: min %v p10 %v p50 %v p90 %v p99 %v max %v\n",
		slices.Min(delays), percentile(delays, 10), percentile(delays, 50), percentile(delays, 90), percentile(delays, 99), slices.Max(delays))
	return delays
}

// simAgent is one simulated host: what the real agent does towards the
// control plane, without Docker. It long-polls its desired state (the
// first poll without waiting, then 30 s at a time) and reports every 2 s,
// at once after each new desired state too (the agent reports after each
// converge), every workload running and healthy at its spec, and its mesh
// address (so the fleet's peer list carries every host's, as it does with
// real agents).
type simAgent struct {
	id     agent.Identity
	mesh   []string
	cp     *agent.HTTPClient
	report chan struct{} // a report is due now

	mu       sync.Mutex // guards the fields below
	desired  contract.DesiredState
	received map[string]time.Time // version -> when it arrived
}

func newSimAgent(b testing.TB, id agent.Identity, meshAddress string) *simAgent {
	cp, err := agent.NewHTTPClient(id)
	if err != nil {
		b.Fatal(err)
	}
	return &simAgent{id: id, mesh: []string{meshAddress}, cp: cp, report: make(chan struct{}, 1), received: map[string]time.Time{}}
}

func (a *simAgent) run(ctx context.Context) {
	defer a.cp.Close()
	done := make(chan struct{})
	go func() { defer close(done); a.heartbeat(ctx) }()
	a.poll(ctx)
	<-done
}

func (a *simAgent) poll(ctx context.Context) {
	wait := time.Duration(0)
	for ctx.Err() == nil {
		a.mu.Lock()
		version := a.desired.Version
		a.mu.Unlock()
		began := time.Now()
		d, err := a.cp.DesiredState(ctx, version, wait)
		switch {
		case err == nil && d.Version != version:
			at := time.Now()
			a.mu.Lock()
			a.desired, a.received[d.Version] = d, at
			a.mu.Unlock()
			select {
			case a.report <- struct{}{}:
			default:
			}
			wait = fleetPollWait
		case err == nil || errors.Is(err, agent.ErrNotModified):
			wait = fleetPollWait
			if time.Since(began) < time.Second { // as the agent: no spinning on quick answers
				sleepCtx(ctx, time.Second)
			}
		default:
			sleepCtx(ctx, time.Second) // the agent backs off from 1 s
		}
	}
}

func (a *simAgent) heartbeat(ctx context.Context) {
	// Real agents start at unrelated moments: so do the simulated ones'
	// heartbeats.
	sleepCtx(ctx, rand.N(fleetHeartbeat))
	t := time.NewTicker(fleetHeartbeat)
	defer t.Stop()
	for {
		a.mu.Lock()
		d := a.desired
		a.mu.Unlock()
		var cs []contract.ContainerStatus
		for _, w := range d.Workloads {
			for slot := range w.Replicas {
				cs = append(cs, contract.ContainerStatus{WorkloadID: w.ID(), Slot: slot, State: contract.StateRunning,
					Healthy: true, SpecHash: contract.SpecHash(w), ContainerID: fmt.Sprintf("c-%s-%d", w.Egg, slot)})
			}
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = a.cp.ReportStatus(rctx, contract.StatusReport{HostID: a.id.HostID, Version: d.Version, Time: time.Now(), Containers: cs,
			MeshAddresses: a.mesh})
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.report:
		}
	}
}

func (a *simAgent) receivedAt(version string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.received[version]
	return at, ok
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// fleetServer is a `hatch server` process of the built binary.
type fleetServer struct {
	cmd  *exec.Cmd
	url  string
	stop func() // SIGTERM, then SIGKILL after 30 s; once
}

// startFleetServer starts `hatch server args...` on a loopback port, with
// env added to this process's, allowing n replicas per egg; it is stopped
// by its stop, or when the benchmark ends.
func startFleetServer(b *testing.B, bin string, env []string, n int, args ...string) *fleetServer {
	args = append([]string{"server", "--listen", "127.0.0.1:0", "--tls-name", "127.0.0.1",
		"--max-replicas", strconv.Itoa(max(n, 1000))}, args...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	logs, err := os.Create(filepath.Join(b.TempDir(), "server.log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = logs
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	var once sync.Once
	s := &fleetServer{cmd: cmd, stop: func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
			logs.Close()
		})
	}}
	b.Cleanup(s.stop)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if addr, ok := strings.CutPrefix(sc.Text(), "hatch server listening on "); ok {
			s.url = "https://" + addr
			break
		}
	}
	go func() {
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		close(exited)
	}()
	if s.url == "" {
		time.Sleep(100 * time.Millisecond)
		out, _ := os.ReadFile(logs.Name())
		b.Fatalf("hatch server never said where it listens:\n%s", out)
	}
	return s
}

// clockTicks is the unit of /proc's CPU times (USER_HZ, 100 on Linux).
const clockTicks = 100

// cpuTicks sums the user and system CPU of the servers' processes.
func cpuTicks(b *testing.B, servers []*fleetServer) int64 {
	var sum int64
	for _, s := range servers {
		sum += procTicks(b, s.cmd.Process.Pid, false)
	}
	return sum
}

// pgTicks sums the CPU of a PostgreSQL cluster: its postmaster's (with its
// children that ended) and its live children's. Zero for no cluster.
func pgTicks(b *testing.B, pg *pgtest.Cluster) int64 {
	if pg == nil {
		return 0
	}
	pidFile, err := os.ReadFile(filepath.Join(pg.Dir, "data", "postmaster.pid"))
	if err != nil {
		b.Fatal(err)
	}
	postmaster, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(pidFile), "\n", 2)[0]))
	if err != nil {
		b.Fatalf("postmaster.pid: %v", err)
	}
	sum := procTicks(b, postmaster, true)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if stat, err := procStat(pid); err == nil && stat[1] == strconv.Itoa(postmaster) { // field 4: ppid
			sum += procTicks(b, pid, false)
		}
	}
	return sum
}

// procStat returns the fields of /proc/<pid>/stat after the command's name
// (so field 3, the state, is at index 0).
func procStat(pid int) ([]string, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	return strings.Fields(string(raw[i+1:])), nil
}

// procTicks returns a process's utime+stime (fields 14 and 15), with
// cutime+cstime (16 and 17, its children waited for) if children.
func procTicks(b *testing.B, pid int, children bool) int64 {
	f, err := procStat(pid)
	if err != nil {
		b.Fatal(err)
	}
	fields := []int{14, 15}
	if children {
		fields = append(fields, 16, 17)
	}
	var sum int64
	for _, n := range fields {
		v, err := strconv.ParseInt(f[n-3], 10, 64)
		if err != nil {
			b.Fatalf("/proc/%d/stat field %d: %v", pid, n, err)
		}
		sum += v
	}
	return sum
}

// perAgentMilli turns CPU ticks over the window into thousandths of a core
// per agent.
func perAgentMilli(ticks int64, n int) float64 {
	return float64(ticks) / clockTicks / fleetWindow.Seconds() * 1000 / float64(n)
}

// rssMB reads a process's resident memory (VmRSS) in MB.
func rssMB(b *testing.B, pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				b.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb / 1024
		}
	}
	b.Fatalf("/proc/%d/status has no VmRSS", pid)
	return 0
}
