//go:build docker

package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// Chaos: the server killed (SIGKILL) at a moment drawn across an apply, from
// the CLI's start to the end of the roll it causes, down for a while, then
// started again on its data dir. Meanwhile the agent keeps the project's
// containers serving (it rolls on from the desired state it has); the CLI's
// apply either finishes once the server is back or fails with a message
// (never hangs, never panics); the project's lease is free within its
// expiry, so that a re-apply goes through; and the re-apply converges to
// exactly the desired containers, nothing orphaned or duplicated, every one
// answering the new version.
//
// CI runs 2 trials; `make test-long` sets HATCH_CHAOS_TRIALS.
func TestChaosAServerKilledMidApply(t *testing.T) {
	trials := 2
	if os.Getenv("HATCH_CHAOS_TRIALS") != "" {
		trials = chaosTrials(t, trials)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))

	c := newCluster(t, clusterOptions{agents: []string{"a"}})
	agent := c.agents["a"]
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the agent's decisions:\n%s", grepLines(agent.proc.stdout()+agent.proc.stderr(),
				`"converge step"`, `"new desired state"`, `"rollout failed"`, "reachable", "cannot"))
		}
	})
	image := dockertest.Image(t, dockertest.ImageSpec{})
	file := filepath.Join(t.TempDir(), "hatch.yaml")
	writeChaosProject(t, file, image, "v1")
	began := time.Now()
	c.mustHatch(nil, "apply", "-f", file, "--yes")
	applyTook := time.Since(began)
	c.waitChaosServes("v1", time.Minute)
	t.Logf("the first apply took %s", applyTook.Round(time.Millisecond))

	phases := map[string]int{}
	for i := range trials {
		version := "v" + strconv.Itoa(i+2)
		old := specHashes(c.chaosContainers())
		writeChaosProject(t, file, image, version)
		apply := c.start("apply", []string{"apply", "-f", file, "--yes"}, nil)
		if i%2 == 0 {
			// Aimed at the server's own part: the apply is asked for
			// right after the plan is shown, and takes a moment.
			apply.waitLine(t, "egg/app (", time.Minute)
			time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
		} else {
			time.Sleep(time.Duration(rng.Int64N(int64(applyTook))))
		}
		stage := "while applying"
		if strings.Contains(apply.stdout(), "Applied:") {
			stage = "while following the roll"
		}
		phase := stage + ", " + chaosApplyPhase(c.chaosContainers(), old)
		c.killServer()
		phases[phase]++
		t.Logf("trial %d: kill -9 of the server %s", i+1, phase)

		// Down for a while: every slot keeps a running container.
		down := time.Duration(500+rng.IntN(1500)) * time.Millisecond
		for end := time.Now().Add(down); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if n := len(c.projectContainers("default", chaosProjectName, "app", "")); n < chaosReplicas {
				t.Fatalf("trial %d: %d containers running while the server is down, want at least %d", i+1, n, chaosReplicas)
			}
			select {
			case <-agent.proc.done:
				t.Fatalf("trial %d: the agent exited while the server was down:\n%s", i+1, agent.proc.stderr())
			default:
			}
		}
		c.restartServer()
		back := time.Now()

		// The CLI ends, one way or the other, and says how.
		select {
		case <-apply.done:
		case <-time.After(2 * time.Minute):
			t.Fatalf("trial %d: the apply still runs 2 minutes after the server came back:\n%s%s", i+1, apply.stdout(), apply.stderr())
		}
		out := apply.stdout() + apply.stderr()
		c.record(out)
		switch code := apply.cmd.ProcessState.ExitCode(); {
		case strings.Contains(out, "panic") || strings.Contains(out, "goroutine "):
			t.Fatalf("trial %d: the apply crashed:\n%s", i+1, out)
		case code == 0 && !strings.Contains(out, "is ready"):
			t.Fatalf("trial %d: the apply exited 0 without the project ready:\n%s", i+1, out)
		case code == 0:
			t.Logf("trial %d: the apply finished once the server was back", i+1)
		default:
			t.Logf("trial %d: the apply failed (exit %d): %s", i+1, code, lastLine(out))
		}

		// The lease is free within its expiry (30 s): the re-apply goes
		// through, and ends with the project ready.
		for {
			out, err := c.hatch(nil, "apply", "-f", file, "--yes")
			if err == nil {
				break
			}
			if !strings.Contains(out, "locked") || time.Since(back) > 40*time.Second {
				t.Fatalf("trial %d: the re-apply %s after the server came back: %v\n%s", i+1, time.Since(back).Round(time.Millisecond), err, out)
			}
			time.Sleep(time.Second)
		}
		t.Logf("trial %d: re-applied %s after the server came back", i+1, time.Since(back).Round(time.Millisecond))
		c.waitChaosServes(version, 30*time.Second)
	}
	t.Logf("the kills hit: %v", phases)
}

// Chaos: the server down (kill -9) while a replica is killed twice. Each
// time the replica runs again within its back-off (none, then 1 s) plus a
// margin, with the agent's timer converge off: Docker's events and the
// wake-up the plan asks for at the back-off's end bring it back, not the
// server. The server back (an apply made at once, which adds an egg),
// the agent has the new desired state within seconds (its poll does not
// wait out the back-off it grew while the server was down), and the
// replicas that ran meanwhile are neither restarted nor replaced.
func TestChaosAReplicaKilledTwiceWhileTheServerIsDown(t *testing.T) {
	c := newCluster(t, clusterOptions{agents: []string{"a"}, convergeInterval: 10 * time.Minute})
	agent := c.agents["a"]
	image := dockertest.Image(t, dockertest.ImageSpec{})
	file := filepath.Join(t.TempDir(), "hatch.yaml")
	writeChaosProject(t, file, image, "v1")
	c.mustHatch(nil, "apply", "-f", file, "--yes")
	c.waitChaosServes("v1", time.Minute)

	c.killServer()
	time.Sleep(time.Second) // the agent finds it gone
	// A loaded machine's slack on top of the "back-off + 1 s" (a
	// first restart once took 2 s here); without the wake-up, the timer
	// would be the bound (10 minutes here).
	const margin = 4 * time.Second
	for n := range 2 {
		victim := c.chaosSlot0()
		began := time.Now()
		if err := c.scope.Client.ContainerKill(t.Context(), victim.ID, "SIGKILL"); err != nil {
			t.Fatal(err)
		}
		var took time.Duration
		dockertest.Eventually(t, time.Minute, 20*time.Millisecond, func() error {
			now := c.chaosSlot0()
			if now.ID != victim.ID || !now.State.Running || now.State.StartedAt == victim.State.StartedAt {
				return fmt.Errorf("slot 0: %s running %v started %s (was %s started %s)", now.ID[:12], now.State.Running,
					now.State.StartedAt, victim.ID[:12], victim.State.StartedAt)
			}
			took = time.Since(began)
			return nil
		})
		bound := nominalBackoff(n) + time.Second + margin
		t.Logf("crash %d with the server down: running again after %s (nominal back-off %s)", n+1, took.Round(time.Millisecond), nominalBackoff(n))
		if took > bound {
			t.Errorf("crash %d: running again after %s, past its back-off %s + 1 s (+ %s of margin)", n+1, took, nominalBackoff(n), margin)
		}
		c.waitChaosServes("v1", 30*time.Second)
	}
	ran := c.chaosStarts()

	c.restartServer()
	back := time.Now()
	writeChaosProjectWith(t, file, image, "v1", `  more:
    image: `+image+`
    pull: missing
    port: 8080
`)
	c.mustHatch(nil, "apply", "-f", file, "--yes", "--no-wait")
	// The apply's state is the one with the added egg's workload (the
	// server may send the state it had anew when it starts).
	l, err := agent.proc.waitLineAfter(`"workloads":2`, back, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the server back to the new desired state at the agent: %s", l.at.Sub(back).Round(time.Millisecond))
	// The poll's back-off had grown to several seconds: 2 s of margin
	// still tells a poll woken by the first answer from one that waits.
	if d := l.at.Sub(back); d > 5*time.Second {
		t.Errorf("the new desired state reached the agent %s after the server came back, want within 3 s (+ 2 s of margin)", d)
	}
	dockertest.Eventually(t, time.Minute, 200*time.Millisecond, func() error {
		if n := len(c.projectContainers("default", chaosProjectName, "more", "")); n != 1 {
			return fmt.Errorf("%d containers of the added egg running", n)
		}
		return nil
	})
	c.waitChaosServes("v1", 10*time.Second)
	if now := c.chaosStarts(); !maps.Equal(now, ran) {
		t.Errorf("the replicas changed once the server was back: %v; were %v", now, ran)
	}
}

// chaosSlot0 inspects the container of the egg's slot 0 (the test fails
// unless there is exactly one).
func (c *cluster) chaosSlot0() container.InspectResponse {
	c.t.Helper()
	var ids []string
	for _, s := range c.chaosContainers() {
		if s.Labels[containers.LabelSlot] == "0" {
			ids = append(ids, s.ID)
		}
	}
	if len(ids) != 1 {
		c.t.Fatalf("slot 0 holds %d containers, want 1", len(ids))
	}
	ci, err := c.scope.Client.ContainerInspect(c.t.Context(), ids[0])
	if err != nil {
		c.t.Fatal(err)
	}
	return ci
}

// chaosStarts maps each container of the egg to when it last started: a
// restart or a replacement changes it.
func (c *cluster) chaosStarts() map[string]string {
	c.t.Helper()
	out := map[string]string{}
	for _, s := range c.chaosContainers() {
		ci, err := c.scope.Client.ContainerInspect(c.t.Context(), s.ID)
		if err != nil {
			c.t.Fatal(err)
		}
		out[s.ID[:12]] = ci.State.StartedAt
	}
	return out
}

const (
	chaosProjectName = "chaos"
	chaosReplicas    = 3
)

// writeChaosProject writes the test app as egg app of project chaos, its
// /version answering version, each replica taking a while to boot so that a
// roll lasts.
func writeChaosProject(t testing.TB, file, image, version string) {
	t.Helper()
	writeChaosProjectWith(t, file, image, version, "")
}

// writeChaosProjectWith is writeChaosProject with more eggs (YAML at the
// eggs' indentation).
func writeChaosProjectWith(t testing.TB, file, image, version, more string) {
	t.Helper()
	yaml := fmt.Sprintf(`project: %s
eggs:
  app:
    image: %s
    pull: missing
    replicas: %d
    port: 8080
    env: {APP_VERSION: %s, APP_BOOT_DELAY: 500ms}
    health: {http: /healthz, interval: 250ms, timeout: 1s}
%s`, chaosProjectName, image, chaosReplicas, version, more)
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
}

// chaosContainers lists the containers of the project's egg in every
// state.
func (c *cluster) chaosContainers() []container.Summary {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.t.Context(), 20*time.Second)
	defer cancel()
	f := filters.NewArgs(filters.Arg("label", dockertest.ScopeLabel+"="+c.scope.ID),
		filters.Arg("label", containers.LabelNamespace+"=default"), filters.Arg("label", containers.LabelProject+"="+chaosProjectName),
		filters.Arg("label", containers.LabelEgg+"=app")) // not its relay
	list, err := c.scope.Client.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		c.t.Fatal(err)
	}
	return list
}

// specHashes is the set of spec hashes of cs.
func specHashes(cs []container.Summary) map[string]bool {
	out := map[string]bool{}
	for _, s := range cs {
		out[s.Labels[containers.LabelSpec]] = true
	}
	return out
}

// chaosApplyPhase says where an apply stood, from Docker's view: no
// container of a new spec yet, new ones beside old ones, or only new ones.
func chaosApplyPhase(cs []container.Summary, old map[string]bool) string {
	fresh, stale := 0, 0
	for _, s := range cs {
		if old[s.Labels[containers.LabelSpec]] {
			stale++
		} else {
			fresh++
		}
	}
	switch {
	case fresh == 0:
		return "the new spec not on the host yet"
	case stale > 0:
		return "the host rolling"
	default:
		return "the host rolled"
	}
}

// waitChaosServes waits until the project runs exactly one container per
// slot, nothing else in any state, each answering version.
func (c *cluster) waitChaosServes(version string, timeout time.Duration) {
	c.t.Helper()
	dockertest.Eventually(c.t, timeout, 200*time.Millisecond, func() error {
		cs := c.chaosContainers()
		if len(cs) != chaosReplicas {
			return fmt.Errorf("%d containers in all, want %d (an orphan, a duplicate or one missing): %s", len(cs), chaosReplicas, describe(cs))
		}
		var slots []string
		for _, s := range cs {
			slots = append(slots, s.Labels[containers.LabelSlot])
			if s.State != "running" {
				return fmt.Errorf("slot %s: %s", s.Labels[containers.LabelSlot], s.State)
			}
			ip := summaryIP(s)
			if _, v, err := get(c.t.Context(), ip, "/version"); err != nil || v != version {
				return fmt.Errorf("slot %s (%s) answers %q (%v), want %q", s.Labels[containers.LabelSlot], ip, v, err, version)
			}
		}
		if slices.Sort(slots); !slices.Equal(slots, []string{"0", "1", "2"}) {
			return fmt.Errorf("slots %v, want 0, 1 and 2 once each", slots)
		}
		return nil
	})
}

// describe names each container: ID, slot, spec, state.
func describe(cs []container.Summary) string {
	var out []string
	for _, s := range cs {
		out = append(out, fmt.Sprintf("%s slot %s spec %s %s (%s)", s.ID[:12], s.Labels[containers.LabelSlot], s.Labels[containers.LabelSpec], s.State, s.Status))
	}
	return strings.Join(out, "; ")
}

// summaryIP is a container's address on any of its networks.
func summaryIP(s container.Summary) string {
	if s.NetworkSettings == nil {
		return ""
	}
	for _, ep := range s.NetworkSettings.Networks {
		if ep != nil && ep.IPAddress != "" {
			return ep.IPAddress
		}
	}
	return ""
}

// killServer kills the server process (SIGKILL: no shutdown at all) and
// keeps its log for the cluster's secret check.
func (c *cluster) killServer() {
	c.t.Helper()
	if err := c.server.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		c.t.Fatal(err)
	}
	<-c.server.done
	c.record(c.server.stderr()) // its stdout shows the admin token, as it should
}

// grepLines keeps the lines of out holding any of subs.
func grepLines(out string, subs ...string) string {
	var kept []string
	for _, l := range strings.Split(out, "\n") {
		if slices.ContainsFunc(subs, func(s string) bool { return strings.Contains(l, s) }) {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "\n")
}

// lastLine is the last non-empty line of out.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}
