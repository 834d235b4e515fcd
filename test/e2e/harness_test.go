//go:build docker

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// env is one scenario's world: a Docker scope, a control plane, a host
// identity, the agent process, and foreign objects beside it that must stay
// untouched (scenario 9, checked when the test ends).
type env struct {
	t       testing.TB
	scope   *dockertest.Scope
	cp      *controlPlane
	image   string
	name    string // the host's name; its ID is "h-<name>"
	hostID  string
	ns      string
	project string
	network string
	agent   *agentProc
	foreign *dockertest.Foreign
}

type envOptions struct {
	// convergeInterval is the agent's timer period (default 2s).
	convergeInterval time.Duration
	// noForeign skips the foreign objects (benchmarks).
	noForeign bool
}

func newEnv(t testing.TB, opts envOptions) *env {
	t.Helper()
	scope := dockertest.NewScope(t)
	e := &env{
		t:       t,
		scope:   scope,
		cp:      newControlPlane(t),
		image:   dockertest.Image(t, dockertest.ImageSpec{}),
		name:    dockertest.RunID() + scope.ID,
		ns:      "e2e",
		project: "p" + scope.ID,
	}
	e.hostID = "h-" + e.name
	e.network = contract.NetworkName(e.hostID, e.ns, e.project, "default")
	if !opts.noForeign {
		e.createForeign()
	}
	if opts.convergeInterval == 0 {
		opts.convergeInterval = 2 * time.Second
	}
	e.agent = newAgentProc(t, e, opts.convergeInterval)
	return e
}

// createForeign sets foreign objects beside the agent: unlabelled ones named
// as the agent names its own in another namespace, and objects labelled as
// another host's agent labels its workload "web". They are checked
// untouched when the test ends (before the scope removes them).
func (e *env) createForeign() {
	other := e.workload("web", 1, "v1")
	otherHost := "h-other-" + e.name
	e.foreign = e.scope.CreateForeign(dockertest.ForeignOptions{
		Image:           e.image,
		ContainerName:   contract.ContainerName("other-ns", e.project, "web", 0, e.hostID, "f00f00"),
		NetworkName:     contract.NetworkName(e.hostID, "other-ns", e.project, "default"),
		VolumeName:      contract.VolumeName(e.hostID, "other-ns", e.project, "data"),
		OtherHostLabels: containers.Labels(otherHost, other, 0, contract.SpecHash(other)),
	})
	e.t.Cleanup(func() {
		changes, err := e.foreign.Changes(context.Background())
		if err != nil {
			e.t.Errorf("check foreign objects: %v", err)
		}
		for _, c := range changes {
			e.t.Errorf("foreign object changed: %s", c)
		}
	})
}

// workload is the test app as egg name, its /version answering version,
// probed by the agent over HTTP twice a second.
func (e *env) workload(egg string, replicas int, version string) contract.WorkloadSpec {
	return contract.WorkloadSpec{
		Namespace: e.ns, Project: e.project, Egg: egg,
		Image:    e.image,
		Replicas: replicas,
		Env:      map[string]string{"APP_VERSION": version},
		Port:     8080,
		Health:   contract.HealthCheck{HTTP: "/healthz", Interval: 500 * time.Millisecond, Timeout: 400 * time.Millisecond, Retries: 2},
		Networks: []string{e.network},
		Rollout: contract.Rollout{
			MaxSurge: 1, DrainTimeout: 500 * time.Millisecond, ProgressDeadline: time.Minute,
		},
		StopTimeout: 3 * time.Second,
	}
}

// set makes ws this host's desired state.
func (e *env) set(ws ...contract.WorkloadSpec) contract.DesiredState {
	return e.cp.set(e.hostID, ws...)
}

// agentProc is a `hatch agent` process, restartable with the same data dir.
type agentProc struct {
	t        testing.TB
	bin      string
	dataDir  string
	logPath  string
	args     []string // every start's
	joinArgs []string // the first start's extra

	mu   sync.Mutex // guards cmd, done
	cmd  *exec.Cmd
	done chan struct{}
}

func newAgentProc(t testing.TB, e *env, interval time.Duration) *agentProc {
	t.Helper()
	bin, err := dockertest.Binary("./cmd/hatch")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := &agentProc{
		t: t, bin: bin,
		dataDir: filepath.Join(dir, "data"),
		logPath: filepath.Join(dir, "agent.log"),
		args: []string{"agent", "--debug",
			"--data-dir", filepath.Join(dir, "data"),
			"--ingress-addr", "127.0.0.1:0", "--https-addr", "", "--admin-addr", "127.0.0.1:0", "--publish-addr", "127.0.0.1",
			"--mesh-addr", "127.0.0.1:0",
			"--secret-dir", e.scope.ShmDir(),
			"--converge-interval", interval.String(),
		},
		joinArgs: []string{"--server", e.cp.URL(), "--join", e.cp.joinToken, "--name", e.name},
	}
	for k, v := range e.scope.Labels(nil) {
		p.args = append(p.args, "--label", k+"="+v)
	}
	// Registered after the scope: it runs first, so the agent and its data
	// plane (which outlives it) are gone before the scope sweeps what they
	// made.
	t.Cleanup(func() {
		p.signal(syscall.SIGKILL)
		stopDataPlane(t, p.bin, p.dataDir)
		if t.Failed() {
			t.Logf("agent log (last 80 lines):\n%s", p.logTail(80))
		}
	})
	return p
}

// stopDataPlane stops the data plane of the agent of dataDir for good
// (`hatch agent stop-dataplane`): it outlives its agent, so a test that
// ran one stops it, leaving no process behind.
func stopDataPlane(t testing.TB, bin, dataDir string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, bin, "agent", "stop-dataplane", "--data-dir", dataDir).CombinedOutput(); err != nil {
		t.Errorf("stop the data plane of %s: %v\n%s", dataDir, err, out)
	}
	if t.Failed() {
		if b, err := os.ReadFile(filepath.Join(dataDir, "dataplane.log")); err == nil {
			lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
			t.Logf("data plane log (last 40 lines):\n%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	}
}

// start starts the agent; the first start joins.
func (p *agentProc) start() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		p.t.Fatal("agent already running")
	}
	args := p.args
	if _, err := os.Stat(filepath.Join(p.dataDir, "identity.json")); err != nil {
		args = append(slices.Clone(args), p.joinArgs...)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	cmd := exec.Command(p.bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		p.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	p.cmd, p.done = cmd, done
}

// signal sends sig and waits for the process to end (SIGTERM: its clean
// shutdown; SIGKILL: no shutdown at all).
func (p *agentProc) signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd, p.done = nil, nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// pid is the running agent's process ID.
func (p *agentProc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *agentProc) logTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// logTailAbove is logTail without the lines at level skip ("debug"): what
// the agent decided, without the chatter around it.
func (p *agentProc) logTailAbove(skip string, n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	var kept []string
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if !strings.Contains(l, `"level":"`+skip+`"`) {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept[max(0, len(kept)-n):], "\n")
}

// logCount counts the agent's log lines with the message msg that also
// contain every one of with.
func (p *agentProc) logCount(msg string, with ...string) int {
	f, err := os.Open(p.logPath)
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	needle := []byte(`"msg":"` + msg + `"`)
	for sc.Scan() {
		if bytes.Contains(sc.Bytes(), needle) && containsAll(sc.Bytes(), with) {
			n++
		}
	}
	return n
}

// logField returns the string field key of the agent's last log line with
// the message msg, or "" if there is none yet. The agent logs the addresses
// it listens on this way ("agent running": "ingress", "admin").
func (p *agentProc) logField(msg, key string) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	needle := []byte(`"msg":"` + msg + `"`)
	lines := bytes.Split(b, []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		if !bytes.Contains(lines[i], needle) {
			continue
		}
		var fields map[string]any
		if json.Unmarshal(lines[i], &fields) != nil {
			continue
		}
		v, _ := fields[key].(string)
		return v
	}
	return ""
}

func containsAll(line []byte, parts []string) bool {
	for _, p := range parts {
		if !bytes.Contains(line, []byte(p)) {
			return false
		}
	}
	return true
}

// startJoined starts the agent and waits for its first status report.
func (e *env) startJoined() {
	e.t.Helper()
	e.agent.start()
	dockertest.Eventually(e.t, 30*time.Second, 100*time.Millisecond, func() error {
		if _, ok := e.cp.lastReport(e.hostID); !ok {
			return fmt.Errorf("no status report from %s yet", e.hostID)
		}
		return nil
	})
}

// observed is a container as the test sees it through the Docker API.
type observed struct {
	ID        string
	Name      string
	Slot      int
	SpecHash  string
	Status    string // Docker's: running, exited, created...
	ExitCode  int
	StartedAt string
	Restarts  int
	IP        string
	Mounts    []string
}

func (o observed) running() bool { return o.Status == "running" }

// containers lists this host's containers, of workload w if given, all
// states, by slot then ID.
func (e *env) containers(ctx context.Context, w *contract.WorkloadSpec) ([]observed, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	f := filters.NewArgs(
		filters.Arg("label", containers.LabelManaged+"=true"),
		filters.Arg("label", containers.LabelHost+"="+e.hostID))
	if w != nil {
		f.Add("label", containers.LabelWorkload+"="+w.ID())
	}
	cli := e.scope.Client
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, err
	}
	out := make([]observed, 0, len(list))
	for _, s := range list {
		c, err := cli.ContainerInspect(ctx, s.ID)
		if err != nil {
			continue // removed since the list
		}
		o := observed{ID: c.ID, Name: strings.TrimPrefix(c.Name, "/"), SpecHash: c.Config.Labels[containers.LabelSpec], Restarts: c.RestartCount}
		o.Slot, _ = strconv.Atoi(c.Config.Labels[containers.LabelSlot])
		if c.State != nil {
			o.Status, o.ExitCode, o.StartedAt = string(c.State.Status), c.State.ExitCode, c.State.StartedAt
		}
		if c.NetworkSettings != nil {
			if ep := c.NetworkSettings.Networks[e.network]; ep != nil {
				o.IP = ep.IPAddress
			}
		}
		for _, m := range c.Mounts {
			o.Mounts = append(o.Mounts, m.Name)
		}
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b observed) int {
		if a.Slot != b.Slot {
			return a.Slot - b.Slot
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// get asks the container at ip for path on the app's port.
func get(ctx context.Context, ip, path string) (int, string, error) {
	// Generous for a loaded CI machine: a timeout here would read as an
	// unhealthy container.
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	code, body, err := dockertest.Get(ctx, "http://"+ip+":8080"+path)
	return code, strings.TrimSpace(body), err
}

// healthy probes the container's /healthz itself.
func healthy(ctx context.Context, o observed) bool {
	if !o.running() || o.IP == "" {
		return false
	}
	code, _, err := get(ctx, o.IP, "/healthz")
	return err == nil && code == 200
}

// serving checks that w runs as it should: exactly one container per slot
// 0..replicas-1, each of w's spec, running, healthy by the test's own probe,
// and answering version on /version. It returns them by slot.
func (e *env) serving(ctx context.Context, w contract.WorkloadSpec, version string) ([]observed, error) {
	cs, err := e.containers(ctx, &w)
	if err != nil {
		return nil, err
	}
	if len(cs) != w.Replicas {
		return nil, fmt.Errorf("%d containers, want %d", len(cs), w.Replicas)
	}
	hash := contract.SpecHash(w)
	for i, c := range cs {
		switch {
		case c.Slot != i:
			return nil, fmt.Errorf("slots %v, want 0..%d once each", slots(cs), w.Replicas-1)
		case c.SpecHash != hash:
			return nil, fmt.Errorf("slot %d runs spec %s, want %s", i, c.SpecHash, hash)
		case !healthy(ctx, c):
			return nil, fmt.Errorf("slot %d (%s): %s, not healthy yet", i, c.ID[:12], c.Status)
		}
		if _, v, err := get(ctx, c.IP, "/version"); err != nil || v != version {
			return nil, fmt.Errorf("slot %d serves version %q (%v), want %q", i, v, err, version)
		}
	}
	return cs, nil
}

// waitServing waits until serving holds.
func (e *env) waitServing(w contract.WorkloadSpec, version string, timeout time.Duration) []observed {
	e.t.Helper()
	var cs []observed
	dockertest.Eventually(e.t, timeout, 100*time.Millisecond, func() error {
		var err error
		cs, err = e.serving(context.Background(), w, version)
		return err
	})
	return cs
}

func slots(cs []observed) []int {
	out := make([]int, len(cs))
	for i, c := range cs {
		out[i] = c.Slot
	}
	return out
}

func ids(cs []observed) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}

// sampler calls sample every interval on its own goroutine until stopped,
// collecting the problems it reports.
type sampler struct {
	stop chan struct{}
	done chan struct{}

	mu       sync.Mutex // guards problems, samples
	problems []string
	samples  int
}

func startSampler(interval time.Duration, sample func(ctx context.Context) []string) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			ps := sample(context.Background())
			s.mu.Lock()
			s.samples++
			for _, p := range ps {
				if len(s.problems) < 20 {
					s.problems = append(s.problems, time.Now().Format("15:04:05.000 ")+p)
				}
			}
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// finish stops the sampler and returns the number of samples and problems.
func (s *sampler) finish() (int, []string) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples, s.problems
}
