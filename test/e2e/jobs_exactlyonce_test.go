//go:build docker

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
	"github.com/hatchery/hatchery/internal/testutil/pgtest"
)

// tookLoops is what a server logs when it takes the background loops
// (the scheduler among them).
const tookLoops = "took the background loops"

// TestJobsExactlyOnceAcrossATakeover: two `hatch server` processes on one
// PostgreSQL with a loops' lease of 1.5 s, an agent, and a schedule of
// every 5 s. About 20 s in, just before a tick, the server holding the
// loops (the scheduler) is killed with SIGKILL; the other takes them over.
// After about 45 s every 5 s tick since the first ran exactly once (the one
// across the takeover late, which is fine), none twice: one run record per
// tick, started, and one container per run on Docker, by its run label.
func TestJobsExactlyOnceAcrossATakeover(t *testing.T) {
	waitPostgres := startPostgres(t) // while the binary and the test image build
	c := &cluster{t: t, scope: dockertest.NewScope(t), dir: t.TempDir(), agents: map[string]*clAgent{}, convergeInterval: 2 * time.Second}
	var err error
	if c.bin, err = dockertest.Binary("./cmd/hatch"); err != nil {
		t.Fatal(err)
	}
	image := dockertest.Image(t, dockertest.ImageSpec{})
	servers, urls := c.startServersOnPostgres(t, waitPostgres(), []string{"a", "b"}, "--loops-lease", "1500ms")
	c.url = urls[0] // the agent joins with A's URL; it learns of B
	c.startAgent("a", "127.0.0.2", nil)
	c.url = strings.Join(urls, ",") // the CLI goes on through B once A is killed

	c.applyWithImage(t, image, `project: once
eggs:
  tick:
    image: IMAGE
    pull: missing
    env: {APP_JOB: "1"}
    schedule: {every: 5s}
`)
	applied := time.Now()

	holder, other := servers[0], servers[1]
	if !strings.Contains(holder.stderr()+holder.stdout(), tookLoops) {
		holder, other = other, holder
	}
	if !strings.Contains(holder.stderr()+holder.stdout(), tookLoops) {
		t.Fatalf("neither server says it %s", tookLoops)
	}
	// Killed half a second before the first 5 s mark 20 s after the apply:
	// the tick falls while nobody holds the loops.
	mark := applied.Add(20 * time.Second).Truncate(5 * time.Second).Add(5 * time.Second)
	time.Sleep(time.Until(mark.Add(-500 * time.Millisecond)))
	if err := holder.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-holder.done
	killed := time.Now()
	c.record(holder.stderr())
	if _, err := other.waitLineAfter(tookLoops, killed, 15*time.Second); err != nil {
		t.Fatalf("server %s did not take the loops over: %v", other.name, err)
	}
	t.Logf("%s killed at %s; %s took the loops over %v later", holder.name, killed.Format("15:04:05.000"), other.name,
		time.Since(killed).Round(time.Millisecond))

	end := applied.Add(45 * time.Second)
	time.Sleep(time.Until(end))
	// The ticks due by now less a moment (to be recorded and started).
	var runs []api.Run
	var first time.Time
	dockertest.Eventually(t, 15*time.Second, 500*time.Millisecond, func() error {
		runs = c.eggRuns("once")["tick"]
		if len(runs) == 0 {
			return fmt.Errorf("no runs of the schedule")
		}
		first = runs[0].ScheduledAt
		for tick := first; !tick.After(end.Add(-2 * time.Second)); tick = tick.Add(5 * time.Second) {
			for _, r := range runs {
				if r.ScheduledAt.Equal(tick) && !r.Ended() {
					return fmt.Errorf("the run of tick %s has not ended yet:%s", tick.Format(time.TimeOnly), describeRuns(runs))
				}
			}
		}
		return nil
	})
	starts := c.runStarts(t, "once")
	perTick := map[int64][]api.Run{} // by tick in ns: a map's time keys compare their locations too
	for _, r := range runs {
		perTick[r.ScheduledAt.UnixNano()] = append(perTick[r.ScheduledAt.UnixNano()], r)
	}
	n := 0
	for tick := first; !tick.After(end.Add(-2 * time.Second)); tick = tick.Add(5 * time.Second) {
		n++
		l := perTick[tick.UnixNano()]
		if len(l) != 1 {
			t.Errorf("tick %s: %d runs recorded, want 1:%s", tick.Format(time.TimeOnly), len(l), describeRuns(l))
			continue
		}
		r := l[0]
		if r.State == store.RunSkipped || r.State == store.RunMissed || r.StartedAt.IsZero() || len(starts[r.ID]) != 1 {
			t.Errorf("tick %s: run %s %s, %d containers on Docker: want it run once", tick.Format(time.TimeOnly), r.ID, r.State, len(starts[r.ID]))
		}
		t.Logf("tick %s (%s) started %v after its time", tick.Format("15:04:05"), r.Trigger, r.StartedAt.Sub(tick).Round(time.Millisecond))
	}
	if n < 8 || !first.Before(mark) || len(perTick[mark.UnixNano()]) == 0 {
		t.Errorf("%d ticks from %s, want at least 8 with the one at %s across the takeover:%s", n, first.Format(time.TimeOnly),
			mark.Format(time.TimeOnly), describeRuns(runs))
	}
	c.checkOneContainerPerRun(t, map[string][]api.Run{"tick": runs}, starts)
}

// TestJobsMissedTicks stops the only server across a tick of two
// schedules of every 10 s: one whose starting deadline (30 s) the server is
// back within runs the missed tick once, late (trigger missed); one whose
// deadline (2 s) is past by then records the tick missed, with its event,
// and runs nothing for it. Both run the next tick on time.
func TestJobsMissedTicks(t *testing.T) {
	c := newCluster(t, clusterOptions{agents: []string{"a"}})
	image := dockertest.Image(t, dockertest.ImageSpec{})
	c.applyWithImage(t, image, `project: missed
eggs:
  within:
    image: IMAGE
    pull: missing
    env: {APP_JOB: "1"}
    schedule: {every: 10s, starting_deadline: 30s}
  outside:
    image: IMAGE
    pull: missing
    env: {APP_JOB: "1"}
    schedule: {every: 10s, starting_deadline: 2s}
`)

	// Stopped a second after a tick both ran, back 5 s after the next.
	var down time.Time
	dockertest.Eventually(t, 25*time.Second, 200*time.Millisecond, func() error {
		runs := c.eggRuns("missed")
		for _, egg := range []string{"within", "outside"} {
			if len(runs[egg]) == 0 || runs[egg][len(runs[egg])-1].StartedAt.IsZero() {
				return fmt.Errorf("no run of %s started yet", egg)
			}
		}
		down = runs["within"][len(runs["within"])-1].ScheduledAt
		return nil
	})
	missedTick := down.Add(10 * time.Second)
	time.Sleep(time.Until(down.Add(time.Second)))
	c.killServer()
	time.Sleep(time.Until(missedTick.Add(5 * time.Second)))
	c.restartServer()
	back := time.Now()
	t.Logf("the server down from %s to %s, across the tick at %s", down.Add(time.Second).Format("15:04:05"),
		back.Format("15:04:05.000"), missedTick.Format("15:04:05"))

	next := missedTick.Add(10 * time.Second)
	var runs map[string][]api.Run
	dockertest.Eventually(t, 30*time.Second, 500*time.Millisecond, func() error {
		runs = c.eggRuns("missed")
		for _, egg := range []string{"within", "outside"} {
			if !slicesContainsTick(runs[egg], next, true) {
				return fmt.Errorf("%s: the tick after the outage, %s, has not run yet:%s", egg, next.Format(time.TimeOnly), describeRuns(runs[egg]))
			}
		}
		return nil
	})
	starts := c.runStarts(t, "missed")
	for _, egg := range []string{"within", "outside"} {
		for _, r := range runs[egg] {
			if r.ScheduledAt.Equal(next) && (r.Trigger != api.TriggerSchedule || r.StartedAt.Sub(next) > 2*time.Second) {
				t.Errorf("%s: the tick after the outage ran %v late with trigger %s, want on time", egg, r.StartedAt.Sub(next), r.Trigger)
			}
		}
	}
	var within, outside []api.Run
	for _, r := range runs["within"] {
		if r.ScheduledAt.Equal(missedTick) {
			within = append(within, r)
		}
	}
	for _, r := range runs["outside"] {
		if r.ScheduledAt.Equal(missedTick) {
			outside = append(outside, r)
		}
	}
	if len(within) != 1 || within[0].Trigger != api.TriggerMissed || within[0].StartedAt.IsZero() || len(starts[within[0].ID]) != 1 {
		t.Errorf("within its deadline the missed tick %s: want one run, trigger missed, started once:%s",
			missedTick.Format(time.TimeOnly), describeRuns(within))
	} else {
		t.Logf("within its deadline the tick %s ran %v late", missedTick.Format(time.TimeOnly), within[0].StartedAt.Sub(missedTick).Round(time.Millisecond))
	}
	if len(outside) != 1 || outside[0].State != store.RunMissed || !outside[0].StartedAt.IsZero() || len(starts[outside[0].ID]) != 0 {
		t.Errorf("outside its deadline the tick %s: want it recorded missed and not run:%s", missedTick.Format(time.TimeOnly), describeRuns(outside))
	}
	if msgs := c.eventMessages(string(store.EventRunMissed)); len(msgs) != 1 || !strings.Contains(msgs[0], "egg outside missed 1 ticks") {
		t.Errorf("run.missed events %q, want one of egg outside's tick", msgs)
	}
	if out := c.mustHatch(nil, "runs", "missed"); !strings.Contains(out, " missed ") {
		t.Errorf("hatch runs shows no missed run:\n%s", out)
	}
	c.checkOneContainerPerRun(t, runs, starts)
}

// slicesContainsTick reports whether runs hold a run of tick (started, if
// started is set).
func slicesContainsTick(runs []api.Run, tick time.Time, started bool) bool {
	for _, r := range runs {
		if r.ScheduledAt.Equal(tick) && (!started || !r.StartedAt.IsZero()) {
			return true
		}
	}
	return false
}

// startServersOnPostgres starts one `hatch server` per name on a database
// of its own in pg, each given a copy of what one `hatch server init`
// wrote, with args added; it sets the cluster's admin token and API client
// (every server's URL) and returns the servers and their URLs.
func (c *cluster) startServersOnPostgres(t *testing.T, pg *pgtest.Cluster, names []string, args ...string) ([]*clProc, []string) {
	t.Helper()
	db := pg.NewDatabase(t)
	c.keepSecret(pg.Password)
	shared := filepath.Join(c.dir, "shared")
	if out, err := c.hatchIn(c.dir, nil, "server", "init", shared); err != nil {
		t.Fatalf("hatch server init: %v\n%s", err, out)
	}
	token, err := os.ReadFile(filepath.Join(shared, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	c.token = strings.TrimSpace(string(token))
	c.keepSecret(tokenSecret(c.token))
	c.keepFileSecrets(filepath.Join(shared, "seal.key"), filepath.Join(shared, "tls", "ca-key.pem"),
		filepath.Join(shared, "tls", "host-ca-key.pem"))
	var servers []*clProc
	var urls []string
	for _, name := range names {
		data := filepath.Join(c.dir, "server-"+name)
		copyTree(t, shared, data)
		url := "https://127.0.0.1:" + clFreePort(t, "127.0.0.1")
		p := c.start("server-"+name, append([]string{"server", "--listen", strings.TrimPrefix(url, "https://"),
			"--data-dir", data, "--cli-config", "-", "--advertise-url", url}, args...), []string{"HATCH_STORE=" + pg.URL(db)})
		p.waitLine(t, "hatch server listening on", 30*time.Second)
		servers, urls = append(servers, p), append(urls, url)
	}
	t.Cleanup(func() {
		for _, p := range servers {
			c.record(p.stderr())
		}
		if leaks := c.secretsFound(); len(leaks) > 0 {
			t.Errorf("secrets in logs, outputs or API answers:\n%s", strings.Join(leaks, "\n"))
		}
	})
	c.server = servers[len(servers)-1]
	c.api, err = client.New(client.Config{Server: strings.Join(urls, ","), Token: c.token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.api.Close)
	return servers, urls
}
