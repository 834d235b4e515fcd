package cli

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/agent"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/testutil/pgtest"
)

// Terms short enough for takeover tests: a server paused or killed is
// replaced within the loops' lease and a third of it.
const (
	testLoopsLease   = "1500ms"
	testLiveness     = "2s"
	testProjectLease = "2s"
)

// buildHatchBinary builds the real hatch binary, for tests that pause or
// kill server processes.
func buildHatchBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "hatch")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/hatchery/hatchery/cmd/hatch")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
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
func (m *metricsClient) leading(p *serverProc) string {
	req, err := http.NewRequest("GET", p.url+"/metrics", nil)
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
		if v, ok := strings.CutPrefix(line, "hatch_loops_leader "); ok {
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
	for _, f := range []string{"tls/ca.pem", "tls/ca-key.pem", "tls/host-ca.pem", "tls/host-ca-key.pem", "seal.key", "admin-token"} {
		if _, err := os.Stat(filepath.Join(dataA, f)); err == nil {
			copyFile(t, filepath.Join(dataA, f), filepath.Join(dataB, f))
		}
	}
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
