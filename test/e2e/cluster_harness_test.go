//go:build docker

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"

	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
	"github.com/hatchery/hatchery/internal/testutil/netcluster"
)

// cluster is Hatchery as an operator runs it, every part the real binary
// built from this checkout: one `hatch server`, and `hatch agent`s as
// separate hosts, each with its own name and data directory. By default the
// agents share the one Docker Engine, each on its own loopback address
// (127.0.0.2, 127.0.0.3...) for its ingress, admin and published ports;
// with clusterOptions.hosts each agent runs on a host of its own
// (internal/testutil/netcluster: a network namespace with its own Docker
// Engine), and the server listens on the address the hosts reach it at. The
// CLI runs as a process too, with the server and admin token in its
// environment. Everything the agents create carries the scope's labels and
// is removed with it (or with its host's engine).
//
// The cluster keeps every log line, every CLI output and every API answer
// the test reads, and checks when the test ends that none holds a token, a
// key or a secret value (secretsFound).
type cluster struct {
	t      testing.TB
	scope  *dockertest.Scope
	bin    string
	dir    string
	server *clProc
	url    string
	token  string
	api    *client.Client
	agents map[string]*clAgent
	// net is the cluster's hosts when each agent has its own (nil when
	// they share the test's engine).
	net *netcluster.Cluster
	// convergeInterval, serverArgs, ingressPorts and https are
	// clusterOptions'.
	convergeInterval time.Duration
	serverArgs       []string
	ingressPorts     map[string]string
	https            bool
	// serverCmd is the server's command line, for restartServer, and
	// pastServers its processes before a restart, for the secret check.
	serverCmd   []string
	pastServers []*clProc

	mu       sync.Mutex // guards recorded and secrets
	recorded []string   // CLI outputs and API answers
	secrets  []string   // what must never be recorded or logged
}

// clAgent is one agent process: a host of the cluster.
type clAgent struct {
	name, ip             string
	ingressPort, dataDir string
	// httpsPort is where its ingress serves HTTPS ("" for none).
	httpsPort            string
	adminPort, secretDir string
	proc                 *clProc
	past                 []*clProc // the processes before a restart, for the secret check
	hostID               string
	// host is the agent's own host (nil on the shared engine).
	host *netcluster.Host
}

// IngressURL is the agent's ingress, http://<ip>:<port>.
func (a *clAgent) IngressURL() string { return "http://" + net.JoinHostPort(a.ip, a.ingressPort) }

type clusterOptions struct {
	// agents are the hosts' names, each given the next loopback address
	// from 127.0.0.2 on (default a and b).
	agents []string
	// liveness is the server's liveness timeout (default the server's).
	liveness time.Duration
	// hosts, if set, gives each agent a host of its own, named h1..hN,
	// instead of the shared engine (agents is then ignored).
	hosts int
	// convergeInterval is the agents' timer between converges (default
	// 2 s, for tests that wait on converges).
	convergeInterval time.Duration
	// serverArgs are added to the server's command line.
	serverArgs []string
	// ingressPorts fixes agents' ingress ports by name (a CA validating
	// HTTP-01 must know the port before the agent starts); https gives
	// every agent an HTTPS port (netHTTPSPort on a host of its own).
	ingressPorts map[string]string
	https        bool
}

// Each agent has its host's network namespace to itself: fixed ports.
const (
	netIngressPort = "8080"
	netAdminPort   = "7701"
	netHTTPSPort   = "8443"
)

func newCluster(t testing.TB, opts clusterOptions) *cluster {
	t.Helper()
	if opts.agents == nil {
		opts.agents = []string{"a", "b"}
	}
	bin, err := dockertest.Binary("./cmd/hatch")
	if err != nil {
		t.Fatal(err)
	}
	if opts.convergeInterval == 0 {
		opts.convergeInterval = 2 * time.Second
	}
	c := &cluster{t: t, scope: dockertest.NewScope(t), bin: bin, dir: t.TempDir(), agents: map[string]*clAgent{}, convergeInterval: opts.convergeInterval,
		serverArgs: opts.serverArgs, ingressPorts: opts.ingressPorts, https: opts.https}
	if opts.hosts > 0 {
		start := time.Now()
		c.net = netcluster.Start(t, opts.hosts)
		// The hosts reach each other, as a cluster's do: their agents'
		// meshes carry eggs' traffic between them.
		for i, a := range c.net.Hosts {
			for _, b := range c.net.Hosts[i+1:] {
				if err := c.net.Allow(a, b); err != nil {
					t.Fatal(err)
				}
			}
		}
		c.startServer(opts.liveness, c.net.ServerIP)
		for _, h := range c.net.Hosts {
			c.startAgent(h.Name, h.IP, h)
		}
		t.Logf("%d hosts, the server and their agents up in %v", opts.hosts, time.Since(start).Round(time.Millisecond))
	} else {
		c.startServer(opts.liveness, "127.0.0.1")
		for i, name := range opts.agents {
			c.startAgent(name, fmt.Sprintf("127.0.0.%d", i+2), nil)
		}
	}
	t.Cleanup(func() {
		if leaks := c.secretsFound(); len(leaks) > 0 {
			t.Errorf("secrets in logs, outputs or API answers:\n%s", strings.Join(leaks, "\n"))
		}
	})
	return c
}

// startServer starts the server listening on ip. An address other than
// loopback is named with --tls-name, so that the serving certificate covers
// it even if the machine's addresses are read before it exists.
func (c *cluster) startServer(liveness time.Duration, ip string) {
	c.t.Helper()
	dataDir := filepath.Join(c.dir, "server")
	port := clFreePort(c.t, ip)
	args := []string{"server", "--listen", net.JoinHostPort(ip, port), "--data-dir", dataDir, "--cli-config", "-"}
	if !net.ParseIP(ip).IsLoopback() {
		args = append(args, "--tls-name", ip)
	}
	if liveness > 0 {
		args = append(args, "--liveness-timeout", liveness.String())
	}
	args = append(args, c.serverArgs...)
	c.serverCmd = args
	c.server = c.start("server", args, nil)
	line := c.server.waitLine(c.t, "server URL on this machine: ", 30*time.Second)
	c.url = strings.TrimSpace(strings.TrimPrefix(line, "server URL on this machine: "))
	token, err := os.ReadFile(filepath.Join(dataDir, "admin-token"))
	if err != nil {
		c.t.Fatal(err)
	}
	c.token = strings.TrimSpace(string(token))
	c.api, err = client.New(client.Config{Server: c.url, Token: c.token})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(c.api.Close)
	c.keepSecret(tokenSecret(c.token))
	c.keepFileSecrets(filepath.Join(dataDir, "seal.key"), filepath.Join(dataDir, "backup.key"), filepath.Join(dataDir, "tls", "ca-key.pem"), filepath.Join(dataDir, "tls", "server-key.pem"))
}

// restartServer stops the server and starts it again on the same address
// and data dir; the agents carry on with it.
func (c *cluster) restartServer() {
	c.t.Helper()
	c.server.stop(c.t)
	c.pastServers = append(c.pastServers, c.server)
	c.server = c.start("server", c.serverCmd, nil)
	c.server.waitLine(c.t, "server URL on this machine: ", 30*time.Second)
}

// startAgent joins a new host: its ingress, admin and published ports on ip,
// in host's network namespace and on its engine if host is set.
func (c *cluster) startAgent(name, ip string, host *netcluster.Host) *clAgent {
	c.t.Helper()
	join := strings.TrimSpace(c.hatchSecretly("token", "create", "--join"))
	c.keepSecret(tokenSecret(join))
	a := &clAgent{name: name, ip: ip, dataDir: filepath.Join(c.dir, "agent-"+name), secretDir: c.scope.ShmDir(), host: host}
	if host != nil {
		a.ingressPort, a.adminPort = netIngressPort, netAdminPort
	} else {
		a.ingressPort, a.adminPort = clFreePort(c.t, ip), clFreePort(c.t, ip)
		if p, ok := c.ingressPorts[name]; ok {
			a.ingressPort = p
		}
	}
	if c.https {
		a.httpsPort = netHTTPSPort
		if host == nil {
			a.httpsPort = clFreePort(c.t, ip)
		}
	}
	c.agents[name] = a
	c.runAgent(a, "--server", c.url, "--join", join, "--name", name)
	id, err := os.ReadFile(filepath.Join(a.dataDir, "identity.json"))
	if err != nil {
		c.t.Fatal(err)
	}
	var identity struct {
		HostID string `json:"host_id"`
		Token  string `json:"token"`
	}
	if err := json.Unmarshal(id, &identity); err != nil {
		c.t.Fatal(err)
	}
	a.hostID = identity.HostID
	c.keepSecret(tokenSecret(identity.Token))
	c.keepFileSecrets(filepath.Join(a.dataDir, "seal.key"))
	c.waitHostUp(a, 30*time.Second)
	return a
}

// dataPlaneLog is what the agent's data plane (its ingress and mesh, in a
// process of their own) logged.
func (a *clAgent) dataPlaneLog() string {
	b, _ := os.ReadFile(filepath.Join(a.dataDir, "dataplane.log")) // none yet: ""
	return string(b)
}

// runAgent starts (or restarts) an agent's process.
func (c *cluster) runAgent(a *clAgent, extra ...string) {
	c.t.Helper()
	args := []string{"agent", "--data-dir", a.dataDir,
		"--ingress-addr", net.JoinHostPort(a.ip, a.ingressPort), "--admin-addr", net.JoinHostPort(a.ip, a.adminPort),
		"--publish-addr", a.ip, "--mesh-addr", net.JoinHostPort(a.ip, "0"),
		"--secret-dir", a.secretDir, "--converge-interval", c.convergeInterval.String(), "--https-addr", ""}
	if a.httpsPort != "" {
		args[len(args)-1] = net.JoinHostPort(a.ip, a.httpsPort)
	}
	for k, v := range c.scope.Labels(nil) {
		args = append(args, "--label", k+"="+v)
	}
	args = append(args, extra...)
	if a.proc != nil {
		a.past = append(a.past, a.proc)
	} else {
		// Registered before the agent's own: it runs after the agent
		// stopped, and stops the data plane that outlives it.
		c.t.Cleanup(func() { stopDataPlane(c.t, c.bin, a.dataDir) })
	}
	if a.host == nil {
		a.proc = c.start("agent-"+a.name, args, nil)
	} else {
		cmd := a.host.Command(context.Background(), c.bin, args...)
		cmd.Dir = c.dir
		cmd.Env = append(c.cliEnv(), "DOCKER_HOST="+a.host.DockerHost())
		a.proc = c.startCmd("agent-"+a.name, cmd)
	}
	a.proc.waitLine(c.t, `"agent running"`, 30*time.Second)
}

// waitHostUp waits until the server lists the host as up.
func (c *cluster) waitHostUp(a *clAgent, timeout time.Duration) {
	c.t.Helper()
	dockertest.Eventually(c.t, timeout, 200*time.Millisecond, func() error {
		hosts, err := c.api.Hosts().List(c.t.Context())
		if err != nil {
			return err
		}
		for _, h := range hosts {
			if h.Name == a.name && h.State == "up" {
				return nil
			}
		}
		return fmt.Errorf("host %s not up", a.name)
	})
}

// start runs the binary with args, keeping its output lines as they come.
func (c *cluster) start(name string, args []string, env []string) *clProc {
	c.t.Helper()
	cmd := exec.Command(c.bin, args...)
	cmd.Dir = c.dir
	cmd.Env = append(c.cliEnv(), env...)
	return c.startCmd(name, cmd)
}

// startCmd starts cmd, keeping its output lines as they come, and stops it
// when the test ends.
func (c *cluster) startCmd(name string, cmd *exec.Cmd) *clProc {
	c.t.Helper()
	p := &clProc{name: name, cmd: cmd, done: make(chan struct{}), started: time.Now()}
	if err := p.startReading(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { p.stop(c.t) })
	return p
}

// cliEnv is the environment of every process: no server or token but the
// cluster's, no config from the user's home.
func (c *cluster) cliEnv() []string {
	env := []string{"HOME=" + c.dir, "XDG_CONFIG_HOME=" + filepath.Join(c.dir, "config"), "PATH=" + os.Getenv("PATH")}
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		env = append(env, "DOCKER_HOST="+h)
	}
	if c.url != "" {
		env = append(env, client.EnvServer+"="+c.url, client.EnvToken+"="+c.token)
	}
	return env
}

// hatch runs a CLI command to its end and returns its stdout and stderr
// together, recorded for the secret check.
func (c *cluster) hatch(env []string, args ...string) (string, error) {
	c.t.Helper()
	out, err := c.hatchIn(c.dir, env, args...)
	c.record(out)
	return out, err
}

func (c *cluster) hatchIn(dir string, env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Dir = dir
	cmd.Env = append(c.cliEnv(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// mustHatch is hatch that fails the test on a non-zero exit.
func (c *cluster) mustHatch(env []string, args ...string) string {
	c.t.Helper()
	out, err := c.hatch(env, args...)
	if err != nil {
		c.t.Fatalf("hatch %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// hatchSecretly runs a command whose output is meant to show a secret
// (hatch token create): it is not recorded.
func (c *cluster) hatchSecretly(args ...string) string {
	c.t.Helper()
	out, err := c.hatchIn(c.dir, nil, args...)
	if err != nil {
		c.t.Fatalf("hatch %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	line, _, _ := strings.Cut(out, "\n")
	return line
}

// eventMessages returns the messages of the events of type typ in the log
// (its first 1,000), oldest first.
func (c *cluster) eventMessages(typ string) []string {
	c.t.Helper()
	var out struct {
		Events []struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"events"`
	}
	c.getJSON("/api/v1/events?limit=1000", &out)
	var msgs []string
	for _, e := range out.Events {
		if e.Type == typ {
			msgs = append(msgs, e.Message)
		}
	}
	return msgs
}

// getJSON reads an API answer into out, recording it.
func (c *cluster) getJSON(path string, out any) {
	c.t.Helper()
	resp, err := c.api.Send(c.t.Context(), http.MethodGet, path, nil, "")
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	c.record(string(body))
	if resp.StatusCode != http.StatusOK {
		c.t.Fatalf("GET %s: %s: %s", path, resp.Status, body)
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			c.t.Fatalf("GET %s: %v", path, err)
		}
	}
}

func (c *cluster) record(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recorded = append(c.recorded, s)
}

func (c *cluster) keepSecret(s string) {
	if s == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.secrets = append(c.secrets, s)
}

// keepFileSecrets keeps the content of key files: a hex seal key as it is,
// each base64 line of a PEM key.
func (c *cluster) keepFileSecrets(paths ...string) {
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			c.t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if line = strings.TrimSpace(line); len(line) >= 32 && !strings.HasPrefix(line, "-----") {
				c.keepSecret(line)
			}
		}
	}
}

// secretsFound lists each kept secret found in a log line (server's and
// agents' output), a CLI output or an API answer.
func (c *cluster) secretsFound() []string {
	c.mu.Lock()
	texts := append([]string(nil), c.recorded...)
	secrets := append([]string(nil), c.secrets...)
	c.mu.Unlock()
	texts = append(texts, c.server.stderr())
	for _, p := range c.pastServers {
		texts = append(texts, p.stderr()) // stdout shows the admin token once, by design
	}
	for _, a := range c.agents {
		for _, p := range append(a.past, a.proc) {
			if p != nil {
				texts = append(texts, p.stderr(), p.stdout())
			}
		}
		texts = append(texts, a.dataPlaneLog()) // it is given the TLS keys
	}
	return findSecrets(texts, secrets)
}

// findSecrets names each secret some text holds, with where.
func findSecrets(texts, secrets []string) []string {
	var found []string
	for _, s := range secrets {
		for _, text := range texts {
			if i := strings.Index(text, s); i >= 0 {
				found = append(found, fmt.Sprintf("%.6s... found in: %.200s", s, text[max(0, i-100):]))
				break
			}
		}
	}
	return found
}

// tokenSecret is a token's secret part: what must never be shown.
func tokenSecret(token string) string {
	parts := strings.Split(strings.TrimSpace(token), ".")
	if len(parts) != 3 {
		return ""
	}
	return parts[1]
}

// clFreePort returns a port free on ip for now.
func clFreePort(t testing.TB, ip string) string {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// clProc is a running process of the binary, its output lines kept with
// the time each arrived.
type clProc struct {
	name    string
	cmd     *exec.Cmd
	done    chan struct{}
	started time.Time

	mu      sync.Mutex // guards lines, out, errOut and changed
	lines   []clLine
	out     strings.Builder
	errOut  strings.Builder
	changed chan struct{}
}

type clLine struct {
	at   time.Time
	text string
}

func (p *clProc) startReading() error {
	p.changed = make(chan struct{})
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := p.cmd.Start(); err != nil {
		return err
	}
	var wg sync.WaitGroup
	for _, r := range []struct {
		rd  io.Reader
		buf *strings.Builder
	}{{stdout, &p.out}, {stderr, &p.errOut}} {
		wg.Go(func() {
			sc := bufio.NewScanner(r.rd)
			sc.Buffer(make([]byte, 64<<10), 4<<20)
			for sc.Scan() {
				at := time.Now()
				p.mu.Lock()
				p.lines = append(p.lines, clLine{at: at, text: sc.Text()})
				r.buf.WriteString(sc.Text() + "\n")
				close(p.changed)
				p.changed = make(chan struct{})
				p.mu.Unlock()
			}
		})
	}
	go func() {
		wg.Wait()
		_ = p.cmd.Wait()
		close(p.done)
	}()
	return nil
}

// waitLine waits for a line holding substr and returns it; the test fails
// with the process's output if none comes.
func (p *clProc) waitLine(t testing.TB, substr string, timeout time.Duration) string {
	t.Helper()
	l, err := p.waitLineAfter(substr, time.Time{}, timeout)
	if err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", p.name, err, p.stdout(), p.stderr())
	}
	return l.text
}

// waitLineAfter waits for a line holding substr that arrived after since.
func (p *clProc) waitLineAfter(substr string, since time.Time, timeout time.Duration) (clLine, error) {
	deadline := time.After(timeout)
	for {
		p.mu.Lock()
		for _, l := range p.lines {
			if l.at.After(since) && strings.Contains(l.text, substr) {
				p.mu.Unlock()
				return l, nil
			}
		}
		changed := p.changed
		p.mu.Unlock()
		select {
		case <-changed:
		case <-p.done:
			return clLine{}, fmt.Errorf("exited (%v) before a line with %q", p.cmd.ProcessState, substr)
		case <-deadline:
			return clLine{}, fmt.Errorf("no line with %q within %v", substr, timeout)
		}
	}
}

func (p *clProc) stdout() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *clProc) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.errOut.String()
}

// stop sends SIGTERM and waits (SIGKILL after 30 s). It may be called again.
func (p *clProc) stop(t testing.TB) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("%s did not stop within 30s of SIGTERM", p.name)
	}
}

// --- what the test checks against, through the Docker API and HTTP ---

// projectContainers lists the running containers of a project in a
// namespace, on one host ("" for any).
func (c *cluster) projectContainers(namespace, project, egg, hostID string) []container.Summary {
	c.t.Helper()
	f := filters.NewArgs(filters.Arg("label", dockertest.ScopeLabel+"="+c.scope.ID),
		filters.Arg("label", containers.LabelNamespace+"="+namespace), filters.Arg("label", containers.LabelProject+"="+project))
	if egg != "" {
		f.Add("label", containers.LabelEgg+"="+egg)
	}
	if hostID != "" {
		f.Add("label", containers.LabelHost+"="+hostID)
	}
	list, err := c.scope.Client.ContainerList(c.t.Context(), container.ListOptions{Filters: f})
	if err != nil {
		c.t.Fatal(err)
	}
	return list
}

// projectObjects counts every container (running or not), network and
// volume with the project's labels.
func (c *cluster) projectObjects(namespace, project string) (nContainers, nNetworks, nVolumes int) {
	c.t.Helper()
	return c.projectObjectsOn(namespace, project, "")
}

// projectObjectsOn is projectObjects on one host ("" for any).
func (c *cluster) projectObjectsOn(namespace, project, hostID string) (nContainers, nNetworks, nVolumes int) {
	c.t.Helper()
	f := filters.NewArgs(filters.Arg("label", dockertest.ScopeLabel+"="+c.scope.ID),
		filters.Arg("label", containers.LabelNamespace+"="+namespace), filters.Arg("label", containers.LabelProject+"="+project))
	if hostID != "" {
		f.Add("label", containers.LabelHost+"="+hostID)
	}
	ctx := c.t.Context()
	cs, err := c.scope.Client.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		c.t.Fatal(err)
	}
	ns, err := c.scope.Client.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		c.t.Fatal(err)
	}
	vs, err := c.scope.Client.VolumeList(ctx, volume.ListOptions{Filters: f})
	if err != nil {
		c.t.Fatal(err)
	}
	return len(cs), len(ns), len(vs.Volumes)
}

// viaIngress GETs path on a host's ingress with the Host header.
func viaIngress(ctx context.Context, a *clAgent, host, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.IngressURL()+path, nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// writeProject writes a project directory: files by relative path.
func writeProject(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// demoProject copies examples/demo with the apps' static binaries in
// their build contexts, as `make demo` leaves it. nonce, if set, goes into
// the Dockerfiles as a comment: a context the Engine has never built.
func demoProject(t testing.TB, nonce string) string {
	t.Helper()
	root, err := dockertest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, name := range []string{"hatch.yaml", "web/Dockerfile", "web/.dockerignore", "kv/Dockerfile", "kv/.dockerignore"} {
		b, err := os.ReadFile(filepath.Join(root, "examples", "demo", filepath.FromSlash(name)))
		if err != nil {
			t.Fatal(err)
		}
		files[name] = string(b)
		if nonce != "" && strings.HasSuffix(name, "Dockerfile") {
			files[name] += "# " + nonce + "\n"
		}
	}
	dir := writeProject(t, files)
	for _, app := range []string{"web", "kv"} {
		bin, err := dockertest.Binary("./examples/demo/" + app)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, app, app), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
