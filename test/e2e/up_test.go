//go:build docker

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// upRun is `hatch up` run by the test in a project directory, with the
// ingress, admin and published ports on 127.0.0.9 and the scope's labels.
type upRun struct {
	t       testing.TB
	scope   *dockertest.Scope
	bin     string
	dir     string
	env     []string
	ingress *clAgent // only its address: the ingress of up's agent
	listen  string
	file    string // the project file up reads (-f): hatch.yaml unless set
	publish string // the address published ports listen on: 127.0.0.9 unless set
}

func newUpRun(t testing.TB, dir string) *upRun {
	t.Helper()
	bin, err := dockertest.Binary("./cmd/hatch")
	if err != nil {
		t.Fatal(err)
	}
	const ip = "127.0.0.9"
	u := &upRun{t: t, scope: dockertest.NewScope(t), bin: bin, dir: dir,
		env:     []string{"HOME=" + dir, "XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "PATH=" + os.Getenv("PATH")},
		ingress: &clAgent{name: "local", ip: ip, ingressPort: clFreePort(t, ip), adminPort: clFreePort(t, ip)},
		listen:  "127.0.0.1:" + clFreePort(t, "127.0.0.1"),
		file:    "hatch.yaml",
		publish: ip,
	}
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		u.env = append(u.env, "DOCKER_HOST="+h)
	}
	return u
}

// start runs `hatch up -f <file> --yes` in the directory.
func (u *upRun) start() *clProc {
	u.t.Helper()
	args := []string{"up", "-f", u.file, "--yes", "--listen", u.listen,
		"--ingress-addr", net.JoinHostPort(u.ingress.ip, u.ingress.ingressPort),
		"--admin-addr", net.JoinHostPort(u.ingress.ip, u.ingress.adminPort), "--publish-addr", u.publish}
	for k, v := range u.scope.Labels(nil) {
		args = append(args, "--label", k+"="+v)
	}
	cmd := exec.Command(u.bin, args...)
	cmd.Dir, cmd.Env = u.dir, u.env
	p := &clProc{name: "up", cmd: cmd, done: make(chan struct{})}
	if err := p.startReading(); err != nil {
		u.t.Fatal(err)
	}
	u.t.Cleanup(func() { p.stop(u.t) })
	return p
}

// hatch runs a CLI command in the directory, with no server or token but
// what ./.hatch says.
func (u *upRun) hatch(args ...string) string {
	u.t.Helper()
	cmd := exec.Command(u.bin, args...)
	cmd.Dir, cmd.Env = u.dir, u.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		u.t.Fatalf("hatch %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// interrupt sends SIGINT, as Ctrl-C does, and waits for the end.
func interrupt(t testing.TB, p *clProc) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(45 * time.Second):
		t.Fatalf("hatch up did not stop within 45s of SIGINT\n%s", p.stdout())
	}
}

func (u *upRun) demoContainers() []string {
	u.t.Helper()
	c := &cluster{t: u.t, scope: u.scope}
	return containerIDs(c.projectContainers("default", "demo", "", ""))
}

func TestUpRunsTheDemoAndTheCLIFindsItFromTheDirectory(t *testing.T) {
	dir := demoProject(t, "")
	u := newUpRun(t, dir)
	up := u.start()
	up.waitLine(t, "default/demo is ready: kv 1/1, web 3/3.", 3*time.Minute)
	up.waitLine(t, "web answers at http://demo.localhost:"+u.ingress.ingressPort+"/", 10*time.Second)
	c := &cluster{t: t, scope: u.scope}
	// With kv's count: web reaches kv by name, through kv's relay and its
	// socket under .hatch/agent (in a test's directory, longer than a
	// socket address may be).
	if page := c.demoPageWithVisits(u.ingress); !strings.Contains(page, "version: 1\n") {
		t.Fatalf("the demo answered %q", page)
	}

	// Another terminal, the same directory: no flags needed.
	if status := u.hatch("status"); !strings.Contains(status, "web  3/3    done     local") {
		t.Fatalf("hatch status from the directory:\n%s", status)
	}
	for name, mode := range map[string]os.FileMode{".hatch": 0o700 | os.ModeDir, ".hatch/config.json": 0o600} {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil || info.Mode() != mode {
			t.Errorf("%s: %v, mode %v; want %v", name, err, info.Mode(), mode)
		}
	}
	if ignore, err := os.ReadFile(filepath.Join(dir, ".hatch", ".gitignore")); err != nil || !strings.Contains(string(ignore), "*") {
		t.Errorf(".hatch/.gitignore = %q, %v", ignore, err)
	}

	// Ctrl-C stops the control plane and the agent; the containers stay.
	running := u.demoContainers()
	interrupt(t, up)
	if out := up.stdout(); !strings.Contains(out, "Stopped the control plane and the agent.") || !strings.Contains(out, "hatch destroy demo") {
		t.Fatalf("hatch up said on Ctrl-C:\n%s", out)
	}
	// The 4 replicas, and the relays that carry kv's and web's names on
	// the project's network, which both join: only relays carry names.
	if now := u.demoContainers(); !slices.Equal(now, running) || len(now) != 6 {
		t.Fatalf("containers after Ctrl-C: %v, want the 6 that ran (4 replicas, kv's and web's relays): %v", now, running)
	}

	// Up again: nothing to change, the same containers are adopted, and
	// destroy from the directory removes them.
	again := u.start()
	again.waitLine(t, "No changes: default/demo is as the file says.", 2*time.Minute)
	again.waitLine(t, "default/demo is ready", time.Minute)
	if now := u.demoContainers(); !slices.Equal(now, running) {
		t.Fatalf("a second hatch up replaced containers: %v, was %v", now, running)
	}
	u.hatch("destroy", "demo", "--yes", "--volumes")
	// Destroy waits for the replicas the hosts report; the relays, which no
	// report shows, go in the same converge or the next.
	dockertest.Eventually(t, 15*time.Second, 200*time.Millisecond, func() error {
		if left := u.demoContainers(); len(left) != 0 {
			return fmt.Errorf("%d containers left after destroy", len(left))
		}
		return nil
	})
	interrupt(t, again)
	if out := again.stdout(); strings.Contains(out, "keep running") {
		t.Fatalf("after destroy, hatch up still says containers keep running:\n%s", out)
	}
	u.checkLogsHoldNoToken()
}

// checkLogsHoldNoToken greps hatch up's log and outputs for the secret
// parts of the admin and host tokens.
func (u *upRun) checkLogsHoldNoToken() {
	u.t.Helper()
	admin, err := os.ReadFile(filepath.Join(u.dir, ".hatch", "server", "admin-token"))
	if err != nil {
		u.t.Fatal(err)
	}
	identity, err := os.ReadFile(filepath.Join(u.dir, ".hatch", "agent", "identity.json"))
	if err != nil {
		u.t.Fatal(err)
	}
	var id struct{ Token string }
	if err := json.Unmarshal(identity, &id); err != nil {
		u.t.Fatal(err)
	}
	log, err := os.ReadFile(filepath.Join(u.dir, ".hatch", "hatch.log"))
	if err != nil {
		u.t.Fatal(err)
	}
	if found := findSecrets([]string{string(log)}, []string{tokenSecret(string(admin)), tokenSecret(id.Token)}); len(found) > 0 {
		u.t.Fatalf("tokens in .hatch/hatch.log:\n%s", strings.Join(found, "\n"))
	}
}

// upToFirstAnswer starts hatch up and returns how long until the demo
// answers through the ingress.
func (u *upRun) upToFirstAnswer(timeout time.Duration) (time.Duration, *clProc) {
	u.t.Helper()
	start := time.Now()
	p := u.start()
	deadline := start.Add(timeout)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		code, _, err := viaIngress(ctx, u.ingress, "demo.localhost", "/")
		cancel()
		if err == nil && code == 200 {
			return time.Since(start), p
		}
		time.Sleep(50 * time.Millisecond)
	}
	u.t.Fatalf("no answer within %v\n%s", timeout, p.stdout())
	return 0, nil
}
