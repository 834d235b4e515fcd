//go:build docker

package netcluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

func TestMain(m *testing.M) {
	if err := Sweep(); err != nil {
		fmt.Fprintln(os.Stderr, "netcluster: sweep:", err)
		os.Exit(1)
	}
	os.Exit(dockertest.Main(m))
}

// TestHostsAreApartAndGoneAfterCleanup starts two hosts and checks what the
// e2e tests rely on: each has its own engine, its address answers from the
// root namespace, hosts reach each other only while Allow's rules are in,
// a stopped host is off the network and comes back with its engine's data,
// and the cleanup leaves no namespace, link, rule, process or directory.
func TestHostsAreApartAndGoneAfterCleanup(t *testing.T) {
	app, err := dockertest.Binary("./test/app")
	if err != nil {
		t.Fatal(err)
	}
	var c *Cluster
	var keptDir, keptID string // a container's host directory and ID
	t.Run("hosts", func(t *testing.T) {
		c = Start(t, 2)
		h1, h2 := c.Hosts[0], c.Hosts[1]
		main, err := dockertest.NewClient(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer main.Close()
		ids := map[string]string{}
		for name, cli := range map[string]*client.Client{"main": main, h1.Name: h1.Docker(), h2.Name: h2.Docker()} {
			info, err := cli.Info(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			// Info.ID comes from /etc/docker/key.json, which every
			// engine of the machine shares; the data root is the engine's.
			if other, ok := ids[info.DockerRootDir]; ok {
				t.Fatalf("%s and %s are the same engine (%s)", name, other, info.DockerRootDir)
			}
			ids[info.DockerRootDir] = name
		}

		// The test app serves in h2's namespace only.
		srv := h2.Command(context.Background(), app)
		srv.Env = append(srv.Env, "APP_PORT=8080")
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
		url := "http://" + net.JoinHostPort(h2.IP, "8080") + "/healthz"
		dockertest.Eventually(t, 10*time.Second, 100*time.Millisecond, func() error {
			_, _, err := dockertest.Get(t.Context(), url)
			return err
		})
		if _, _, err := dockertest.Get(t.Context(), "http://127.0.0.1:8080/healthz"); err == nil {
			// Not a proof of isolation if another test serves there, but
			// a hint worth failing on: the app must not be in the root namespace.
			t.Log("something answers on 127.0.0.1:8080 in the root namespace")
		}
		reach := func() error {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			out, err := h1.Command(ctx, app, "-check", "-check-url", url).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		}
		if err := reach(); err == nil {
			t.Fatal("h1 reaches h2 without a rule: the root namespace forwards between hosts")
		}
		if err := c.Allow(h1, h2); err != nil {
			t.Fatal(err)
		}
		if err := reach(); err != nil {
			t.Fatalf("h1 does not reach h2 with the rules in: %v", err)
		}
		if err := c.Disallow(h1, h2); err != nil {
			t.Fatal(err)
		}
		if err := reach(); err == nil {
			t.Fatal("h1 still reaches h2 after Disallow")
		}
		if err := c.Allow(h1, h2); err != nil { // left for the cleanup to remove
			t.Fatal(err)
		}

		// A container on h2's engine survives a Stop and Start; h2 is off
		// the network meanwhile, and its processes are gone.
		img := "hatchtest/app:" + c.run
		if err := dockertest.BuildImage(t.Context(), h2.Docker(), dockertest.ImageSpec{}, img, nil); err != nil {
			t.Fatal(err)
		}
		created, err := h2.Docker().ContainerCreate(t.Context(), &container.Config{Image: img}, nil, nil, nil, "kept")
		if err != nil {
			t.Fatal(err)
		}
		if err := h2.Docker().ContainerStart(t.Context(), created.ID, container.StartOptions{}); err != nil {
			t.Fatal(err)
		}
		keptDir, keptID = h2.Dir, created.ID
		start := time.Now()
		if err := h2.Stop(); err != nil {
			t.Fatal(err)
		}
		t.Logf("h2 stopped in %v", time.Since(start).Round(time.Millisecond))
		if _, _, err := dockertest.Get(t.Context(), url); err == nil {
			t.Fatal("h2's address answers while it is stopped")
		}
		if _, err := h2.Docker().Ping(t.Context()); err == nil {
			t.Fatal("h2's engine answers while it is stopped")
		}
		for _, p := range procs() {
			if p.netns == h2.netnsInode() || p.inContainer([]string{created.ID}) {
				t.Fatalf("process %d (%s) of h2 runs while it is stopped", p.pid, p.cmdline)
			}
		}
		start = time.Now()
		if err := h2.Start(); err != nil {
			t.Fatal(err)
		}
		t.Logf("h2 started again in %v", time.Since(start).Round(time.Millisecond))
		if _, err := h2.Docker().ContainerInspect(t.Context(), created.ID); err != nil {
			t.Fatalf("h2's container after a restart: %v", err)
		}
		if err := h2.Docker().ContainerStart(t.Context(), created.ID, container.StartOptions{}); err != nil {
			t.Fatalf("h2's container does not start again: %v", err)
		}
	})
	if c == nil || c.dir == "" {
		return
	}
	// The subtest's cleanup has run: nothing of the run is left.
	if left := leftovers(t, c.run); len(left) > 0 {
		t.Fatalf("left after cleanup: %v", left)
	}
	if keptID != "" {
		sum := sha256.Sum256([]byte(filepath.Join(keptDir, "exec", "containerd", "containerd.sock", "moby", keptID)))
		if _, err := os.Stat(filepath.Join(shimSocketDir, hex.EncodeToString(sum[:]))); err == nil {
			t.Fatalf("the shim socket of h2's container is left in %s", shimSocketDir)
		}
	}
}

// TestSweepRemovesADeadRunAndSparesALiveOne fakes what a killed run
// leaves (its directory unlocked, a namespace, links and a rule) beside a
// live run, sweeps, and checks that only the dead run is gone.
func TestSweepRemovesADeadRunAndSparesALiveOne(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root")
	}
	ctx := t.Context()
	live := &Cluster{t: t, run: randomHex(3)}
	t.Cleanup(live.close)
	if err := os.MkdirAll(StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	dead := randomHex(3)
	deadDir := filepath.Join(StateDir, dead)
	for _, dir := range []string{deadDir + "/h1/data", filepath.Join(StateDir, live.run)} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	live.dir = filepath.Join(StateDir, live.run)
	if live.lock, err = lockFile(filepath.Join(live.dir, "lock"), true); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(deadDir, "lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	mk := func(id string) (ns, link string) {
		ns, link = nsPrefix+id+"-1", linkPrefix+id+"-1"
		for _, args := range [][]string{
			{"ip", "netns", "add", ns},
			{"ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns},
			{"ip", "link", "add", linkPrefix + id + "-0", "type", "veth", "peer", "name", linkPrefix + id + "-0p"},
			{"iptables", "-w", "-I", ruleChain, "-i", link, "-o", link, "-m", "comment", "--comment", commentPrefix + id, "-j", "ACCEPT"},
			{"iptables", "-w", "-I", "INPUT", "-i", link, "-d", "10.210.0.1/32", "-m", "comment", "--comment", commentPrefix + id, "-j", "DROP"},
		} {
			if err := run(ctx, args[0], args[1:]...); err != nil {
				t.Fatal(err)
			}
		}
		return ns, link
	}
	deadNS, deadLink := mk(dead)
	liveNS, liveLink := mk(live.run)
	// The live run's names are removed by hand: they are not a real host's.
	t.Cleanup(func() {
		_ = run(context.Background(), "iptables", "-w", "-D", ruleChain, "-i", liveLink, "-o", liveLink, "-m", "comment", "--comment", commentPrefix+live.run, "-j", "ACCEPT")
		_ = run(context.Background(), "iptables", "-w", "-D", "INPUT", "-i", liveLink, "-d", "10.210.0.1/32", "-m", "comment", "--comment", commentPrefix+live.run, "-j", "DROP")
		_ = run(context.Background(), "ip", "link", "del", linkPrefix+live.run+"-0")
		_ = run(context.Background(), "ip", "netns", "del", liveNS)
	})

	if err := Sweep(); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, dead); len(left) > 0 {
		t.Errorf("the dead run's %v survived the sweep (namespace %s, link %s)", left, deadNS, deadLink)
	}
	if left := leftovers(t, live.run); len(left) != 7 {
		t.Errorf("of the live run's directory, namespace, three links and two rules, %v are left; want all 7", left)
	}
}

// TestCutFromServerCutsTheServerOnly: a host cut from the server reaches
// neither the server's address (a listener in the root namespace on
// ServerIP) nor is reached from it, and still reaches the other host, which
// still reaches the server; both paths are back after RestoreServer, and a
// cut left in place is gone after the cleanup.
func TestCutFromServerCutsTheServerOnly(t *testing.T) {
	app, err := dockertest.Binary("./test/app")
	if err != nil {
		t.Fatal(err)
	}
	var c *Cluster
	t.Run("cut", func(t *testing.T) {
		c = Start(t, 2)
		h1, h2 := c.Hosts[0], c.Hosts[1]
		if err := c.Allow(h1, h2); err != nil {
			t.Fatal(err)
		}
		// The server: a listener on ServerIP in the root namespace, which
		// records who called.
		ln, err := net.Listen("tcp", net.JoinHostPort(c.ServerIP, "0"))
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNoContent)
		})}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		serverURL := "http://" + ln.Addr().String() + "/healthz"
		// h2 serves the test app in its namespace, for h1 to reach.
		peer := h2.Command(context.Background(), app)
		peer.Env = append(peer.Env, "APP_PORT=8080")
		if err := peer.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = peer.Process.Kill(); _ = peer.Wait() })
		peerURL := "http://" + net.JoinHostPort(h2.IP, "8080") + "/healthz"
		// And h1 too, for the server's side to reach: a connection from
		// ServerIP to h1 is cut as well.
		h1app := h1.Command(context.Background(), app)
		h1app.Env = append(h1app.Env, "APP_PORT=8080")
		if err := h1app.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h1app.Process.Kill(); _ = h1app.Wait() })
		h1URL := "http://" + net.JoinHostPort(h1.IP, "8080") + "/healthz"

		// reach probes url from inside h (or from the root namespace from
		// ServerIP, for h nil), once, within 2 s.
		reach := func(h *Host, url string) error {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			if h == nil {
				d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(c.ServerIP)}}
				cl := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
				defer cl.CloseIdleConnections()
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				if err != nil {
					return err
				}
				resp, err := cl.Do(req)
				if err != nil {
					return err
				}
				resp.Body.Close()
				return nil
			}
			out, err := h.Command(ctx, app, "-check", "-check-url", url).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		}
		type path struct {
			from *Host // nil: the root namespace, from ServerIP
			url  string
		}
		paths := map[string]path{
			"h1 -> server":      {h1, serverURL},
			"h1 -> h2":          {h1, peerURL},
			"h2 -> server":      {h2, serverURL},
			"server addr -> h1": {nil, h1URL},
		}
		expect := func(when string, want map[string]bool) {
			t.Helper()
			for name, p := range paths {
				// A path that should work may need a moment (the app's
				// start); one that should not must fail at once.
				var err error
				if want[name] {
					dockertest.Eventually(t, 10*time.Second, 100*time.Millisecond, func() error {
						err = reach(p.from, p.url)
						return err
					})
					continue
				}
				if err = reach(p.from, p.url); err == nil {
					t.Fatalf("%s: %s works, want it cut", when, name)
				}
			}
		}
		all := map[string]bool{"h1 -> server": true, "h1 -> h2": true, "h2 -> server": true, "server addr -> h1": true}
		expect("before the cut", all)
		if err := c.CutFromServer(h1); err != nil {
			t.Fatal(err)
		}
		if err := c.CutFromServer(h1); err != nil { // again: a no-op
			t.Fatal(err)
		}
		expect("h1 cut from the server", map[string]bool{"h1 -> h2": true, "h2 -> server": true})
		if err := c.RestoreServer(h1); err != nil {
			t.Fatal(err)
		}
		if left := leftovers(t, c.run); slices.ContainsFunc(left, func(s string) bool { return strings.Contains(s, "DROP") }) {
			t.Fatalf("a cut's rule is left after RestoreServer: %v", left)
		}
		expect("h1's path to the server restored", all)
		if err := c.CutFromServer(h2); err != nil { // left for the cleanup
			t.Fatal(err)
		}
		expect("h2 cut from the server", map[string]bool{"h1 -> h2": true, "h1 -> server": true, "server addr -> h1": true})
	})
	if c == nil || c.dir == "" {
		return
	}
	if left := leftovers(t, c.run); len(left) > 0 {
		t.Fatalf("left after cleanup: %v", left)
	}
}

// leftovers names what of a run exists: its directory, namespaces, links
// and rules.
func leftovers(t *testing.T, run string) []string {
	t.Helper()
	var left []string
	if _, err := os.Stat(filepath.Join(StateDir, run)); err == nil {
		left = append(left, "directory")
	}
	entries, _ := os.ReadDir(netnsDir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), nsPrefix+run+"-") {
			left = append(left, "namespace "+e.Name())
		}
	}
	links, _ := net.Interfaces()
	for _, l := range links {
		if strings.HasPrefix(l.Name, linkPrefix+run+"-") {
			left = append(left, "link "+l.Name)
		}
	}
	for _, chain := range ruleChains {
		rules, err := output(context.Background(), "iptables", "-w", "-S", chain)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(rules, "\n") {
			if strings.Contains(line, commentPrefix+run) {
				left = append(left, "rule "+line)
			}
		}
	}
	for _, p := range procs() {
		if strings.Contains(p.cmdline, filepath.Join(StateDir, run)+"/") {
			left = append(left, fmt.Sprintf("process %d", p.pid))
		}
	}
	return left
}
