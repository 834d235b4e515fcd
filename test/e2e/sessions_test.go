//go:build docker

package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/hatchery/hatchery/internal/apiclient"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// tickProject is a project of one egg, app, of the test app writing
// "tick <version> <n>" every 50 ms and, at its start, a line of escape
// sequences.
func tickProject(t *testing.T, project string, replicas int) string {
	t.Helper()
	bin, err := dockertest.Binary("./test/app")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	dir := writeProject(t, map[string]string{
		"hatch.yaml": fmt.Sprintf(`project: %s
eggs:
  app:
    build: ./app
    replicas: %d
    port: 8080
    env: {APP_VERSION: "${env.APP_VERSION:-v1}", APP_TICK: 50ms, APP_ESCAPE: "1"}
    health: {http: /healthz, interval: 1s, timeout: 1s}
    stop_timeout: 2s
`, project, replicas),
		"app/Dockerfile": netAppImage.Dockerfile(),
	})
	if err := os.WriteFile(filepath.Join(dir, "app", "app"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "hatch.yaml")
}

// logLine is one line of `hatch logs` output: "app/<slot> <host> | tick <version> <n>".
var logLine = regexp.MustCompile(`^app/(\d+) (\S+) \| tick (\S+) (\d+)$`)

func TestLogsFollowsEveryReplicaThroughARollAndExecRunsInOne(t *testing.T) {
	c := newCluster(t, clusterOptions{}) // two agents, a and b, on the test's engine
	file := tickProject(t, "ticks", 3)
	other := tickProject(t, "others", 1)
	c.mustHatch(nil, "apply", "-f", file, "--yes")
	c.mustHatch([]string{"APP_VERSION=other"}, "apply", "-f", other, "--yes")
	for _, a := range c.agents {
		if len(c.projectContainers("default", "ticks", "app", a.hostID)) == 0 {
			t.Fatalf("no replica of ticks on %s: the test needs both hosts", a.name)
		}
	}

	t.Run("logs -f across a roll", func(t *testing.T) {
		logs := c.start("logs", []string{"logs", "ticks", "-f"}, nil)
		logs.waitLine(t, "tick v1 20", 20*time.Second)
		c.mustHatch([]string{"APP_VERSION=v2"}, "apply", "-f", file, "--yes")
		// The roll's new replicas are followed from their first line
		// (slots are numbered per host: a's 0 and 1, b's 0).
		dockertest.Eventually(t, 30*time.Second, 200*time.Millisecond, func() error {
			seen := map[string]bool{}
			for _, l := range strings.Split(logs.stdout(), "\n") {
				if m := logLine.FindStringSubmatch(l); m != nil && m[3] == "v2" {
					if n, _ := strconv.Atoi(m[4]); n >= 10 {
						seen[m[1]+" "+m[2]] = true
					}
				}
			}
			if len(seen) < 3 {
				return fmt.Errorf("v2 ticks from replicas %v, want all 3", seen)
			}
			return nil
		})
		logs.stop(t)
		out := logs.stdout()
		c.record(out)
		checkTicks(t, out)
		if !strings.Contains(out, `escape \x1b[2J\x1b]52;c;aGk=\a end`) || strings.ContainsRune(out, 0x1b) {
			t.Errorf("the escape sequences were not shown escaped:\n%s", out)
		}
		if strings.Contains(out, "tick other") {
			t.Errorf("lines of another project in the logs:\n%s", out)
		}
		if n := strings.Count(out, "-- replica started"); n < 3 {
			t.Errorf("%d replicas said to start, want the roll's 3:\n%s", n, out)
		}
		if n := strings.Count(out, "-- replica stopped"); n < 3 {
			t.Errorf("%d replicas said to stop, want the roll's 3 old ones:\n%s", n, out)
		}
	})

	t.Run("logs without -f ends, in time order, tail per container", func(t *testing.T) {
		out := c.mustHatch(nil, "logs", "ticks", "app/1", "--tail", "5")
		var lines []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if strings.HasPrefix(l, "app/1 ") {
				lines = append(lines, l)
			}
		}
		if len(lines) != 5 {
			t.Fatalf("hatch logs ticks app/1 --tail 5 gave %d lines of app/1:\n%s", len(lines), out)
		}
	})

	t.Run("exec -it under a terminal", func(t *testing.T) {
		cmd, tty, s := c.startUnderTerminal(t, "exec", "ticks", "app/0", "-it", "--", "/app", "-prompt")
		promptDialogue(t, "hatch exec -it", cmd, tty, s, 20*time.Second)
		c.record(s.text())
	})

	t.Run("a killed CLI ends the command, even one deaf to its input's end", func(t *testing.T) {
		p := c.start("exec-sleep", []string{"exec", "ticks", "app/1", "--", "/app", "-sleep"}, nil)
		p.waitLine(t, "sleeping", 20*time.Second)
		if n := sleepers(t, c); n != 1 {
			t.Fatalf("%d sleeping processes in ticks's containers, want 1", n)
		}
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		dockertest.Eventually(t, 15*time.Second, 200*time.Millisecond, func() error {
			if n := sleepers(t, c); n != 0 {
				return fmt.Errorf("%d sleeping processes left", n)
			}
			return nil
		})
	})

	t.Run("host and join tokens get 403", func(t *testing.T) {
		join := strings.TrimSpace(c.hatchSecretly("token", "create", "--join"))
		c.keepSecret(tokenSecret(join))
		for name, token := range map[string]string{"join": join, "host": hostToken(t, c.agents["a"])} {
			api, err := client.New(client.Config{Server: c.url, Token: token})
			if err != nil {
				t.Fatal(err)
			}
			for _, path := range []string{"/api/v1/projects/default/ticks/eggs/app/exec?cmd=ls", "/api/v1/projects/default/ticks/logs"} {
				_, err := api.Dial(t.Context(), path)
				var apiErr *apiclient.APIError
				if !errors.As(err, &apiErr) || apiErr.StatusCode != 403 {
					t.Errorf("%s token on %s: %v, want 403", name, path, err)
				}
			}
			api.Close()
		}
	})

	t.Run("an agent with --no-exec refuses exec, still serves logs", func(t *testing.T) {
		a := c.agents["a"] // it runs app/1, b runs only slot 0
		a.proc.stop(t)
		c.runAgent(a, "--no-exec")
		c.waitHostUp(a, 30*time.Second)
		// The host stayed up through the restart: wait for a report of the
		// new agent, which says --no-exec (the server refuses on it).
		dockertest.Eventually(t, 30*time.Second, 200*time.Millisecond, func() error {
			hosts, err := c.api.Hosts().List(t.Context())
			if err != nil {
				return err
			}
			for _, h := range hosts {
				if h.Name != a.name {
					continue
				}
				rep, err := c.api.Hosts().Report(t.Context(), h.ID)
				if err != nil {
					return err
				}
				if rep == nil || !rep.NoExec {
					return fmt.Errorf("host %s's report does not say --no-exec yet", a.name)
				}
				return nil
			}
			return fmt.Errorf("no host %s", a.name)
		})
		out, err := c.hatch(nil, "exec", "ticks", "app/1", "--", "/app", "-version")
		// The server refuses it first (the host's reports say --no-exec),
		// so no exec.started is recorded for it.
		if err == nil || !strings.Contains(out, "exec is turned off on host a (hatch agent --no-exec)") {
			t.Fatalf("exec on a --no-exec host: %v\n%s", err, out)
		}
		if out := c.mustHatch(nil, "logs", "ticks", "app/1", "--tail", "1", "--host", "a"); !strings.Contains(out, "app/1 a | tick") {
			t.Fatalf("logs of a --no-exec host: %s", out)
		}
		// Slots are numbered per host: --host picks which app/0 runs it.
		if out, err := c.hatch(nil, "exec", "ticks", "app/0", "--host", "b", "--", "/app", "-check"); err != nil {
			t.Fatalf("exec in b's app/0: %v\n%s", err, out)
		}
		out, err = c.hatch(nil, "exec", "ticks", "app/0", "--host", "a", "--", "/app", "-check")
		if err == nil || !strings.Contains(out, "exec is turned off on host a") {
			t.Fatalf("exec in a's app/0 (a runs --no-exec): %v\n%s", err, out)
		}
	})

	events := c.mustHatch(nil, "events")
	if !strings.Contains(events, "exec of app (1 arguments) in app/0") || !strings.Contains(events, "(by admin)") {
		t.Errorf("no exec event naming the program, its argument count and the admin:\n%s", events)
	}
	// Three execs ran (-prompt, -sleep, b's -check); the two --no-exec
	// refused are not in the event log: the server refused them first.
	if n := strings.Count(events, "exec of app ("); n != 3 {
		t.Errorf("%d exec events, want the 3 that ran:\n%s", n, events)
	}
}

// checkTicks checks every replica's lines: each container's ticks (a slot
// and version) arrive once, in order, from its first (n=1) on.
func checkTicks(t *testing.T, out string) {
	t.Helper()
	last := map[string]int{}
	for _, l := range strings.Split(out, "\n") {
		m := logLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		key := m[1] + " " + m[2] + " " + m[3]
		n, _ := strconv.Atoi(m[4])
		if n != last[key]+1 {
			t.Fatalf("%s: tick %d after %d: every line once and in order was the promise\n%s", key, n, last[key], out)
		}
		last[key] = n
	}
	if len(last) < 6 {
		t.Fatalf("ticks of %d replicas (%v), want 3 of v1 and 3 of v2", len(last), last)
	}
}

// sleepers counts `/app -sleep` processes in the ticks project's containers.
func sleepers(t *testing.T, c *cluster) int {
	t.Helper()
	n := 0
	for _, ctr := range c.projectContainers("default", "ticks", "app", "") {
		top, err := c.scope.Client.ContainerTop(t.Context(), ctr.ID, nil)
		if err != nil {
			continue // stopped meanwhile
		}
		for _, proc := range top.Processes {
			if strings.Contains(strings.Join(proc, " "), "-sleep") {
				n++
			}
		}
	}
	return n
}

// hostToken reads an agent's host token from its identity.
func hostToken(t *testing.T, a *clAgent) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(a.dataDir, "identity.json"))
	if err != nil {
		t.Fatal(err)
	}
	var id struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(data, &id); err != nil || id.Token == "" {
		t.Fatalf("identity of %s: %v", a.name, err)
	}
	return id.Token
}

// startUnderTerminal starts the CLI with args under a 24x80 pseudo-terminal,
// whose screen it keeps; the terminal is closed at the test's end.
func (c *cluster) startUnderTerminal(t *testing.T, args ...string) (*exec.Cmd, *os.File, *screen) {
	t.Helper()
	cmd := exec.Command(c.bin, args...)
	cmd.Dir, cmd.Env = c.dir, c.cliEnv()
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	s := &screen{}
	go s.read(tty)
	return cmd, tty, s
}

// promptDialogue talks to test/app's -prompt started under a terminal
// (startUnderTerminal): its prompt, written before any input, comes within
// first; the name typed is greeted; the window's size and a resize reach
// it; "exit 7" ends it, and 7 is the CLI's exit code.
func promptDialogue(t *testing.T, what string, cmd *exec.Cmd, tty *os.File, s *screen, first time.Duration) {
	t.Helper()
	s.wait(t, "name? ", first)
	fmt.Fprint(tty, "bob\r")
	s.wait(t, "hello bob", 10*time.Second)
	fmt.Fprint(tty, "size\r")
	s.wait(t, "size 24x80", 10*time.Second)
	if err := pty.Setsize(tty, &pty.Winsize{Rows: 50, Cols: 132}); err != nil {
		t.Fatal(err)
	}
	// The resize travels as its own message; ask until it has landed.
	dockertest.Eventually(t, 10*time.Second, 300*time.Millisecond, func() error {
		fmt.Fprint(tty, "size\r")
		if !strings.Contains(s.text(), "size 50x132") {
			return errors.New("no size 50x132 yet")
		}
		return nil
	})
	fmt.Fprint(tty, "exit 7\r")
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 7 {
		t.Fatalf("%s ended with %v, want exit code 7; screen:\n%s", what, err, s.text())
	}
}

// screen keeps what a terminal shows.
type screen struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (s *screen) read(f *os.File) {
	r := bufio.NewReader(f)
	b := make([]byte, 4096)
	for {
		n, err := r.Read(b)
		s.mu.Lock()
		s.buf.Write(b[:n])
		s.mu.Unlock()
		if err != nil {
			return
		}
	}
}

func (s *screen) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

func (s *screen) wait(t *testing.T, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(s.text(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the terminal never showed %q:\n%s", want, s.text())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
