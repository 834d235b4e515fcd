package cli

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/agent"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/testutil/pgtest"
)

// Terms short enough for takeover tests: a server paused or killed is
// replaced within the loops' lease and a third of it.
const (
	testLoopsLease   = "1500ms"
	testLiveness     = "2s"
	testProjectLease = "2s"
)

// hatchBinary is the real hatch binary, built once per test binary for the
// tests that pause or kill server processes, and removed by TestMain.
var hatchBinary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// buildHatchBinary returns the real hatch binary, building it at the first
// call.
func buildHatchBinary(t testing.TB) string {
	t.Helper()
	hatchBinary.once.Do(func() {
		if hatchBinary.dir, hatchBinary.err = os.MkdirTemp("", "hatch-bin-"); hatchBinary.err != nil {
			return
		}
		hatchBinary.path = filepath.Join(hatchBinary.dir, "hatch")
		cmd := exec.Command("go", "build", "-o", hatchBinary.path, "github.com/hatchery/hatchery/cmd/hatch")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			hatchBinary.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if hatchBinary.err != nil {
		t.Fatal(hatchBinary.err)
	}
	return hatchBinary.path
}

// removeHatchBinary removes what buildHatchBinary built, if anything.
func removeHatchBinary() {
	if hatchBinary.dir != "" {
		_ = os.RemoveAll(hatchBinary.dir)
	}
}

// serverProc is a `hatch server` process of the real binary.
type serverProc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	url  string
	logs *lockedBuffer
}

// startServerBinary runs `hatch server` on addr with the short test terms;
// HATCH_STORE comes from the test's environment.
func startServerBinary(t *testing.T, bin, name, addr string, args ...string) *serverProc {
	t.Helper()
	p := &serverProc{t: t, name: name, url: "https://" + addr, logs: &lockedBuffer{}}
	p.cmd = exec.Command(bin, append([]string{"server", "--listen", addr, "--tls-name", "127.0.0.1",
		"--loops-lease", testLoopsLease, "--liveness-timeout", testLiveness, "--project-lease", testProjectLease}, args...)...)
	p.cmd.Stderr = p.logs
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		if t.Failed() {
			t.Logf("server %s logs:\n%s", name, p.logs.String())
		}
	})
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "hatch server listening on ") {
			go func() { _, _ = io.Copy(io.Discard, out) }()
			return p
		}
	}
	t.Fatalf("server %s never said where it listens:\n%s", name, p.logs.String())
	return nil
}

func (p *serverProc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v to server %s: %v", sig, p.name, err)
	}
}

// metricsClient reads servers' /metrics with the admin token, trusting the
// CA in dataDir.
type metricsClient struct {
	http  *http.Client
	token string
}

func newMetricsClient(t *testing.T, dataDir, token string) *metricsClient {
	t.Helper()
	ca, err := os.ReadFile(filepath.Join(dataDir, "tls", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("no CA certificate in ca.pem")
	}
	return &metricsClient{token: token, http: &http.Client{Timeout: 2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}
}

// leading reads hatch_loops_leader of the server: "1", "0", or "" when it
// does not answer (paused, killed).
func (m *metricsClient) leading(p *serverProc) string { return m.gauge(p.url, "hatch_loops_leader") }

// gauge reads the value of the metric name at the server at url, "" when
// it does not answer.
func (m *metricsClient) gauge(url, name string) string {
	req, err := http.NewRequest("GET", url+"/metrics", nil)
	if err != nil {
		return ""
	}
	req.Header.Set("Authorization", "Bearer "+m.token)
	resp, err := m.http.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// oneHostState is the state `hatch hosts` shows for the one host, through
// the server the environment names.
func oneHostState(t *testing.T) string {
	_, out, _ := run(t, "hosts")
	for _, s := range []string{" up ", " down ", " unknown "} {
		if strings.Contains(out, s) {
			return strings.TrimSpace(s)
		}
	}
	return ""
}

// Two `hatch server` processes on one PostgreSQL database. A starts first
// and runs the background loops. SIGSTOPped past their lease, A is replaced
// by B within seconds, and B runs them: the host that stops reporting is
// marked down by B. SIGCONTed, A finds its lease gone, stops its loops and
// does not run them beside B. kill -9 of B, the holder now: A takes the
// loops back and marks the host, silent again, down.
func TestTheLoopsMoveToAnotherServerWhenTheirHolderIsPausedOrKilled(t *testing.T) {
	pg := pgtest.Shared(t)
	bin := buildHatchBinary(t)
	dir := t.TempDir()
	dataA, dataB, cfgPath := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "config.json")
	t.Setenv(storeEnv, pg.URL(pg.NewDatabase(t)))
	a := startServerBinary(t, bin, "A", freeAddr(t), "--data-dir", dataA, "--cli-config", cfgPath)
	cfg, ok, err := client.Load(cfgPath)
	if err != nil || !ok {
		t.Fatalf("server A wrote no CLI config: %v", err)
	}
	copySharedFiles(t, dataA, dataB)
	b := startServerBinary(t, bin, "B", freeAddr(t), "--data-dir", dataB, "--cli-config", "-")
	m := newMetricsClient(t, dataA, cfg.Token)
	eventually(t, 10*time.Second, "A runs the loops and B does not", func() bool { return m.leading(a) == "1" && m.leading(b) == "0" })

	// A host joined through A reports to B only, every half second.
	t.Setenv(client.EnvServer, b.url)
	t.Setenv(client.EnvToken, cfg.Token)
	code, joinToken, errOut := run(t, "token", "create", "--join")
	if code != 0 {
		t.Fatalf("hatch token create --join = %d %s", code, errOut)
	}
	id, err := agent.JoinHost(t.Context(), t.TempDir(), b.url, strings.TrimSpace(joinToken), "node-1", zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	runHost := func(server string) (stop func()) {
		id.Server = server
		host := &fakeHost{id: id, wait: 500 * time.Millisecond}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); host.run(ctx) }()
		return func() { cancel(); <-done }
	}
	stopHost := runHost(b.url)
	eventually(t, 10*time.Second, "the host is up", func() bool { return oneHostState(t) == "up" })

	// A paused past its lease: B takes the loops over within seconds.
	a.signal(syscall.SIGSTOP)
	paused := time.Now()
	eventually(t, 10*time.Second, "B takes the loops over from A, paused", func() bool { return m.leading(b) == "1" })
	t.Logf("B took the loops %v after A was paused (lease %s)", time.Since(paused).Round(100*time.Millisecond), testLoopsLease)
	// B runs liveness: the host stops reporting, B marks it down.
	stopHost()
	silent := time.Now()
	eventually(t, 10*time.Second, "B marks the silent host down, A being paused", func() bool { return oneHostState(t) == "down" })
	t.Logf("the silent host was down %v after its last report (liveness timeout %s)", time.Since(silent).Round(100*time.Millisecond), testLiveness)

	// A resumed: it finds its lease gone and stops its loops; B keeps them.
	a.signal(syscall.SIGCONT)
	eventually(t, 10*time.Second, "A, resumed, says it lost the loops", func() bool {
		return strings.Contains(a.logs.String(), "lost the background loops")
	})
	for range 10 { // 2 s: A retries every 0.5 s and finds B holding them
		if la, lb := m.leading(a), m.leading(b); la != "0" || lb != "1" {
			t.Fatalf("after A resumed: A leading %q, B %q; want B only", la, lb)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if strings.Contains(a.logs.String(), "(fenced)") {
		t.Log("A's loops tried a write after it resumed, and it was refused (fenced)")
	}

	// kill -9 of B, the holder: A takes the loops back and runs them.
	b.signal(syscall.SIGKILL)
	killed := time.Now()
	eventually(t, 10*time.Second, "A takes the loops back from B, killed", func() bool { return m.leading(a) == "1" })
	t.Logf("A took the loops %v after B was killed", time.Since(killed).Round(100*time.Millisecond))
	t.Setenv(client.EnvServer, a.url)
	stopHost = runHost(a.url)
	eventually(t, 10*time.Second, "the host reporting to A is up", func() bool { return oneHostState(t) == "up" })
	stopHost()
	eventually(t, 10*time.Second, "A marks the silent host down", func() bool { return oneHostState(t) == "down" })
}

// switchHost is a joined host without Docker, like fakeHost, whose
// replicas are reported running but healthy only once told so.
type switchHost struct {
	id      agent.Identity
	healthy atomic.Bool
	mu      sync.Mutex // guards ds
	ds      contract.DesiredState
}

func (h *switchHost) run(ctx context.Context) {
	cp, err := agent.NewHTTPClient(h.id)
	if err != nil {
		panic(err)
	}
	defer cp.Close()
	for ctx.Err() == nil {
		ds := h.desired()
		var cs []contract.ContainerStatus
		for _, w := range ds.Workloads {
			for slot := range w.Replicas {
				cs = append(cs, contract.ContainerStatus{WorkloadID: w.ID(), Slot: slot, State: contract.StateRunning,
					Healthy: h.healthy.Load(), SpecHash: contract.SpecHash(w), ContainerID: fmt.Sprintf("c-%s-%d", w.Egg, slot)})
			}
		}
		_ = cp.ReportStatus(ctx, contract.StatusReport{HostID: h.id.HostID, Version: ds.Version, Time: time.Now(), Containers: cs})
		next, err := cp.DesiredState(ctx, ds.Version, 500*time.Millisecond)
		switch {
		case err == nil:
			h.mu.Lock()
			h.ds = next
			h.mu.Unlock()
		case errors.Is(err, agent.ErrNotModified):
		default:
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func (h *switchHost) desired() contract.DesiredState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ds
}

// image is the image of the host's workload of egg, "" if it has none.
func (h *switchHost) image(egg string) string {
	for _, w := range h.desired().Workloads {
		if w.Egg == egg {
			return w.Image
		}
	}
	return ""
}

// A server holding a project's apply lease is paused (SIGSTOP) in the middle
// of the apply, which waits for db to be healthy before it creates web.
// Once the lease expired, the other server applies the project anew. The
// paused server resumed (SIGCONT) finds db healthy: its apply goes no further
// (its writes under the lease taken over are refused, or it sees the lease
// gone first) and fails, and the project stays as the second apply left it.
func TestAServerPausedPastItsApplyLeaseCannotWriteOnceResumed(t *testing.T) {
	pg := pgtest.Shared(t)
	bin := buildHatchBinary(t)
	dir := t.TempDir()
	dataA, dataB, cfgPath := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "config.json")
	t.Setenv(storeEnv, pg.URL(pg.NewDatabase(t)))
	a := startServerBinary(t, bin, "A", freeAddr(t), "--data-dir", dataA, "--cli-config", cfgPath)
	cfg, ok, err := client.Load(cfgPath)
	if err != nil || !ok {
		t.Fatalf("server A wrote no CLI config: %v", err)
	}
	copySharedFiles(t, dataA, dataB)
	b := startServerBinary(t, bin, "B", freeAddr(t), "--data-dir", dataB, "--cli-config", "-")
	t.Setenv(client.EnvToken, cfg.Token)
	code, joinToken, errOut := run(t, "token", "create", "--join", "--server", b.url)
	if code != 0 {
		t.Fatalf("hatch token create --join = %d %s", code, errOut)
	}
	id, err := agent.JoinHost(t.Context(), t.TempDir(), b.url, strings.TrimSpace(joinToken), "node-1", zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	id.Server = b.url
	host := &switchHost{id: id}
	hostCtx, stopHost := context.WithCancel(context.Background())
	hostDone := make(chan struct{})
	go func() { defer close(hostDone); host.run(hostCtx) }()
	defer func() { stopHost(); <-hostDone }()

	write := func(name, body string) string {
		path := filepath.Join(dir, name, "hatch.yaml")
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	first := write("v1", "project: shop\neggs:\n  db:\n    image: registry.local/db:1\n    pull: missing\n"+
		"  web:\n    image: registry.local/web:1\n    pull: missing\n    depends_on: {db: {condition: healthy}}\n")
	second := write("v2", "project: shop\neggs:\n  db:\n    image: registry.local/db:1\n    pull: missing\n  web:\n    image: registry.local/web:2\n    pull: missing\n")

	// The apply through A creates db and waits for it to be healthy.
	type result struct {
		code        int
		out, errOut string
	}
	applyA := make(chan result, 1)
	go func() {
		code, out, errOut := run(t, "apply", "-f", first, "--yes", "--server", a.url)
		applyA <- result{code, out, errOut}
	}()
	eventually(t, 15*time.Second, "A's apply gave db to the host", func() bool { return host.image("db") != "" })
	time.Sleep(300 * time.Millisecond) // A waits for db's health
	a.signal(syscall.SIGSTOP)

	// db healthy: B's apply (whose CLI waits for the rollouts) converges;
	// A, paused, has not seen it.
	host.healthy.Store(true)
	// B applies the project anew once A's lease expired.
	var out string
	eventually(t, 20*time.Second, "B applies the project once A's lease expired", func() bool {
		code, o, e := run(t, "apply", "-f", second, "--yes", "--server", b.url)
		out = o + e
		return code == 0
	})
	if got := host.image("web"); got != "registry.local/web:2" {
		t.Fatalf("after B's apply the host runs web %q, want registry.local/web:2\n%s", got, out)
	}

	// A, resumed, finds db healthy and would go on with web:1.
	a.signal(syscall.SIGCONT)
	var res result
	select {
	case res = <-applyA:
	case <-time.After(20 * time.Second):
		t.Fatal("A's apply did not end after A resumed")
	}
	if res.code == 0 {
		t.Fatalf("A's apply succeeded after its lease was taken over:\n%s\n%s", res.out, res.errOut)
	}
	t.Logf("A's apply ended %d: %s", res.code, lastLine(res.out+res.errOut))
	for line := range strings.Lines(a.logs.String()) {
		if strings.Contains(line, "fenced") || strings.Contains(line, "lost a project's lease") || strings.Contains(line, "apply finished") {
			t.Logf("A: %s", strings.TrimSpace(line))
		}
	}
	for range 10 { // 2 s: nothing of A's apply lands
		if got := host.image("web"); got != "registry.local/web:2" {
			t.Fatalf("after A resumed the host runs web %q, want B's registry.local/web:2", got)
		}
		time.Sleep(200 * time.Millisecond)
	}
	code, status, errOut := run(t, "status", "--server", b.url, "shop")
	if code != 0 || !strings.Contains(status, "web") {
		t.Fatalf("hatch status = %d\n%s\n%s", code, status, errOut)
	}
}

// lastLine is the last line of out that is not blank.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}
