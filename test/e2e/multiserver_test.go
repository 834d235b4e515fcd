//go:build docker

package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
	"github.com/hatchery/hatchery/internal/testutil/pgtest"
)

// startPostgres starts a throwaway PostgreSQL cluster of this test's own
// (pgtest) while the caller goes on, and returns the function that waits
// for it; the cluster is stopped when the test ends. Skipped without
// PostgreSQL's binaries unless CI=true.
func startPostgres(t *testing.T) func() *pgtest.Cluster {
	t.Helper()
	type started struct {
		pg  *pgtest.Cluster
		err error
	}
	ch := make(chan started, 1)
	go func() {
		pg, err := pgtest.Start()
		ch <- started{pg, err}
	}()
	var once sync.Once
	var pg *pgtest.Cluster
	// The cluster is stopped even if the test ends before waiting for it.
	t.Cleanup(func() {
		once.Do(func() { s := <-ch; pg = s.pg })
		if pg != nil {
			if err := pg.Stop(); err != nil {
				t.Errorf("stop PostgreSQL: %v", err)
			}
		}
	})
	return func() *pgtest.Cluster {
		t.Helper()
		var err error
		once.Do(func() { s := <-ch; pg, err = s.pg, s.err })
		if errors.Is(err, pgtest.ErrNoBinaries) && os.Getenv("CI") != "true" {
			t.Skipf("pgtest: %v (CI=true makes this a failure)", err)
		}
		if err != nil || pg == nil {
			t.Fatalf("pgtest: %v", err)
		}
		return pg
	}
}

// copyTree copies the regular files under from to to, keeping their modes.
func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o700)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), data, info.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Two `hatch server` processes on one PostgreSQL database, given copies of
// what `hatch server init` wrote, and a real `hatch agent` joined through
// the first with its URL only. The agent learns of the second from its
// desired-state answers; when the first is killed (-9) its heartbeat and
// long-poll go on at the second within 5 s, and an apply made by a CLI whose
// first URL is the dead server reaches the agent through the second. Before
// that, an exec through either server reaches the agent (sessions are each
// server's own). Then PostgreSQL is killed: the server answers 503 naming the
// database, the agent's containers keep running, and once the database is
// back the agent reports again and an apply converges.
func TestAnAgentFailsOverToAnotherServerWhenItsServerIsKilled(t *testing.T) {
	began := time.Now()
	waitPostgres := startPostgres(t) // while the binary and the test image build
	bin, err := dockertest.Binary("./cmd/hatch")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(spreadProject(t, "failover", 1, ""), "hatch.yaml")
	pg := waitPostgres()
	t.Logf("PostgreSQL, the binary and the test image ready in %v", time.Since(began).Round(time.Millisecond))
	c := &cluster{t: t, scope: dockertest.NewScope(t), bin: bin, dir: t.TempDir(), agents: map[string]*clAgent{},
		convergeInterval: 2 * time.Second}
	list, urls := c.startServersOnPostgres(t, pg, []string{"a", "b"})
	servers := map[string]*clProc{"a": list[0], "b": list[1]}
	urlA, urlB := urls[0], urls[1]
	c.url = urlA // the agent joins, and hatch token runs, with A's URL only

	t.Logf("PostgreSQL and two servers up in %v", time.Since(began).Round(time.Millisecond))
	a := c.startAgent("a", "127.0.0.2", nil)
	t.Logf("the agent joined at %v", time.Since(began).Round(time.Millisecond))
	// The answers of A list both servers, and the agent keeps the list.
	dockertest.Eventually(t, 20*time.Second, 200*time.Millisecond, func() error {
		data, err := os.ReadFile(filepath.Join(a.dataDir, "identity.json"))
		if err != nil {
			return err
		}
		var id struct {
			Server  string   `json:"server"`
			Servers []string `json:"servers"`
		}
		if err := json.Unmarshal(data, &id); err != nil {
			return err
		}
		// The live list is sorted by URL, whichever server is first.
		if id.Server != urlA || !slices.Equal(id.Servers, slices.Sorted(slices.Values([]string{urlA, urlB}))) {
			return fmt.Errorf("identity.json names %q and %v", id.Server, id.Servers)
		}
		return nil
	})
	t.Logf("the agent kept both servers at %v", time.Since(began).Round(time.Millisecond))

	// Sessions are each server's own: the agent polls both for them, so an
	// exec reaches it through either server, whichever holds its main
	// long-poll (A).
	c.mustHatch([]string{client.EnvServer + "=" + urlA}, "apply", "-f", file, "--yes")
	for _, u := range []string{urlB, urlA} {
		// The app's own health probe: exit 0 only if it ran in the replica.
		if out, err := c.hatch([]string{client.EnvServer + "=" + u}, "exec", "failover", "app", "--", "/app", "-check"); err != nil {
			t.Fatalf("hatch exec through %s: %v\n%s", u, err, out)
		}
	}
	t.Logf("an exec through each server reached the agent at %v", time.Since(began).Round(time.Millisecond))
	time.Sleep(time.Second) // the agent's long-poll is held by A

	if err := servers["a"].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-servers["a"].done
	killed := time.Now()
	// Within 5 s B hears from the agent: its heartbeat went on there.
	var failover time.Duration
	dockertest.Eventually(t, 15*time.Second, 100*time.Millisecond, func() error {
		hosts, err := c.api.Hosts().List(t.Context())
		if err != nil {
			return err
		}
		for _, h := range hosts {
			if h.Name == "a" && h.LastSeen.After(killed) {
				failover = time.Since(killed)
				return nil
			}
		}
		return errors.New("no report from host a since A was killed")
	})
	t.Logf("the agent reported to B %v after A was killed", failover.Round(time.Millisecond))
	if failover > 5*time.Second {
		t.Errorf("the agent reached B %v after A was killed, want within 5 s", failover)
	}

	a.proc.waitLine(t, `"now talking to another server of the control plane"`, 10*time.Second)

	// The CLI given the dead A first still works, through B; and the apply
	// it makes reaches the agent, whose long-poll is now held by B.
	cli := []string{client.EnvServer + "=" + urlA + "," + urlB}
	if out := c.mustHatch(cli, "hosts"); !strings.Contains(out, " up ") {
		t.Fatalf("hatch hosts through B: the host is not up:\n%s", out)
	}
	start := time.Now()
	c.mustHatch(cli, "apply", "-f", filepath.Join(spreadProject(t, "failover", 2, ""), "hatch.yaml"), "--yes")
	t.Logf("hatch apply through B converged in %v", time.Since(start).Round(time.Millisecond))
	running := c.projectContainers("default", "failover", "app", a.hostID)
	if len(running) != 2 {
		t.Fatalf("%d containers of the applied egg on host a, want 2", len(running))
	}

	// PostgreSQL itself killed: B answers 503 naming the database, the
	// agent keeps its containers running; once it is back, all resumes.
	if err := pg.Kill(); err != nil {
		t.Fatal(err)
	}
	killed = time.Now()
	out, err := c.hatch(cli, "hosts")
	if err == nil || !strings.Contains(out, "database") {
		t.Fatalf("hatch hosts with PostgreSQL down: %v, want a failure naming the database: %q", err, out)
	}
	t.Logf("with PostgreSQL down the CLI said: %s", lastLine(out))
	time.Sleep(3 * time.Second) // a few of the agent's reports and polls fail meanwhile
	if now := c.projectContainers("default", "failover", "app", a.hostID); !sameContainers(now, running) {
		t.Fatalf("the agent's containers changed while PostgreSQL was down: %d now", len(now))
	}
	if err := pg.Restart(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	dockertest.Eventually(t, 30*time.Second, 200*time.Millisecond, func() error {
		hosts, err := c.api.Hosts().List(t.Context())
		if err != nil {
			return err
		}
		for _, h := range hosts {
			if h.Name == "a" && h.LastSeen.After(back) {
				return nil
			}
		}
		return errors.New("no report from host a since PostgreSQL came back")
	})
	t.Logf("PostgreSQL down %v; the agent reported again %v after it was back",
		back.Sub(killed).Round(time.Millisecond), time.Since(back).Round(time.Millisecond))
	c.mustHatch(cli, "apply", "-f", file, "--yes")
	if got := c.projectContainers("default", "failover", "app", a.hostID); len(got) != 1 {
		t.Fatalf("%d containers after the apply once PostgreSQL was back, want 1", len(got))
	}
	t.Logf("done at %v; then the clean-up", time.Since(began).Round(time.Millisecond))
}

// sameContainers reports whether two lists hold the same container IDs.
func sameContainers(a, b []container.Summary) bool {
	ids := func(l []container.Summary) []string {
		var out []string
		for _, s := range l {
			out = append(out, s.ID)
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(ids(a), ids(b))
}
