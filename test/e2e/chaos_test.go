//go:build docker

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// Chaos: the agent is killed (SIGKILL) at moments drawn across rolls of a
// stateless egg and of a stateful one at once, restarted, and must end with
// exactly the desired containers at the new spec (no orphan, no duplicate),
// the stateful egg's volume intact, and nothing older answering. Each trial
// logs the phase its kill hit; the kills are stratified over three phases:
// building (the start asked for, no new container yet), booting (a new
// container not healthy yet) and draining (a new container healthy beside the
// old one, which takes a while to stop: it ignores its stop signal). Each
// trial aims at the phase hit least so far, at a random moment once the roll
// is in it; a kill that finds the roll already past its phase counts for the
// phase it hit, and the missed phase is aimed at again, past the trials asked
// for if need be. So the run fails only if a phase cannot be caught at all.
//
// CI runs chaosTrials (5) trials; `make test-long` sets HATCH_CHAOS_TRIALS.
func TestChaosKill9AtRandomMomentsOfRolls(t *testing.T) {
	trials := chaosTrials(t, 5)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))

	e := newEnv(t, envOptions{})
	e.startJoined()
	web := withEnv(withEnv(e.workload("web", 2, "v1"), "APP_BOOT_DELAY", "800ms"), "APP_IGNORE_STOP", "1")
	web.StopTimeout = 1500 * time.Millisecond
	db := withEnv(e.workload("db", 1, "v1"), "APP_COUNT_FILE", "/data/count")
	db.Volumes = []contract.VolumeMount{{Name: "data", DockerName: dockerVolume(e, "data"), Target: "/data"}}
	e.set(web, db)
	e.waitServing(web, "v1", time.Minute)
	e.waitServing(db, "v1", time.Minute)

	targets := []string{"building", "booting", "draining"}
	hit := map[string]int{}
	for i := 0; ; i++ {
		target := leastHit(targets, hit)
		if i >= trials && hit[target] > 0 {
			break // every phase hit, and the trials asked for run
		}
		if i >= 2*trials {
			t.Fatalf("no kill hit phase %s in %d trials (hit %v)", target, i, hit)
		}
		count := i + 1
		e.hitDB(db, "v"+strconv.Itoa(i+1), count)
		version := "v" + strconv.Itoa(i+2)
		web, db = withEnv(web, "APP_VERSION", version), withEnv(db, "APP_VERSION", version)
		began := time.Now()
		e.set(web, db)
		phase := e.waitPhase(web, target)
		time.Sleep(time.Duration(rng.IntN(50)) * time.Millisecond)
		e.agent.signal(syscall.SIGKILL)
		hit[phase]++
		t.Logf("trial %d: kill -9 aimed at %s, hit %s", i+1, target, phase)
		time.Sleep(time.Duration(200+rng.IntN(600)) * time.Millisecond)
		e.agent.start()

		restarted := time.Now()
		e.waitServing(web, version, 2*time.Minute)
		e.waitServing(db, version, 2*time.Minute)
		t.Logf("trial %d: roll to kill %s, restart to done %s", i+1, restarted.Sub(began).Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond))
		time.Sleep(time.Second) // nothing more may come or go
		all, err := e.containers(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != web.Replicas+db.Replicas {
			t.Fatalf("trial %d: %d containers after the roll, want %d (an orphan or a duplicate): %+v", i+1, len(all), web.Replicas+db.Replicas, all)
		}
		for _, w := range []contract.WorkloadSpec{web, db} {
			if _, err := e.serving(t.Context(), w, version); err != nil { // every one answers the new version only
				t.Fatalf("trial %d: %s: %v", i+1, w.Egg, err)
			}
		}
		if n := e.dbCount(db); n != strconv.Itoa(count) {
			t.Fatalf("trial %d: the volume's count is %q after the roll, want %d", i+1, n, count)
		}
	}
	t.Logf("phases hit: %v", hit)
}

// leastHit is the phase of phases hit the fewest times, the earliest in the
// roll of those.
func leastHit(phases []string, hit map[string]int) string {
	least := phases[0]
	for _, p := range phases[1:] {
		if hit[p] < hit[least] {
			least = p
		}
	}
	return least
}

// chaosTrials is HATCH_CHAOS_TRIALS, or def.
func chaosTrials(t *testing.T, def int) int {
	v := os.Getenv("HATCH_CHAOS_TRIALS")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 3 {
		t.Fatalf("HATCH_CHAOS_TRIALS=%q: want a number of trials, 3 or more", v)
	}
	return n
}

// rollPhase says where the roll of w to its spec stands, from Docker's view:
// draining (a slot whose new container is healthy still holds an older
// one), booting (a new container not healthy yet), building (no container
// of the spec yet), done.
func (e *env) rollPhase(ctx context.Context, w contract.WorkloadSpec) (string, error) {
	cs, err := e.containers(ctx, &w)
	if err != nil {
		return "", err
	}
	hash := contract.SpecHash(w)
	fresh, booting := 0, 0
	ready, old := map[int]bool{}, map[int]bool{}
	for _, c := range cs {
		switch {
		case c.SpecHash != hash:
			old[c.Slot] = old[c.Slot] || c.running()
		case !healthy(ctx, c):
			fresh++
			booting++
		default:
			fresh++
			ready[c.Slot] = true
		}
	}
	for slot := range ready {
		if old[slot] {
			return "draining", nil
		}
	}
	switch {
	case booting > 0:
		return "booting", nil
	case fresh == 0:
		return "building", nil
	case len(old) > 0:
		return "building", nil // a slot's start asked for, its old one serving
	default:
		return "done", nil
	}
}

// waitPhase waits until the roll of w is in phase target and returns it,
// or returns the phase it went to instead (a phase can be shorter than a
// look at Docker).
func (e *env) waitPhase(w contract.WorkloadSpec, target string) string {
	e.t.Helper()
	order := map[string]int{"building": 0, "booting": 1, "draining": 2, "done": 3}
	deadline := time.Now().Add(time.Minute)
	for {
		p, err := e.rollPhase(context.Background(), w)
		switch {
		case err != nil:
		case p == target:
			return p
		case order[p] > order[target] && p != "building":
			return p
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the roll never reached %s (last %s, %v)", target, p, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// hitDB counts one more visit on the stateful egg, which must answer want.
func (e *env) hitDB(db contract.WorkloadSpec, version string, want int) {
	e.t.Helper()
	c := e.waitServing(db, version, time.Minute)[0]
	code, body, err := dockertest.Do(e.t.Context(), "POST", "http://"+c.IP+":8080/hit", nil)
	if err != nil || code != 200 || strings.TrimSpace(body) != fmt.Sprint(want) {
		e.t.Fatalf("hit: %d %q %v, want %d", code, body, err, want)
	}
}

// dbCount reads the stateful egg's count.
func (e *env) dbCount(db contract.WorkloadSpec) string {
	e.t.Helper()
	cs, err := e.containers(e.t.Context(), &db)
	if err != nil || len(cs) != 1 {
		e.t.Fatalf("db containers %+v: %v", cs, err)
	}
	_, n, err := get(e.t.Context(), cs[0].IP, "/count")
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// Chaos: the agent's data dir on a 1 MiB tmpfs, filled while a roll lands.
// The roll goes on, the cache cannot be written and every report says so;
// an agent killed then and restarted rolls nothing back (it holds what is
// newer than its cache until the control plane answers, which sends the new
// state); once space is freed the cache is written with the new state.
func TestChaosAFullDataDirRollsNothingBackAtRestart(t *testing.T) {
	e := newEnv(t, envOptions{})
	mountSmallDataDir(t, e)
	began := time.Now()
	step := func(what string) { t.Logf("%s: %s", what, time.Since(began).Round(time.Millisecond)) }
	e.startJoined()
	web := e.workload("web", 2, "v1")
	db := withEnv(e.workload("db", 1, "v1"), "APP_COUNT_FILE", "/data/count")
	db.Volumes = []contract.VolumeMount{{Name: "data", DockerName: dockerVolume(e, "data"), Target: "/data"}}
	e.set(web, db)
	e.waitServing(web, "v1", time.Minute)
	e.hitDB(db, "v1", 1)

	step("v1 serving")
	filler := filepath.Join(e.agent.dataDir, "filler")
	fill(t, filler)
	web, db = withEnv(web, "APP_VERSION", "v2"), withEnv(db, "APP_VERSION", "v2")
	v2 := e.set(web, db)
	before := append(e.waitServing(web, "v2", time.Minute), e.waitServing(db, "v2", time.Minute)...)
	dockertest.Eventually(t, 20*time.Second, 100*time.Millisecond, func() error {
		r, _ := e.cp.lastReport(e.hostID)
		if !slices.ContainsFunc(r.Errors, func(s string) bool {
			return strings.Contains(s, "desired-state cache") && strings.Contains(s, "retrying")
		}) {
			return fmt.Errorf("report errors %q", r.Errors)
		}
		return nil
	})
	if v := cachedVersion(t, e.agent.dataDir); v == v2.Version {
		t.Fatal("the cache holds v2 on a full disk: the test shows nothing")
	}

	step("v2 rolled on a full disk, the failed write reported")
	e.agent.signal(syscall.SIGKILL)
	e.agent.start()
	time.Sleep(3 * time.Second) // converges from the stale cache, then from the control plane
	after := append(e.waitServing(web, "v2", time.Minute), e.waitServing(db, "v2", time.Minute)...)
	for i := range before {
		if after[i].ID != before[i].ID || after[i].StartedAt != before[i].StartedAt {
			t.Errorf("%s slot %d was touched at the restart: %s started %s, was %s started %s", []string{"web", "web", "db"}[i],
				after[i].Slot, after[i].ID[:12], after[i].StartedAt, before[i].ID[:12], before[i].StartedAt)
		}
	}
	if n := e.dbCount(db); n != "1" {
		t.Errorf("the volume's count is %q, want 1", n)
	}

	step("restarted, nothing touched")
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	dockertest.Eventually(t, 20*time.Second, 100*time.Millisecond, func() error {
		if v := cachedVersion(t, e.agent.dataDir); v != v2.Version {
			return fmt.Errorf("cache holds %q, want %q", v, v2.Version)
		}
		if r, _ := e.cp.lastReport(e.hostID); len(r.Errors) != 0 {
			return fmt.Errorf("report errors %q", r.Errors)
		}
		return nil
	})
	step("cached once space was freed")
}

// Chaos, issue 26: as above, but the control plane is gone when the agent
// restarts, and --stale-cache-wait is 1 ms (any wait ends some time). The
// cache holds v1, the containers were made for v2: no container of v1 is
// ever created, the v2 replicas keep running, untouched, through converges
// well past the wait, and the agent logs why it holds.
func TestChaosAFullDataDirRollsNothingBackWithTheServerDown(t *testing.T) {
	e := newEnv(t, envOptions{convergeInterval: 500 * time.Millisecond})
	mountSmallDataDir(t, e)
	e.startJoined()
	web := e.workload("web", 3, "v1")
	v1 := e.set(web)
	e.waitServing(web, "v1", time.Minute)
	fill(t, filepath.Join(e.agent.dataDir, "filler"))
	web2 := withEnv(web, "APP_VERSION", "v2")
	v2 := e.set(web2)
	before := e.waitServing(web2, "v2", time.Minute)
	if v := cachedVersion(t, e.agent.dataDir); v != v1.Version {
		t.Fatalf("the cache holds %q, want v1's %q: the test shows nothing", v, v1.Version)
	}

	e.cp.stop()
	e.agent.signal(syscall.SIGKILL)
	e.agent.args = append(e.agent.args, "--stale-cache-wait", "1ms") // 0 is the default's 10 s
	converges := func() int {
		return e.agent.logCount("converged") + e.agent.logCount("converged: nothing to do") + e.agent.logCount("converged with errors")
	}
	base := converges()
	v1Hash := contract.SpecHash(web)
	s := startSampler(100*time.Millisecond, func(ctx context.Context) []string {
		cs, err := e.containers(ctx, &web)
		if err != nil {
			return []string{err.Error()}
		}
		var bad []string
		for _, c := range cs {
			if c.SpecHash == v1Hash {
				bad = append(bad, fmt.Sprintf("a v1 container %s in slot %d: %s", c.ID[:12], c.Slot, c.Status))
			}
		}
		return bad
	})
	e.agent.start()
	// Twenty converges from the cache (10 s at the 500 ms timer), all past
	// the wait.
	dockertest.Eventually(t, time.Minute, 100*time.Millisecond, func() error {
		if n := converges() - base; n < 20 {
			return fmt.Errorf("%d converges since the restart", n)
		}
		return nil
	})
	samples, problems := s.finish()
	for _, p := range problems {
		t.Error(p)
	}
	after := e.waitServing(web2, "v2", 10*time.Second)
	for i := range before {
		if after[i].ID != before[i].ID || after[i].StartedAt != before[i].StartedAt {
			t.Errorf("slot %d was replaced at the restart: %s, was %s", i, after[i].ID[:12], before[i].ID[:12])
		}
	}
	if n := e.agent.logCount("the cached desired state is older than the containers running: holding every change until the control plane answers",
		v2.Version); n != 1 {
		t.Errorf("the agent logged the hold %d times, want once", n)
	}
	t.Logf("%d samples, the v2 replicas untouched", samples)
}

// fill writes path until the file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 4096)
	for {
		if _, err := f.Write(block); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatal(err)
		}
	}
}

// cachedVersion reads the version of the agent's desired-state cache ("" if
// none).
func cachedVersion(t *testing.T, dataDir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dataDir, "desired-state.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		State struct {
			Version string `json:"version"`
		} `json:"state"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	return c.State.Version
}

// Chaos: under load, one replica paused (docker pause) and one frozen by
// SIGSTOP (Docker still says running). No GET waits past the route's
// upstream timeout (the first that times out ejects its replica and goes to
// another) and none fails; both frozen replicas are restarted, through a
// drain, once their checks have failed.
func TestChaosFrozenReplicasLeaveThePoolAndAreRestarted(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.startJoined()
	const timeout = time.Second
	w := e.routedWorkload(3, "v1", freePort(t))
	w.Routes[0].UpstreamTimeout = timeout
	target := ingressTarget{http: e.ingressAddr(), tcp: e.publishedAddr(w)}
	e.set(w)
	before := e.waitServing(w, "v1", time.Minute)
	e.waitIngressServes(target, before)

	ctx, stop := context.WithCancel(t.Context())
	type result struct {
		n, failed int
		slowest   time.Duration
		firstErr  error
	}
	results := make(chan result, loadClients)
	for range loadClients {
		go func() {
			c := newLoadClient()
			defer c.CloseIdleConnections()
			var r result
			for ctx.Err() == nil && r.n < loadMaxPerRun {
				began := time.Now()
				_, err := getThroughIngress(c, target.http, "/version")
				r.n++
				r.slowest = max(r.slowest, time.Since(began))
				if err != nil && ctx.Err() == nil {
					r.failed++
					if r.firstErr == nil {
						r.firstErr = err
					}
				}
				time.Sleep(loadPause)
			}
			results <- r
		}()
	}
	time.Sleep(time.Second) // steady load first
	if err := e.scope.Client.ContainerPause(t.Context(), before[1].ID); err != nil {
		t.Fatal(err)
	}
	if err := e.scope.Client.ContainerKill(t.Context(), before[2].ID, "SIGSTOP"); err != nil {
		t.Fatal(err)
	}
	var after []observed
	dockertest.Eventually(t, time.Minute, 100*time.Millisecond, func() error {
		var err error
		if after, err = e.serving(t.Context(), w, "v1"); err != nil {
			return err
		}
		for _, i := range []int{1, 2} {
			if after[i].StartedAt == before[i].StartedAt {
				return fmt.Errorf("slot %d has not been restarted yet", i)
			}
		}
		return nil
	})
	stop()
	var total result
	for range loadClients {
		r := <-results
		total.n += r.n
		total.failed += r.failed
		total.slowest = max(total.slowest, r.slowest)
		if total.firstErr == nil {
			total.firstErr = r.firstErr
		}
	}
	t.Logf("%d GETs, %d failed, the slowest %s", total.n, total.failed, total.slowest.Round(time.Millisecond))
	if total.failed > 0 {
		t.Errorf("%d of %d GETs failed (first: %v)", total.failed, total.n, total.firstErr)
	}
	// The timeout, the retry on another replica, and a loaded machine's slack.
	if total.slowest > timeout+2*time.Second {
		t.Errorf("a GET took %s, past the %s upstream timeout", total.slowest, timeout)
	}
	if !slices.Equal(ids(after), ids(before)) {
		t.Errorf("containers %v, want the same %v restarted in place", ids(after), ids(before))
	}
	if n := e.agent.logCount("converge step", `"action":"restart"`, `"reason":"unhealthy"`); n < 2 {
		t.Errorf("%d restarts for failed checks in the agent's log, want the two frozen replicas", n)
	}
}

// mountSmallDataDir puts the agent's data dir on a 1 MiB tmpfs, which
// fill can then fill; the agent is killed, its data plane stopped (its
// socket is on the tmpfs) and the tmpfs unmounted when the test ends.
func mountSmallDataDir(t *testing.T, e *env) {
	t.Helper()
	if err := os.MkdirAll(e.agent.dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", e.agent.dataDir, "tmpfs", 0, "size=1m,mode=0700"); err != nil {
		t.Fatalf("mount a tmpfs for the agent's data dir (the test needs CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		e.agent.signal(syscall.SIGKILL) // before the unmount: the agent writes there
		stopDataPlane(t, e.agent.bin, e.agent.dataDir)
		if err := syscall.Unmount(e.agent.dataDir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount the agent's data dir: %v", err)
		}
	})
}
