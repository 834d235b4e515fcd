//go:build docker

package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// The demo under load on the namespace cluster: clients asking web's page
// through hosts' ingresses while web rolls, kv rolls and a host is lost.
// Every answer is kept with the moment it was asked and the moment it came,
// so that a test can say when each failure happened, not only how many.

const (
	// demoLoadPause is each client's pause between two requests: 16 clients
	// ask up to ~800 pages a second, each page one visit counted by kv
	// (a write it syncs to its volume), which leaves the 2 cores to the
	// three engines and agents.
	demoLoadPause = 20 * time.Millisecond
	// hostLossServingBound and hostLossHealthyBound are the bounds
	// on a host's loss: every request through the other hosts' ingresses
	// succeeds again within the first, web's replicas are healthy on the
	// other hosts within the second.
	hostLossServingBound = 5 * time.Second
	hostLossHealthyBound = 15 * time.Second
)

// demoProjectWithWeb is the demo with web at replicas replicas.
func demoProjectWithWeb(t testing.TB, replicas int) string {
	t.Helper()
	dir := demoProject(t, "")
	file := filepath.Join(dir, "hatch.yaml")
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(strings.Replace(string(raw), "replicas: 3", fmt.Sprintf("replicas: %d", replicas), 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// startNetDemo starts a cluster of 3 hosts running the demo with web at 6
// replicas (spread over the 3 hosts) and kv on one host, and returns the project
// file and kv's container.
func startNetDemo(t testing.TB) (*cluster, string, container.Summary) {
	t.Helper()
	c := newCluster(t, clusterOptions{hosts: 3})
	file := demoProjectWithWeb(t, 6)
	applied := time.Now()
	c.mustHatch(nil, "apply", "-f", file, "--yes")
	t.Logf("demo applied over 3 hosts in %v", time.Since(applied).Round(time.Millisecond))
	kv := c.demoContainers("kv")
	if len(kv) != 1 {
		t.Fatalf("%d kv containers on the three engines, want 1", len(kv))
	}
	// Placement weighs each host's free room, as its agent reports it: on
	// one machine's three engines that is about even, but not exactly.
	var spread []string
	total := 0
	for _, name := range []string{"h1", "h2", "h3"} {
		n := len(c.demoContainersOn(c.agents[name], "web"))
		if n == 0 {
			t.Fatalf("no web replica on %s's engine: web is not spread over the 3 hosts", name)
		}
		total += n
		spread = append(spread, fmt.Sprintf("%s %d", name, n))
	}
	if total != 6 {
		t.Fatalf("%d web replicas on the engines (%s), want 6", total, strings.Join(spread, ", "))
	}
	t.Logf("web's replicas: %s; kv on %s", strings.Join(spread, ", "), c.agentOf(kv[0].Labels).name)
	return c, file, kv[0]
}

// hostWithoutKv picks the host to lose among all (the last not holding
// kv), and the others.
func hostWithoutKv(all []*clAgent, kvHost *clAgent) (lost *clAgent, others []*clAgent) {
	for i := len(all) - 1; i >= 0; i-- {
		if lost == nil && all[i] != kvHost {
			lost = all[i]
		}
	}
	for _, a := range all {
		if a != lost {
			others = append(others, a)
		}
	}
	return lost, others
}

// pageAsk is one request of a demoLoad.
type pageAsk struct {
	via        string // the host whose ingress was asked
	start, end time.Time
	page       webPage
	// err is a failed request: no answer, or not a 2xx.
	err error
	// uncounted is a 2xx page without kv's count: web did not reach kv.
	uncounted bool
}

// demoLoad is web's page asked through hosts' ingresses by clients each on
// its own keep-alive connection, one request after the other, until finish
// (or loadLimit, or loadMaxPerRun requests each).
type demoLoad struct {
	stop chan struct{}
	wg   sync.WaitGroup

	mu   sync.Mutex // guards asks
	asks []pageAsk
}

// startDemoLoad starts perHost clients on each of via's ingresses.
func startDemoLoad(via []*clAgent, perHost int) *demoLoad {
	l := &demoLoad{stop: make(chan struct{})}
	for _, a := range via {
		for range perHost {
			l.wg.Go(func() { l.client(a) })
		}
	}
	return l
}

func (l *demoLoad) client(a *clAgent) {
	client := newLoadClient()
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(loadLimit)
	for range loadMaxPerRun {
		select {
		case <-l.stop:
			return
		default:
		}
		if time.Now().After(deadline) {
			return
		}
		ask := pageAsk{via: a.name, start: time.Now()}
		body, err := send(client, http.MethodGet, a.IngressURL()+"/", "demo.localhost", "")
		ask.end = time.Now()
		if err != nil {
			ask.err = err
		} else if ask.page, err = parsePage(body); err != nil {
			ask.uncounted = true
		}
		l.mu.Lock()
		l.asks = append(l.asks, ask)
		l.mu.Unlock()
		time.Sleep(demoLoadPause)
	}
}

// finish stops the clients and returns every request they made.
func (l *demoLoad) finish() []pageAsk {
	close(l.stop)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.asks
}

// failedAsks are the asks that failed (err) or, with uncounted, that
// failed or came without kv's count.
func failedAsks(asks []pageAsk, uncounted bool) []pageAsk {
	var out []pageAsk
	for _, a := range asks {
		if a.err != nil || (uncounted && a.uncounted) {
			out = append(out, a)
		}
	}
	return out
}

// describeAsks says how many asks went through each host and names the
// first few failures.
func describeAsks(asks []pageAsk) string {
	perHost := map[string]int{}
	for _, a := range asks {
		perHost[a.via]++
	}
	var b strings.Builder
	for _, h := range slices.Sorted(maps.Keys(perHost)) {
		fmt.Fprintf(&b, "%s %d, ", h, perHost[h])
	}
	bad := failedAsks(asks, true)
	fmt.Fprintf(&b, "%d failed or without kv's count", len(bad))
	for _, a := range bad[:min(len(bad), 5)] {
		what := "no count"
		if a.err != nil {
			what = a.err.Error()
		}
		fmt.Fprintf(&b, "\n  via %s at %s (%v): %s", a.via, a.start.Format("15:04:05.000"), a.end.Sub(a.start).Round(time.Millisecond), what)
	}
	return b.String()
}

// failureReport groups the asks that failed or lacked kv's count by the
// ingress and the replica that answered, with when each group began and
// ended, then gives every agent's log lines of that span at level info and
// above that are not about a converge's routine (what a failed test needs).
func (c *cluster) failureReport(asks []pageAsk) string {
	bad := failedAsks(asks, true)
	if len(bad) == 0 {
		return ""
	}
	type group struct {
		n           int
		first, last time.Time
	}
	groups := map[string]*group{}
	from, to := bad[0].start, bad[0].end
	for _, a := range bad {
		key := a.via + " replica " + a.page.replica
		if a.err != nil {
			key = a.via + " failed"
		}
		g := groups[key]
		if g == nil {
			g = &group{first: a.start}
			groups[key] = g
		}
		g.n++
		g.first, g.last = minTime(g.first, a.start), maxTime(g.last, a.end)
		from, to = minTime(from, a.start), maxTime(to, a.end)
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(groups)) {
		g := groups[k]
		fmt.Fprintf(&b, "via %s: %d from %s to %s\n", k, g.n, g.first.Format("15:04:05.000"), g.last.Format("15:04:05.000"))
	}
	from, to = from.Add(-3*time.Second), to.Add(time.Second)
	for _, name := range slices.Sorted(maps.Keys(c.agents)) {
		p := c.agents[name].proc
		p.mu.Lock()
		for _, l := range p.lines {
			if l.at.After(from) && l.at.Before(to) && !strings.Contains(l.text, `"level":"debug"`) && !strings.Contains(l.text, `"converge step"`) {
				fmt.Fprintf(&b, "%s %s %.400s\n", name, l.at.Format("15:04:05.000"), l.text)
			}
		}
		p.mu.Unlock()
	}
	return b.String()
}

// checkEveryWebReplicaCounts asks each host's ingress for web's page until
// every web replica on that host's engine has answered with kv's count (an
// ingress picks its own host's replicas first, so those are the ones it
// serves): each replica reaches kv wherever it runs, through its host's
// relay, and the mesh when kv is elsewhere. Pages must say version.
func (c *cluster) checkEveryWebReplicaCounts(agents []*clAgent, version string) {
	c.t.Helper()
	client := newLoadClient()
	defer client.CloseIdleConnections()
	for _, a := range agents {
		want := map[string]bool{}
		for _, s := range c.demoContainersOn(a, "web") {
			want[s.ID[:12]] = true // web's replica is its host name, Docker's short ID
		}
		seen := map[string]bool{}
		var last string
		for i := 0; i < 100 && len(seen) < len(want); i++ {
			body, err := send(client, http.MethodGet, a.IngressURL()+"/", "demo.localhost", "")
			if err != nil {
				c.t.Fatalf("web's page via %s: %v", a.name, err)
			}
			p, err := parsePage(body)
			if err != nil {
				last = err.Error()
				time.Sleep(100 * time.Millisecond)
				continue
			}
			if p.version != version {
				c.t.Fatalf("web's page via %s says version %q, want %q", a.name, p.version, version)
			}
			if want[p.replica] {
				seen[p.replica] = true
			}
		}
		if len(seen) < len(want) {
			c.t.Fatalf("via %s, of web's replicas there %v only %v answered with kv's count in 100 pages (last miss: %s)",
				a.name, slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(seen)), last)
		}
	}
}

// kvWindow is kv's own stop-start window in a roll of kv (stop-first):
// from its agent's "stopping the container it replaces" line (less
// logSlack, for the test's reading of the line) to the control plane's
// "rollout done" event of kv on its host (the first report of the new kv
// healthy, sent after the converge that routes to it).
type kvWindow struct{ start, end time.Time }

// logSlack is how much earlier than the test read it a log line may have
// been written: the agent's line is read through a pipe by a goroutine of
// a test on a loaded machine.
const logSlack = 250 * time.Millisecond

func (w kvWindow) overlaps(a pageAsk) bool { return !a.end.Before(w.start) && !a.start.After(w.end) }

// rollKv changes kv's environment in the project file (so only kv rolls:
// nothing of it that web references changes), applies it with env (the
// environment the file's last apply had, so that nothing else changes),
// and returns kv's stop-start window, read on kvHost's agent and the
// control plane's events.
func (c *cluster) rollKv(file string, env []string, kvHost *clAgent) kvWindow {
	c.t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		c.t.Fatal(err)
	}
	changed := strings.Replace(string(raw), "DATA_DIR: /data", "DATA_DIR: /data\n      ROLLED: \"yes\"", 1)
	if changed == string(raw) {
		c.t.Fatal("the demo's kv has no DATA_DIR to put a change beside")
	}
	if err := os.WriteFile(file, []byte(changed), 0o644); err != nil {
		c.t.Fatal(err)
	}
	seq, err := c.api.Events().LastSeq(c.t.Context())
	if err != nil {
		c.t.Fatal(err)
	}
	applied := time.Now()
	out := c.mustHatch(env, "apply", "-f", file, "--yes")
	c.t.Logf("the apply of kv's change took %v:\n%s", time.Since(applied).Round(time.Millisecond), out)
	line, err := kvHost.proc.waitLineAfter("stopping the container it replaces", applied, 0)
	if err != nil || !strings.Contains(line.text, `"workload":"default/demo/kv"`) {
		c.t.Fatalf("kv's agent (%s) logged no stop of the old kv during the apply (%v): %q", kvHost.name, err, line.text)
	}
	events, err := c.api.Events().List(c.t.Context(), seq)
	if err != nil {
		c.t.Fatal(err)
	}
	for _, e := range events {
		if e.Type == string(store.EventRolloutDone) && e.Resource == resource.Key(resource.Egg, "kv") && (e.Host == kvHost.hostID || e.Host == kvHost.name) {
			return kvWindow{start: line.at.Add(-logSlack), end: e.Time}
		}
	}
	c.t.Fatalf("no rollout.done event of kv on %s among the apply's events: %+v", kvHost.name, events)
	return kvWindow{}
}

// hostLoss is what the loss of a host did to a load through the other
// hosts' ingresses.
type hostLoss struct {
	// servingAgain is from the host's stop to the end of the last request
	// through the others' ingresses that failed or came without kv's count
	// (0: none did).
	servingAgain time.Duration
	// healthyElsewhere is from the host's stop to web's replicas all ready
	// on the other hosts (up), in the control plane's view (the agents'
	// probes, as reported).
	healthyElsewhere time.Duration
	asks             []pageAsk
}

// loseDemoHostUnderLoad runs 8 clients on each of others' ingresses, stops
// lost (link down, agent killed, engine stopped) and measures until web's
// webReplicas replicas are ready on the others, then 2 s more of load.
func (c *cluster) loseDemoHostUnderLoad(lost *clAgent, others []*clAgent, webReplicas int) hostLoss {
	c.t.Helper()
	load := startDemoLoad(others, loadClients)
	time.Sleep(2 * time.Second) // the load steady before the loss
	stopped := time.Now()
	if err := lost.host.Stop(); err != nil {
		load.finish()
		c.t.Fatal(err)
	}
	c.t.Logf("host %s stopped in %v", lost.name, time.Since(stopped).Round(time.Millisecond))
	var res hostLoss
	dockertest.Eventually(c.t, 2*time.Minute, 100*time.Millisecond, func() error {
		ready, err := c.webReadyOn(others)
		if err != nil {
			return err
		}
		if ready < webReplicas {
			return fmt.Errorf("%d of web's %d replicas ready on the hosts left", ready, webReplicas)
		}
		return nil
	})
	res.healthyElsewhere = time.Since(stopped)
	time.Sleep(2 * time.Second)
	res.asks = load.finish()
	for _, a := range failedAsks(res.asks, true) {
		if a.end.After(stopped) {
			res.servingAgain = max(res.servingAgain, a.end.Sub(stopped))
		}
	}
	return res
}

// webReadyOn is web's replicas ready on agents, in the control plane's
// view, counted only when the egg's replicas are placed on those hosts
// alone (a lost host's count stays in the status until it is found down).
func (c *cluster) webReadyOn(agents []*clAgent) (int, error) {
	ctx, cancel := context.WithTimeout(c.t.Context(), 5*time.Second)
	defer cancel()
	st, ok, err := c.api.Projects().Status(ctx, "default", "demo")
	if err != nil || !ok {
		return 0, fmt.Errorf("demo's status: found %v, %v", ok, err)
	}
	names := map[string]bool{}
	for _, a := range agents {
		names[a.name] = true
	}
	for _, e := range st.Eggs {
		if e.Name != "web" {
			continue
		}
		ready := 0
		for _, h := range e.Hosts {
			if !names[h.Name] && h.Desired > 0 {
				return 0, fmt.Errorf("web still has %d replicas desired on %s", h.Desired, h.Name)
			}
			if h.State == "up" {
				ready += h.Ready
			}
		}
		return ready, nil
	}
	return 0, fmt.Errorf("demo's status has no egg web")
}

// checkNothingLeftBehind checks, now and over several of the agents'
// converges (2 s apart), that the engines of agents hold exactly web's
// replicas and kv's one, running and each on its own host's engine (no old
// container beside its replacement, none stopped left over), and at most
// one relay of each egg and network on each engine.
func (c *cluster) checkNothingLeftBehind(agents []*clAgent, webReplicas int) {
	c.t.Helper()
	count := func() error {
		perEgg := map[string]int{}
		for _, a := range agents {
			relays := map[string]int{}
			for _, s := range c.projectContainersOnEngine(a, "demo", true) {
				egg := s.Labels[containers.LabelEgg]
				if strings.Contains(egg, ".relay-") {
					if relays[egg]++; relays[egg] > 1 {
						return fmt.Errorf("%d containers of relay %s on %s's engine", relays[egg], egg, a.name)
					}
					continue
				}
				if s.State != "running" || s.Labels[containers.LabelHost] != a.hostID {
					return fmt.Errorf("%s's engine holds %s container %s %s, of host %s", a.name, egg, s.ID[:12], s.State, s.Labels[containers.LabelHost])
				}
				perEgg[egg]++
			}
		}
		if want := map[string]int{"web": webReplicas, "kv": 1}; !maps.Equal(perEgg, want) {
			return fmt.Errorf("the engines hold %v containers of the demo's eggs, want %v", perEgg, want)
		}
		return nil
	}
	dockertest.Eventually(c.t, time.Minute, 250*time.Millisecond, count)
	for range 12 {
		if err := count(); err != nil {
			c.t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
