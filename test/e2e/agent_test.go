//go:build docker

package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// Every scenario runs beside foreign objects (scenario 9: see
// env.createForeign) and fails if any of them changed.

// 1. Three replicas start from nothing; a second converge does nothing.
func TestThreeReplicasStartAndTheNextConvergesDoNothing(t *testing.T) {
	e := newEnv(t, envOptions{convergeInterval: time.Second})
	e.startJoined()
	w := e.workload("web", 3, "v1")
	e.set(w)
	first := e.waitServing(w, "v1", time.Minute)

	idle := e.agent.logCount("converged: nothing to do")
	dockertest.Eventually(t, 15*time.Second, 100*time.Millisecond, func() error {
		if e.agent.logCount("converged: nothing to do") <= idle {
			return fmt.Errorf("no idle converge yet")
		}
		return nil
	})
	steps, idle := e.agent.logCount("converge step"), e.agent.logCount("converged: nothing to do")
	dockertest.Eventually(t, 15*time.Second, 100*time.Millisecond, func() error {
		if n := e.agent.logCount("converged: nothing to do"); n < idle+3 {
			return fmt.Errorf("%d more idle converges, want 3", n-idle)
		}
		return nil
	})
	if n := e.agent.logCount("converge step"); n != steps {
		t.Errorf("converges after the steady state took %d steps, want none", n-steps)
	}
	again, err := e.serving(t.Context(), w, "v1")
	if err != nil {
		t.Fatal(err)
	}
	for i := range first {
		if again[i].ID != first[i].ID || again[i].StartedAt != first[i].StartedAt || again[i].Restarts != 0 {
			t.Errorf("slot %d changed: %+v, was %+v", i, again[i], first[i])
		}
	}
}

// 2. `docker kill` of a replica: running and healthy again within 10 s,
// driven by the events stream (the agent's timer is set to 10 minutes). A
// fresh egg each trial, so crash back-off does not add up.
func TestAKilledReplicaIsBackWithinTenSeconds(t *testing.T) {
	e := newEnv(t, envOptions{convergeInterval: 10 * time.Minute})
	e.startJoined()
	var eggs []contract.WorkloadSpec
	for i := range 3 {
		w := e.workload(fmt.Sprintf("k%d", i), 1, "v1")
		eggs = append(eggs, w)
		e.set(eggs...)
		dies := e.agent.logCount("docker event", `"action":"die"`)
		took := e.killToHealthy(w, 10*time.Second)
		t.Logf("trial %d: killed to healthy in %s", i, took.Round(time.Millisecond))
		if e.agent.logCount("docker event", `"action":"die"`) == dies {
			t.Errorf("trial %d: the agent logged no die event", i)
		}
	}
}

// killToHealthy waits for w's single replica, kills it, and returns how long
// until it runs and answers /healthz again; it fails the test past limit.
func (e *env) killToHealthy(w contract.WorkloadSpec, limit time.Duration) time.Duration {
	e.t.Helper()
	before := e.waitServing(w, "v1", time.Minute)[0]
	// The agent must have seen it healthy too (its status says so), or the
	// restart would be of a container that never was.
	dockertest.Eventually(e.t, 20*time.Second, 20*time.Millisecond, func() error {
		r, _ := e.cp.lastReport(e.hostID)
		for _, c := range r.Containers {
			if c.ContainerID == before.ID && c.Healthy {
				return nil
			}
		}
		return fmt.Errorf("the agent has not reported %s healthy", before.ID[:12])
	})
	began := time.Now()
	if err := e.scope.Client.ContainerKill(e.t.Context(), before.ID, "SIGKILL"); err != nil {
		e.t.Fatal(err)
	}
	ctx := context.Background()
	for {
		cs, err := e.containers(ctx, &w)
		if err == nil && len(cs) == 1 && cs[0].StartedAt != before.StartedAt && healthy(ctx, cs[0]) {
			return time.Since(began)
		}
		if time.Since(began) > limit {
			e.t.Fatalf("%s: not running and healthy %s after the kill: %+v (%v)", w.Egg, limit, cs, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// 3. A spec change rolls slot by slot within max_surge: container IDs and
// the served /version change, and, sampled every 100 ms, every slot always
// has a healthy container.
func TestARollKeepsEverySlotServing(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.startJoined()
	w1 := e.workload("web", 3, "v1")
	e.set(w1)
	old := e.waitServing(w1, "v1", time.Minute)

	w2 := withEnv(w1, "APP_VERSION", "v2")
	hash2 := contract.SpecHash(w2)
	s := startSampler(100*time.Millisecond, func(ctx context.Context) []string {
		cs, err := e.containers(ctx, &w1)
		if err != nil {
			return []string{"list: " + err.Error()}
		}
		var problems []string
		rolling := 0
		for slot := range w1.Replicas {
			var healthyOne, oldOne, newBooting bool
			for _, c := range cs {
				if c.Slot != slot {
					continue
				}
				h := healthy(ctx, c)
				healthyOne = healthyOne || h
				oldOne = oldOne || (c.SpecHash != hash2 && c.running())
				newBooting = newBooting || (c.SpecHash == hash2 && !h)
			}
			if !healthyOne {
				problems = append(problems, fmt.Sprintf("slot %d has no healthy container", slot))
			}
			if oldOne && newBooting {
				rolling++
			}
		}
		if rolling > w2.MaxSurge() {
			problems = append(problems, fmt.Sprintf("%d slots rolling at once, max_surge %d", rolling, w2.MaxSurge()))
		}
		return problems
	})
	e.set(w2)
	rolled := e.waitServing(w2, "v2", 2*time.Minute)
	n, problems := s.finish()
	for _, p := range problems {
		t.Error(p)
	}
	if n < 10 {
		t.Errorf("only %d samples during the roll", n)
	}
	for i := range rolled {
		if slices.Contains(ids(old), rolled[i].ID) {
			t.Errorf("slot %d still runs container %s: not rolled", i, rolled[i].ID[:12])
		}
	}
}

// 4. A replacement that never turns healthy: after progress_deadline the old
// keeps serving, the new is gone, the status says why; an agent restart
// does not retry it.
func TestAReplacementThatNeverTurnsHealthyFailsTheRollout(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.startJoined()
	w1 := e.workload("web", 1, "v1")
	w1.Rollout.ProgressDeadline = 6 * time.Second
	e.set(w1)
	old := e.waitServing(w1, "v1", time.Minute)[0]

	w2 := withEnv(withEnv(w1, "APP_VERSION", "v2"), "APP_BOOT_DELAY", "1h")
	hash2 := contract.SpecHash(w2)
	var sawNew atomic.Bool // set by the sampler's goroutine, read while it runs
	s := startSampler(100*time.Millisecond, func(ctx context.Context) []string {
		cs, err := e.containers(ctx, &w1)
		if err != nil {
			return []string{"list: " + err.Error()}
		}
		for _, c := range cs {
			if c.SpecHash == hash2 {
				sawNew.Store(true)
			}
			if c.ID == old.ID && !healthy(ctx, c) {
				return []string{"the old container stopped serving"}
			}
		}
		return nil
	})
	e.set(w2)
	var failure contract.ContainerStatus
	dockertest.Eventually(t, time.Minute, 200*time.Millisecond, func() error {
		cs, err := e.containers(t.Context(), &w1)
		if err != nil {
			return err
		}
		if len(cs) != 1 || cs[0].ID != old.ID {
			return fmt.Errorf("containers %v, want only the old %s", ids(cs), old.ID[:12])
		}
		r, _ := e.cp.lastReport(e.hostID)
		for _, c := range r.Containers {
			if c.ContainerID == old.ID && c.RolloutFailure != "" {
				failure = c
				return nil
			}
		}
		return fmt.Errorf("no rollout failure reported yet")
	})
	if !sawNew.Load() {
		t.Error("no replacement was ever started")
	}
	if !strings.Contains(failure.RolloutFailure, "progress deadline") {
		t.Errorf("failure %q does not say why", failure.RolloutFailure)
	}
	if !slices.ContainsFunc(failure.LogTail, func(l string) bool { return strings.Contains(l, "booting for 1h") }) {
		t.Errorf("the report's log tail %q lacks the replacement's last lines", failure.LogTail)
	}

	startSteps := func() int { return e.agent.logCount("converge step", `"action":"start"`) }
	starts := startSteps()
	if starts < 2 {
		t.Errorf("%d start steps logged, want the original and the replacement", starts)
	}
	e.agent.signal(syscall.SIGTERM)
	e.agent.start()
	time.Sleep(8 * time.Second) // longer than it took to start the replacement the first time
	_, problems := s.finish()
	for _, p := range problems {
		t.Error(p)
	}
	cs, err := e.containers(t.Context(), &w1)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].ID != old.ID || cs[0].SpecHash == hash2 {
		t.Errorf("after the agent's restart: %+v, want only the old container", cs)
	}
	if n := startSteps(); n != starts {
		t.Errorf("the restarted agent started %d containers again", n-starts)
	}
}

// 5. A stateful egg with a volume: data written before a roll is readable
// after it; never two containers on the volume.
func TestAStatefulRollKeepsTheDataAndNeverSharesTheVolume(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.startJoined()
	w1 := withEnv(e.workload("db", 1, "v1"), "APP_COUNT_FILE", "/data/count")
	vol := dockerVolume(e, "data")
	w1.Volumes = []contract.VolumeMount{{Name: "data", DockerName: vol, Target: "/data"}}
	e.set(w1)
	c := e.waitServing(w1, "v1", time.Minute)[0]
	for i := 1; i <= 3; i++ {
		code, body, err := dockertest.Do(t.Context(), "POST", "http://"+c.IP+":8080/hit", nil)
		if err != nil || code != 200 || strings.TrimSpace(body) != fmt.Sprint(i) {
			t.Fatalf("hit %d: %d %q %v", i, code, body, err)
		}
	}

	s := startSampler(100*time.Millisecond, func(ctx context.Context) []string {
		cs, err := e.containers(ctx, nil)
		if err != nil {
			return []string{"list: " + err.Error()}
		}
		on := 0
		for _, c := range cs {
			if slices.Contains(c.Mounts, vol) {
				on++
			}
		}
		if on > 1 {
			return []string{fmt.Sprintf("%d containers on the volume", on)}
		}
		return nil
	})
	w2 := withEnv(w1, "APP_VERSION", "v2")
	e.set(w2)
	after := e.waitServing(w2, "v2", 2*time.Minute)[0]
	_, problems := s.finish()
	for _, p := range problems {
		t.Error(p)
	}
	if after.ID == c.ID {
		t.Fatal("the container was not replaced")
	}
	if _, n, err := get(t.Context(), after.IP, "/count"); err != nil || n != "3" {
		t.Errorf("after the roll the count is %q (%v), want 3", n, err)
	}
}

// 6. Scale 3 → 1 → 0 → 2; a one-shot job runs once and is not restarted.
func TestScaleAndAOneShotJob(t *testing.T) {
	e := newEnv(t, envOptions{convergeInterval: time.Second})
	e.startJoined()
	job := e.workload("job", 1, "j1")
	job.Env["APP_JOB"] = "1"
	job.Restart, job.Health, job.Port = contract.RestartNo, contract.HealthCheck{}, 0
	w := e.workload("web", 3, "v1")
	e.set(w, job)
	three := e.waitServing(w, "v1", time.Minute)

	w.Replicas = 1
	e.set(w, job)
	one := e.waitServing(w, "v1", time.Minute)
	if one[0].ID != three[0].ID {
		t.Errorf("scaling down replaced slot 0 (%s, was %s)", one[0].ID[:12], three[0].ID[:12])
	}
	w.Replicas = 0
	e.set(w, job)
	e.waitServing(w, "v1", time.Minute)
	w.Replicas = 2
	e.set(w, job)
	e.waitServing(w, "v1", time.Minute)

	var ran observed
	dockertest.Eventually(t, 30*time.Second, 100*time.Millisecond, func() error {
		cs, err := e.containers(t.Context(), &job)
		if err != nil {
			return err
		}
		if len(cs) != 1 || cs[0].Status != "exited" || cs[0].ExitCode != 0 {
			return fmt.Errorf("job containers %+v, want one exited with 0", cs)
		}
		ran = cs[0]
		return nil
	})
	time.Sleep(4 * time.Second) // several converges (every second)
	cs, err := e.containers(t.Context(), &job)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].ID != ran.ID || cs[0].StartedAt != ran.StartedAt || cs[0].Status != "exited" {
		t.Errorf("the job ran again: %+v, was %+v", cs, ran)
	}
}

// 7. Control plane down: nothing stops; the agent restarted meanwhile
// converges from its cache.
func TestTheControlPlaneDownStopsNothing(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.startJoined()
	w := e.workload("web", 2, "v1")
	e.set(w)
	before := e.waitServing(w, "v1", time.Minute)

	e.cp.stop()
	time.Sleep(5 * time.Second) // failed polls and heartbeats, timer converges
	during, err := e.serving(t.Context(), w, "v1")
	if err != nil {
		t.Fatalf("with the control plane down: %v", err)
	}
	if !slices.Equal(ids(during), ids(before)) {
		t.Errorf("containers changed while the control plane was down: %v, were %v", ids(during), ids(before))
	}

	// The agent restarts while the control plane is still down, and a
	// replica dies meanwhile: only the cache can say it should run.
	e.agent.signal(syscall.SIGTERM)
	if err := e.scope.Client.ContainerKill(t.Context(), before[1].ID, "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	e.agent.start()
	after := e.waitServing(w, "v1", 30*time.Second)
	if after[0].ID != before[0].ID || after[0].StartedAt != before[0].StartedAt {
		t.Errorf("slot 0 was touched: %+v, was %+v", after[0], before[0])
	}
	if after[1].StartedAt == before[1].StartedAt {
		t.Errorf("slot 1 was not restarted")
	}
}

// 8. kill -9 of the agent in the middle of a roll, then a restart: the roll
// finishes, no duplicate or orphan containers remain.
func TestAnAgentKilledMidRollFinishesItAfterARestart(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.startJoined()
	w1 := e.workload("web", 3, "v1")
	e.set(w1)
	e.waitServing(w1, "v1", time.Minute)

	// A slow boot keeps the roll going for several seconds.
	w2 := withEnv(withEnv(w1, "APP_VERSION", "v2"), "APP_BOOT_DELAY", "1500ms")
	hash2 := contract.SpecHash(w2)
	e.set(w2)
	dockertest.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		cs, err := e.containers(t.Context(), &w1)
		if err != nil {
			return err
		}
		var fresh, stale int
		for _, c := range cs {
			if c.SpecHash == hash2 {
				fresh++
			} else if c.running() {
				stale++
			}
		}
		if fresh == 0 || stale == 0 {
			return fmt.Errorf("not mid-roll: %d new, %d old", fresh, stale)
		}
		return nil
	})
	e.agent.signal(syscall.SIGKILL)
	time.Sleep(time.Second)
	e.agent.start()

	e.waitServing(w2, "v2", 2*time.Minute)
	// Stable: nothing more comes or goes once the roll is done.
	time.Sleep(3 * time.Second)
	all, err := e.containers(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 {
		t.Errorf("the host has %d containers after the roll, want 3: %+v", len(all), all)
	}
	for _, c := range all {
		if c.SpecHash != hash2 || !c.running() {
			t.Errorf("left over: %s slot %d spec %s %s", c.ID[:12], c.Slot, c.SpecHash, c.Status)
		}
	}
	if _, err := e.serving(t.Context(), w2, "v2"); err != nil {
		t.Error(err)
	}
}

// withEnv returns w with one more environment variable (w's map is not
// shared with the result).
func withEnv(w contract.WorkloadSpec, k, v string) contract.WorkloadSpec {
	w.Env = maps.Clone(w.Env)
	w.Env[k] = v
	return w
}

// dockerVolume is the Docker name of a project volume on this host.
func dockerVolume(e *env, name string) string {
	return contract.VolumeName(e.hostID, e.ns, e.project, name)
}
