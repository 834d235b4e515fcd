//go:build docker

package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// Issue 31's failover on the namespace cluster: three real hosts, each with
// its own engine, and the real server and agents, with the settings for
// speed the issue names: fence_after 5 s, request timeout 2 s, liveness
// 2 s, the egg's drain and stop 1 s each, after 12 s (above their sum, 9 s,
// as the plan demands).
const (
	foFenceAfter     = 5 * time.Second
	foRequestTimeout = 2 * time.Second
	foLiveness       = 2 * time.Second
	foAfter          = 12 * time.Second
	// foStaleCacheWait is the restarted agent's --stale-cache-wait: after
	// it, an agent that has not heard the server converges from its cache.
	foStaleCacheWait = 3 * time.Second
	foProjectName    = "fo"
	foRoute          = "fo.localhost"
)

// newFailoverCluster is three hosts and a server fencing after
// foFenceAfter, with a liveness of foLiveness.
func newFailoverCluster(tb testing.TB) *cluster {
	tb.Helper()
	return newCluster(tb, clusterOptions{hosts: 3, liveness: foLiveness,
		serverArgs: []string{"--fence-after", foFenceAfter.String(), "--request-timeout", foRequestTimeout.String()}})
}

// applyFailoverProject applies the project: kv, one replica of the test
// app built from a source Blob (each engine builds its own image), keeping
// files on its volume, which has backup and failover after foAfter; drain
// and stop 1 s each.
func (c *cluster) applyFailoverProject(tb testing.TB) {
	tb.Helper()
	bin, err := dockertest.Binary("./test/app")
	if err != nil {
		tb.Fatal(err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		tb.Fatal(err)
	}
	dir := writeProject(tb, map[string]string{
		"hatch.yaml": fmt.Sprintf(`project: %s
eggs:
  kv:
    build: ./app
    replicas: 1
    port: 8080
    volumes: ["data:/data"]
    routes: [%s]
    health: {http: /healthz, interval: 1s, timeout: 1s}
    stop_timeout: 1s
    rollout: {drain_timeout: 1s}
volumes:
  data:
    backup: {keep: 5}
    failover: {after: %s}
`, foProjectName, foRoute, foAfter),
		"app/Dockerfile": netAppImage.Dockerfile(),
	})
	if err := os.WriteFile(filepath.Join(dir, "app", "app"), data, 0o755); err != nil {
		tb.Fatal(err)
	}
	start := time.Now()
	out := c.mustHatch(nil, "apply", "-f", filepath.Join(dir, "hatch.yaml"), "--yes")
	tb.Logf("apply of kv (one build) in %v:\n%s", time.Since(start).Round(time.Millisecond), out)
}

// kvRunningOn lists the running kv containers on a's engine, whatever
// host label they carry.
func (c *cluster) kvRunningOn(ctx context.Context, a *clAgent) ([]container.Summary, error) {
	f := filters.NewArgs(filters.Arg("label", containers.LabelProject+"="+foProjectName), filters.Arg("label", containers.LabelEgg+"=kv"))
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return a.host.Docker().ContainerList(ctx, container.ListOptions{Filters: f})
}

// kvHost waits until exactly one engine runs kv, and its host's ingress
// serves it; it returns that host.
func (c *cluster) kvHost(tb testing.TB, timeout time.Duration) *clAgent {
	tb.Helper()
	var on *clAgent
	dockertest.Eventually(tb, timeout, 100*time.Millisecond, func() error {
		var where []string
		on = nil
		for _, a := range c.foAgents() {
			list, err := c.kvRunningOn(tb.Context(), a)
			if err != nil {
				continue // a stopped host
			}
			if len(list) > 0 {
				on = a
				where = append(where, fmt.Sprintf("%s: %d", a.name, len(list)))
			}
		}
		if len(where) != 1 {
			return fmt.Errorf("kv runs on %v, want one host", where)
		}
		ctx, cancel := context.WithTimeout(tb.Context(), 2*time.Second)
		defer cancel()
		if code, body, err := viaIngress(ctx, on, foRoute, "/healthz"); err != nil || code != http.StatusOK {
			return fmt.Errorf("kv on %s: %d %q %v", on.name, code, body, err)
		}
		return nil
	})
	return on
}

// foAgents are the cluster's agents, by host order.
func (c *cluster) foAgents() []*clAgent {
	return []*clAgent{c.agents["h1"], c.agents["h2"], c.agents["h3"]}
}

// foPut writes /data/<name> through a's ingress.
func foPut(tb testing.TB, a *clAgent, name string, b []byte) error {
	ctx, cancel := context.WithTimeout(tb.Context(), 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, a.IngressURL()+"/file?path=/data/"+name, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Host = foRoute
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("PUT /data/%s: %s %s", name, resp.Status, body)
	}
	return nil
}

// foGet reads /data/<name> through a's ingress.
func foGet(tb testing.TB, a *clAgent, name string) (int, string, error) {
	ctx, cancel := context.WithTimeout(tb.Context(), 3*time.Second)
	defer cancel()
	return viaIngress(ctx, a, foRoute, "/file?path=/data/"+name)
}

// foBackup takes a backup by hand and returns when the CLI said it was
// done.
func (c *cluster) foBackup(tb testing.TB) {
	tb.Helper()
	start := time.Now()
	if out, code := c.hatchCode(nil, "volume", "backup", foProjectName, "data"); code != 0 {
		tb.Fatalf("hatch volume backup: exit %d\n%s", code, out)
	}
	tb.Logf("backup done in %v", time.Since(start).Round(time.Millisecond))
}

// waitFailedOver waits until kv serves on a host other than from, with the
// backup's file (name, want) and without the file written after it
// (lost); it returns that host.
func (c *cluster) waitFailedOver(tb testing.TB, from *clAgent, name, want, lost string, timeout time.Duration) *clAgent {
	tb.Helper()
	var to *clAgent
	dockertest.Eventually(tb, timeout, 100*time.Millisecond, func() error {
		to = nil
		for _, a := range c.foAgents() {
			if a == from {
				continue
			}
			if list, err := c.kvRunningOn(tb.Context(), a); err == nil && len(list) > 0 {
				to = a
			}
		}
		if to == nil {
			return fmt.Errorf("kv runs on no host but %s", from.name)
		}
		code, body, err := foGet(tb, to, name)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("kv on %s: GET %s: %d %q %v", to.name, name, code, body, err)
		}
		if body != want {
			tb.Fatalf("kv on %s after the failover: %s holds %q, want the backup's %q", to.name, name, body, want)
		}
		return nil
	})
	if code, body, err := foGet(tb, to, lost); err != nil || code != http.StatusNotFound {
		tb.Fatalf("kv on %s after the failover: %s, written after the backup: %d %q %v; want 404", to.name, lost, code, body, err)
	}
	return to
}

// kvSampler lists the running kv containers on every engine every 100 ms
// (the engines in parallel) and keeps the worst it saw.
type kvSampler struct {
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	samples int
	errs    int
	max     int
	twice   []string // the samples that saw more than one
}

func (c *cluster) sampleKV(tb testing.TB) *kvSampler {
	s := &kvSampler{stop: make(chan struct{}), done: make(chan struct{})}
	agents := c.foAgents()
	go func() {
		defer close(s.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			at := time.Now()
			var wg sync.WaitGroup
			counts := make([]int, len(agents))
			errs := make([]error, len(agents))
			for i, a := range agents {
				wg.Go(func() {
					list, err := c.kvRunningOn(context.Background(), a)
					counts[i], errs[i] = len(list), err
				})
			}
			wg.Wait()
			n, where := 0, []string{}
			s.mu.Lock()
			for i, a := range agents {
				if errs[i] != nil { // a stopped engine runs nothing
					s.errs++
					continue
				}
				n += counts[i]
				if counts[i] > 0 {
					where = append(where, fmt.Sprintf("%s:%d", a.name, counts[i]))
				}
			}
			s.samples++
			s.max = max(s.max, n)
			if n > 1 {
				s.twice = append(s.twice, fmt.Sprintf("%s %v", at.Format("15:04:05.000"), where))
			}
			s.mu.Unlock()
		}
	}()
	tb.Cleanup(s.end)
	return s
}

func (s *kvSampler) end() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

// check ends the sampling and fails if two kv ever ran at once.
func (s *kvSampler) check(tb testing.TB) {
	tb.Helper()
	s.end()
	s.mu.Lock()
	defer s.mu.Unlock()
	tb.Logf("sampler: %d samples of the 3 engines, %d engine errors (stopped hosts), at most %d kv running at once", s.samples, s.errs, s.max)
	if s.samples < 10 {
		tb.Fatalf("the sampler took %d samples: it did not run", s.samples)
	}
	if len(s.twice) > 0 {
		tb.Fatalf("two kv containers ran at once in %d samples: %v", len(s.twice), s.twice)
	}
}

// eventNaming waits until an event of typ exists, recorded after since,
// whose host is host's (nil: any) and whose message holds every one of
// subs, and returns it.
func (c *cluster) eventNaming(tb testing.TB, typ string, host *clAgent, since time.Time, timeout time.Duration, subs ...string) api.Event {
	tb.Helper()
	var found api.Event
	dockertest.Eventually(tb, timeout, 250*time.Millisecond, func() error {
		var list api.EventList
		c.getJSON("/api/v1/events?limit=1000", &list)
		var seen []string
	next:
		for _, e := range list.Events {
			if e.Type != typ || e.Time.Before(since) {
				continue
			}
			seen = append(seen, fmt.Sprintf("[host %s] %s", e.Host, e.Message))
			if host != nil && e.Host != host.hostID && e.Host != host.name {
				continue
			}
			for _, s := range subs {
				if !strings.Contains(e.Message, s) {
					continue next
				}
			}
			found = e
			return nil
		}
		want := "any host"
		if host != nil {
			want = "host " + host.name + " (" + host.hostID + ")"
		}
		return fmt.Errorf("no %s event of %s naming %q among %q", typ, want, subs, seen)
	})
	return found
}

// staysWithoutKV checks for d that a's engine runs no kv container.
func (c *cluster) staysWithoutKV(tb testing.TB, a *clAgent, d time.Duration, why string) {
	tb.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		list, err := c.kvRunningOn(tb.Context(), a)
		if err != nil {
			tb.Fatalf("containers on %s: %v", a.name, err)
		}
		if len(list) > 0 {
			tb.Fatalf("%s: kv runs on %s (%s %s); its agent's log ends:\n%s", why, a.name, list[0].ID[:12], list[0].Status, logTail(a.proc.stderr(), 40))
		}
	}
}

// logTail is the last n lines of a log.
func logTail(log string, n int) string {
	lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// foDataWindow is the data window a volume.failed_over event's message
// reports ("writes after the backup, up to 3s, are lost").
var foDataWindow = regexp.MustCompile(`up to (\S+?),? are lost`)

// TestFailover is issue 31's failover, fenced, on three real hosts:
//
//  1. Host A cut from the control plane only (CutFromServer): A stops kv
//     within fence_after + 2 s, checked on A's engine; A's agent killed
//     (kill -9) and restarted while still cut does not start kv from its
//     cache; the failover starts kv on another host with the backup's data;
//     a sampler of every engine every 100 ms never sees two kv containers
//     running, also after A's path is restored; host.fenced and
//     volume.stale_copy events appear.
//  2. Host B (kv's new host) lost whole (link down, agent killed, engine
//     stopped): kv runs on another host with the last backup's data within
//     after + 30 s, volume.failed_over names that host; B returns (engine
//     and agent) first cut from the server, then with its path back: its
//     exited kv container is never started (nor two kv ever running,
//     sampled), its Docker volume is still there, and a volume.stale_copy
//     event appears; the stale copy of the first failover is still as it
//     was.
//  3. kv's host cut from the server and its agent killed at once, kv
//     running: the data plane's lease stops kv; the agent restarted while
//     still cut starts none; kv fails over, never two running (sampled);
//     the copy left is kept as it was.
func TestFailover(t *testing.T) {
	begin := time.Now()
	c := newFailoverCluster(t)
	c.applyFailoverProject(t)
	a := c.kvHost(t, 60*time.Second)
	t.Logf("kv runs on %s (%v since the start)", a.name, time.Since(begin).Round(time.Millisecond))

	// stale is what each stale copy held when it went stale, by host: every
	// one must stay as it was.
	stale := map[*clAgent]map[string]string{}
	checkStale := func(t *testing.T) {
		t.Helper()
		for _, h := range c.foAgents() {
			if want, ok := stale[h]; ok {
				c.checkStaleVolume(t, h, want)
			}
		}
	}
	ok := t.Run("cut from the control plane: fenced, failed over, never twice", func(t *testing.T) {
		before := randomWord()
		if err := foPut(t, a, "before", []byte(before)); err != nil {
			t.Fatal(err)
		}
		c.foBackup(t)
		if err := foPut(t, a, "after", []byte("written after the backup")); err != nil {
			t.Fatal(err)
		}
		aHeld := map[string]string{"before": before, "after": "written after the backup"}
		sampler := c.sampleKV(t)

		cut := time.Now()
		if err := c.net.CutFromServer(a.host); err != nil {
			t.Fatal(err)
		}
		limit := foFenceAfter + 2*time.Second
		var fenced time.Duration
		dockertest.Eventually(t, limit+5*time.Second, 50*time.Millisecond, func() error {
			list, err := c.kvRunningOn(t.Context(), a)
			if err != nil {
				return err
			}
			if len(list) > 0 {
				return fmt.Errorf("kv still runs on %s (%s)", a.name, list[0].Status)
			}
			fenced = time.Since(cut)
			return nil
		})
		t.Logf("FIGURE fenced: %s stopped kv %v after its cut from the server (fence_after %v, bound %v)", a.name, fenced.Round(time.Millisecond), foFenceAfter, limit)
		if fenced > limit {
			t.Errorf("%s stopped kv %v after the cut, want within fence_after + 2 s = %v", a.name, fenced.Round(time.Millisecond), limit)
		}

		// A's agent is killed and started again while A is still cut: its
		// cache still has kv on A, and it must not start it.
		if err := a.proc.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-a.proc.done
		restarted := time.Now()
		c.runAgent(a, "--stale-cache-wait", foStaleCacheWait.String())
		c.staysWithoutKV(t, a, foStaleCacheWait+3*time.Second-time.Since(restarted), "A's agent restarted while cut from the server")
		t.Logf("%s's agent, killed and restarted while cut, started no kv for %v (its --stale-cache-wait %v)", a.name, time.Since(restarted).Round(time.Millisecond), foStaleCacheWait)

		b := c.waitFailedOver(t, a, "before", before, "after", time.Until(cut.Add(foAfter+30*time.Second)))
		t.Logf("FIGURE failover: kv serves the backup's data on %s %v after %s's cut (after %v)", b.name, time.Since(cut).Round(time.Millisecond), a.name, foAfter)
		ev := c.eventNaming(t, "volume.failed_over", b, cut, 10*time.Second, "host "+a.name, "on host "+b.name)
		t.Logf("volume.failed_over: %s", ev.Message)

		if err := c.net.RestoreServer(a.host); err != nil {
			t.Fatal(err)
		}
		restored := time.Now()
		c.waitHostUp(a, 30*time.Second)
		c.staysWithoutKV(t, a, 5*time.Second, "A's path to the server restored")
		if got := c.kvHost(t, 5*time.Second); got != b {
			t.Fatalf("kv moved to %s after A's path was restored, want it kept on %s", got.name, b.name)
		}
		sampler.check(t)
		t.Logf("host.fenced: %s", c.eventNaming(t, "host.fenced", a, cut, 20*time.Second).Message)
		t.Logf("volume.stale_copy: %s", c.eventNaming(t, "volume.stale_copy", a, cut, 20*time.Second, "host "+a.name).Message)
		stale[a] = aHeld
		checkStale(t)
		t.Logf("A back and checked in %v", time.Since(restored).Round(time.Millisecond))
	})
	if !ok {
		t.FailNow()
	}

	t.Run("host lost: restored elsewhere with the last backup, its copy never started", func(t *testing.T) {
		b := c.kvHost(t, 10*time.Second)
		before := randomWord()
		if err := foPut(t, b, "before2", []byte(before)); err != nil {
			t.Fatal(err)
		}
		c.foBackup(t)
		if err := foPut(t, b, "after2", []byte("written after the second backup")); err != nil {
			t.Fatal(err)
		}
		bHeld := map[string]string{"before2": before, "after2": "written after the second backup"}
		sampler := c.sampleKV(t)
		lost := time.Now()
		if err := b.host.Stop(); err != nil {
			t.Fatal(err)
		}
		t.Logf("host %s stopped in %v", b.name, time.Since(lost).Round(time.Millisecond))
		to := c.waitFailedOver(t, b, "before2", before, "after2", time.Until(lost.Add(foAfter+30*time.Second)))
		took := time.Since(lost)
		t.Logf("FIGURE failover: kv serves the backup's data on %s %v after %s was lost (after %v)", to.name, took.Round(time.Millisecond), b.name, foAfter)
		ev := c.eventNaming(t, "volume.failed_over", to, lost, 10*time.Second, "host "+b.name, "on host "+to.name)
		t.Logf("volume.failed_over: %s", ev.Message)

		// B comes back as a rebooted machine whose network reaches the
		// other hosts but not yet the server: its engine holds kv's exited
		// container and its agent's cache still places kv there; the agent
		// must not start it (nor restart it as crashed) before a server has
		// confirmed the host, well past its --stale-cache-wait.
		back := time.Now()
		if err := c.net.CutFromServer(b.host); err != nil {
			t.Fatal(err)
		}
		if err := b.host.Start(); err != nil {
			t.Fatal(err)
		}
		c.runAgent(b, "--stale-cache-wait", foStaleCacheWait.String())
		c.staysWithoutKV(t, b, foStaleCacheWait+3*time.Second, "B back, cut from the server")
		t.Logf("host %s back cut from the server: no kv started in %v", b.name, time.Since(back).Round(time.Millisecond))
		if err := c.net.RestoreServer(b.host); err != nil {
			t.Fatal(err)
		}
		c.waitHostUp(b, 30*time.Second)
		c.staysWithoutKV(t, b, 5*time.Second, "B back with its path to the server")
		if got := c.kvHost(t, 5*time.Second); got != to {
			t.Fatalf("kv moved to %s after B came back, want it kept on %s", got.name, to.name)
		}
		sampler.check(t)
		t.Logf("volume.stale_copy: %s", c.eventNaming(t, "volume.stale_copy", b, lost, 20*time.Second, "host "+b.name).Message)
		// B's copy, and A's from the first failover, are as they were: this
		// failover could not choose A, whose stale copy it would overwrite.
		if to == a {
			t.Fatalf("the failover restored kv onto %s, over its stale copy", a.name)
		}
		stale[b] = bHeld
		checkStale(t)

		// A's copy forgotten: it is deleted on A's engine, and A may take
		// the volume again (the next scenario's only other host).
		out := c.mustHatch(nil, "volume", "forget", foProjectName, "data", "--stale-copy", a.name)
		t.Logf("hatch volume forget --stale-copy: %s", strings.TrimSpace(out))
		delete(stale, a)
		dockertest.Eventually(t, 30*time.Second, 200*time.Millisecond, func() error {
			name := contract.VolumeName(a.hostID, "default", foProjectName, "data")
			if _, err := a.host.Docker().VolumeInspect(t.Context(), name); err == nil {
				return fmt.Errorf("%s's forgotten stale copy %s is still there", a.name, name)
			}
			return nil
		})
	})

	t.Run("agent killed while cut: the data plane stops kv, the restarted agent starts none", func(t *testing.T) {
		k := c.kvHost(t, 10*time.Second)
		before := randomWord()
		if err := foPut(t, k, "before3", []byte(before)); err != nil {
			t.Fatal(err)
		}
		c.foBackup(t)
		if err := foPut(t, k, "after3", []byte("written after the third backup")); err != nil {
			t.Fatal(err)
		}
		kHeld := map[string]string{"before3": before, "after3": "written after the third backup"}
		sampler := c.sampleKV(t)
		// Cut, and its agent killed at once, while kv runs: only the data
		// plane's lease (renewed after each answered report) can stop it,
		// at the last answered report + fence_after + the drain, checked
		// every 500 ms, then the stop timeout.
		cut := time.Now()
		if err := c.net.CutFromServer(k.host); err != nil {
			t.Fatal(err)
		}
		if err := k.proc.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-k.proc.done
		limit := foFenceAfter + 3*time.Second
		var stopped time.Duration
		dockertest.Eventually(t, limit+10*time.Second, 50*time.Millisecond, func() error {
			list, err := c.kvRunningOn(t.Context(), k)
			if err != nil {
				return err
			}
			if len(list) > 0 {
				return fmt.Errorf("kv still runs on %s (%s)", k.name, list[0].Status)
			}
			stopped = time.Since(cut)
			return nil
		})
		t.Logf("FIGURE fenced without its agent: %s's data plane stopped kv %v after the cut and the kill (bound %v)", k.name, stopped.Round(time.Millisecond), limit)
		if stopped > limit {
			t.Errorf("kv ran on %s for %v after its agent was killed and it was cut, want within fence_after + drain + stop + 1 s = %v", k.name, stopped.Round(time.Millisecond), limit)
		}
		restarted := time.Now()
		c.runAgent(k, "--stale-cache-wait", foStaleCacheWait.String())
		c.staysWithoutKV(t, k, foStaleCacheWait+3*time.Second-time.Since(restarted), "the agent restarted while cut from the server")
		to := c.waitFailedOver(t, k, "before3", before, "after3", time.Until(cut.Add(foAfter+30*time.Second)))
		t.Logf("FIGURE failover: kv serves the backup's data on %s %v after %s's cut and its agent's kill (after %v)", to.name, time.Since(cut).Round(time.Millisecond), k.name, foAfter)
		if err := c.net.RestoreServer(k.host); err != nil {
			t.Fatal(err)
		}
		c.waitHostUp(k, 30*time.Second)
		c.staysWithoutKV(t, k, 5*time.Second, "its path to the server restored")
		if got := c.kvHost(t, 5*time.Second); got != to {
			t.Fatalf("kv moved to %s after %s's path was restored, want it kept on %s", got.name, k.name, to.name)
		}
		sampler.check(t)
		t.Logf("volume.stale_copy: %s", c.eventNaming(t, "volume.stale_copy", k, cut, 20*time.Second, "host "+k.name, "to host "+to.name).Message)
		stale[k] = kHeld
		checkStale(t)
	})
	t.Logf("the failover scenarios took %v", time.Since(begin).Round(time.Millisecond))
}

// checkStaleVolume checks that the volume's old Docker volume is still on
// a's engine, that no running container mounts it, and that it holds the
// files of want as they were (read through a never-started container of
// an image the test builds on a's engine).
func (c *cluster) checkStaleVolume(tb testing.TB, a *clAgent, want map[string]string) {
	tb.Helper()
	ctx := tb.Context()
	cli := a.host.Docker()
	name := contract.VolumeName(a.hostID, "default", foProjectName, "data")
	if _, err := cli.VolumeInspect(ctx, name); err != nil {
		tb.Fatalf("%s's stale copy %s: %v, want it kept", a.name, name, err)
	}
	list, err := cli.ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(filters.Arg("volume", name), filters.Arg("status", "running"))})
	if err != nil {
		tb.Fatal(err)
	}
	if len(list) > 0 {
		tb.Fatalf("%s's stale copy %s is mounted by running container %v: a failover back onto %s restored into the stale copy's Docker volume (the same name on the same host) instead of leaving it untouched", a.name, name, list[0].Names, a.name)
	}
	image := "hatchtest/fo-reader:" + randomWord()[:8]
	if err := dockertest.BuildImage(ctx, cli, dockertest.ImageSpec{}, image, nil); err != nil {
		tb.Fatal(err)
	}
	created, err := cli.ContainerCreate(ctx, &container.Config{Image: image, Labels: c.scope.Labels(nil)},
		&container.HostConfig{Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: name, Target: "/v", ReadOnly: true}}}, nil, nil, c.scope.Name("stale-reader"))
	if err != nil {
		tb.Fatal(err)
	}
	defer cli.ContainerRemove(context.Background(), created.ID, container.RemoveOptions{Force: true})
	for file, content := range want {
		rc, _, err := cli.CopyFromContainer(ctx, created.ID, "/v/"+file)
		if err != nil {
			tb.Fatalf("%s's stale copy %s: %s: %v, want it kept as it was", a.name, name, file, err)
		}
		tr := tar.NewReader(rc)
		_, err = tr.Next()
		var b []byte
		if err == nil {
			b, err = io.ReadAll(tr)
		}
		rc.Close()
		if err != nil {
			tb.Fatal(err)
		}
		if string(b) != content {
			tb.Fatalf("%s's stale copy %s: %s holds %q, want %q as it was", a.name, name, file, b, content)
		}
	}
}
