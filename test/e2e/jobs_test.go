//go:build docker

package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// TestJobs runs issue 28's jobs on one real control plane and agent: `hatch
// run` (output, exit codes 0 and 3 with the egg's env, secrets and volume, Ctrl-C,
// nothing left behind, a running stateful egg refused and run with --stop),
// a schedule of every 5 s ticking at the 5 s marks meanwhile (counted by
// the run label on Docker), and a failing migration egg stopping the apply
// before the egg that depends on it rolls. One cluster for all: its start is
// the slow part.
func TestJobs(t *testing.T) {
	c := newCluster(t, clusterOptions{agents: []string{"a"}})
	image := dockertest.Image(t, dockertest.ImageSpec{})
	file := func(name, yaml string) string {
		return filepath.Join(writeProject(t, map[string]string{"hatch.yaml": strings.ReplaceAll(yaml, "IMAGE", image)}), "hatch.yaml")
	}

	// The schedule ticks while the other parts run; it is checked last.
	c.mustHatch(nil, "apply", "-f", file("ticks", `project: ticks
eggs:
  tick:
    image: IMAGE
    pull: missing
    env: {APP_JOB: "1"}
    schedule: {every: 5s}
`), "--yes")
	ticking := time.Now()

	// The run's env carries a secret's value: it says it (job version ...),
	// which shows the run got the egg's secrets as well as its env.
	secret := "runs-secret-" + randomWord()
	c.mustHatch([]string{"RUNS_TOKEN=" + secret}, "apply", "-f", file("runs", `project: runs
eggs:
  task:
    image: IMAGE
    pull: missing
    env: {APP_VERSION: "${secret.token}", APP_COUNT_FILE: /data/count}
    secrets: [token]
    volumes: ["data:/data"]
    stop_timeout: 1s
    schedule: {cron: "0 0 1 1 *"}
  kv:
    image: IMAGE
    pull: missing
    port: 8080
    env: {APP_COUNT_FILE: /data/count}
    volumes: ["kvdata:/data"]
    health: {http: /healthz, interval: 1s, timeout: 1s}
    stop_timeout: 1s
volumes:
  data: {}
  kvdata: {}
secrets:
  token: {env: RUNS_TOKEN}
`), "--yes")

	t.Run("hatch run prints the output and returns the exit code, with the egg's env, secrets and volume", func(t *testing.T) {
		for i, code := range []int{0, 3} {
			out, got := c.hatchCode(nil, "run", "runs", "task", "--", "-exit", fmt.Sprint(code))
			if got != code {
				t.Fatalf("hatch run -exit %d: exit code %d, want %d\n%s", code, got, code, out)
			}
			// The count on the volume goes on from the first run: both
			// mounted the egg's volume.
			for _, want := range []string{fmt.Sprintf("job run %d", i+1), "job version " + secret, fmt.Sprintf("job done, exit %d", code)} {
				if !strings.Contains(out, want) {
					t.Fatalf("hatch run -exit %d printed no %q:\n%s", code, want, out)
				}
			}
		}
		c.noRunContainers(t, "runs")
	})

	t.Run("Ctrl-C stops the run's container within 2 s, and nothing is left", func(t *testing.T) {
		p := c.start("run-sleep", []string{"run", "runs", "task", "--", "-sleep"}, nil)
		p.waitLine(t, "sleeping", 60*time.Second)
		ids := c.runContainers(t, "runs", true)
		if len(ids) != 1 {
			t.Fatalf("%d run containers running, want the sleeper's", len(ids))
		}
		interrupted := time.Now()
		if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		dockertest.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
			if n := len(c.runContainers(t, "runs", true)); n > 0 {
				return errors.New("the run's container still runs")
			}
			return nil
		})
		if took := time.Since(interrupted); took > 2*time.Second {
			t.Errorf("the run's container stopped %v after Ctrl-C, want within 2 s", took)
		}
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			t.Fatal("hatch run did not return after its run stopped")
		}
		if code := p.cmd.ProcessState.ExitCode(); code != 130 {
			t.Errorf("hatch run exited %d after Ctrl-C, want 130\n%s%s", code, p.stdout(), p.stderr())
		}
		c.record(p.stdout() + p.stderr())
		c.noRunContainers(t, "runs")
	})

	t.Run("a running stateful egg is refused, and with --stop it runs and the egg comes back", func(t *testing.T) {
		before := containerIDs(c.projectContainers("default", "runs", "kv", ""))
		if len(before) != 1 {
			t.Fatalf("kv runs %d containers, want 1", len(before))
		}
		out, code := c.hatchCode(nil, "run", "runs", "kv", "--", "-exit", "0")
		if code == 0 || !strings.Contains(out, "--stop") {
			t.Fatalf("a run on the running stateful kv: exit %d, want refused naming --stop:\n%s", code, out)
		}
		out, code = c.hatchCode(nil, "run", "runs", "kv", "--stop", "--", "-exit", "0")
		if code != 0 || !strings.Contains(out, "job done, exit 0") {
			t.Fatalf("hatch run --stop on kv: exit %d\n%s", code, out)
		}
		var replicas []string
		dockertest.Eventually(t, 60*time.Second, 200*time.Millisecond, func() error {
			replicas = nil
			for _, ctr := range c.projectContainers("default", "runs", "kv", "") {
				if ctr.Labels[containers.LabelRun] == "" {
					replicas = append(replicas, ctr.ID)
				}
			}
			if len(replicas) != 1 {
				return fmt.Errorf("kv runs %d replicas, want its one back", len(replicas))
			}
			if status, _ := c.hatch(nil, "status", "runs"); !regexp.MustCompile(`(?m)^\s*kv\s+1/1\s`).MatchString(status) {
				return fmt.Errorf("hatch status does not say kv is ready:\n%s", status)
			}
			return nil
		})
		c.noRunContainers(t, "runs")
	})

	t.Run("a kept run's output is read with hatch logs --run; hatch runs and hatch status show runs and schedules", func(t *testing.T) {
		out, code := c.hatchCode(nil, "run", "runs", "task", "--keep", "--detach", "--", "-exit", "0")
		id := strings.TrimSpace(out)
		if code != 0 || strings.ContainsAny(id, " \n") || id == "" {
			t.Fatalf("hatch run --detach: exit %d, want the run's ID alone:\n%s", code, out)
		}
		row := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(id) + `\s+task\s+manual\s+admin\s+a\s+.*\bexited\s+0\s*$`)
		dockertest.Eventually(t, 30*time.Second, 200*time.Millisecond, func() error {
			if runs, _ := c.hatch(nil, "runs", "runs", "task"); !row.MatchString(runs) {
				return fmt.Errorf("hatch runs has no row of run %s exited 0:\n%s", id, runs)
			}
			return nil
		})
		logs := c.mustHatch(nil, "logs", "runs", "task", "--run", id)
		if !strings.Contains(logs, "job done, exit 0") || !strings.Contains(logs, "job version "+secret) {
			t.Errorf("hatch logs --run %s shows no output of the run:\n%s", id, logs)
		}
		if n := len(c.runContainers(t, "runs", false)); n != 1 {
			t.Errorf("%d run containers, want the kept one", n)
		}
		status := c.mustHatch(nil, "status", "runs")
		if !regexp.MustCompile(`(?m)^\s*task\s+.*0 0 1 1 \*.*\d{4}-01-01 00:00:00`).MatchString(status) {
			t.Errorf("hatch status shows no next run of task's schedule:\n%s", status)
		}
	})

	t.Run("a failing migration stops the apply and the egg depending on it does not roll", func(t *testing.T) {
		mig := file("mig", `project: mig
eggs:
  migrate:
    image: IMAGE
    pull: missing
    restart: "no"
    env: {APP_JOB: "1", APP_JOB_EXIT: "${env.MIG_EXIT:-0}"}
  api:
    image: IMAGE
    pull: missing
    port: 8080
    env: {APP_VERSION: "${env.API_VERSION:-v1}"}
    health: {http: /healthz, interval: 1s, timeout: 1s}
    depends_on: {migrate: {condition: completed}}
`)
		c.mustHatch(nil, "apply", "-f", mig, "--yes")
		v1 := containerIDs(c.projectContainers("default", "mig", "api", ""))
		if len(v1) != 1 {
			t.Fatalf("api runs %d containers, want 1", len(v1))
		}
		out, code := c.hatchCode([]string{"MIG_EXIT=1", "API_VERSION=v2"}, "apply", "-f", mig, "--yes")
		if code == 0 || !strings.Contains(out, "migrate") {
			t.Fatalf("the apply of a failing migration: exit %d, want a failure naming migrate:\n%s", code, out)
		}
		if now := containerIDs(c.projectContainers("default", "mig", "api", "")); !slices.Equal(now, v1) {
			t.Fatalf("api's containers went from %v to %v: it rolled past a failed migration", v1, now)
		}
		c.mustHatch(nil, "destroy", "mig", "--yes")
	})

	t.Run("every 5s runs at the 5 s marks, each tick once", func(t *testing.T) {
		if wait := 13*time.Second - time.Since(ticking); wait > 0 {
			time.Sleep(wait)
		}
		var runs api.Runs
		c.getJSON("/api/v1/projects/default/ticks/runs", &runs)
		ticks := map[time.Time]bool{}
		started := 0
		for _, r := range runs.Runs {
			if r.Trigger != api.TriggerSchedule || r.ScheduledAt.UnixNano()%int64(5*time.Second) != 0 || ticks[r.ScheduledAt] {
				t.Errorf("run %+v: want a schedule run at a 5 s mark, one per tick", r)
			}
			ticks[r.ScheduledAt] = true
			if !r.StartedAt.IsZero() {
				started++
				t.Logf("tick %s started %v after its time", r.ScheduledAt.Format(time.TimeOnly), r.StartedAt.Sub(r.ScheduledAt))
			}
		}
		if len(ticks) < 2 {
			t.Fatalf("%d ticks in %v of every 5s, want at least 2: %+v", len(ticks), time.Since(ticking), runs.Runs)
		}
		// Every start on Docker is one run's (the run label), none twice.
		labelled := map[string]int{}
		for _, ctr := range c.runContainerList(t, "ticks", false) {
			labelled[ctr.Labels[containers.LabelRun]]++
		}
		for id, n := range labelled {
			if n != 1 || !slices.ContainsFunc(runs.Runs, func(r api.Run) bool { return r.ID == id }) {
				t.Errorf("run %s has %d containers on Docker, want 1 of a recorded run", id, n)
			}
		}
		// A scheduled run's container is kept (keep_runs, 20 by default):
		// every run recorded as started has one.
		if len(labelled) < started {
			t.Errorf("%d run containers on Docker for %d started runs", len(labelled), started)
		}
		c.mustHatch(nil, "destroy", "ticks", "--yes")
	})
}

// hatchCode runs a CLI command to its end and returns its output (stdout
// and stderr) and exit code.
func (c *cluster) hatchCode(env []string, args ...string) (string, int) {
	c.t.Helper()
	out, err := c.hatch(env, args...)
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return out, ee.ExitCode()
	case err != nil:
		c.t.Fatalf("hatch %s: %v", strings.Join(args, " "), err)
	}
	return out, 0
}

// runContainerList lists the project's runs' containers (running only, or
// all), by the run label.
func (c *cluster) runContainerList(t testing.TB, project string, running bool) []container.Summary {
	t.Helper()
	f := filters.NewArgs(filters.Arg("label", dockertest.ScopeLabel+"="+c.scope.ID),
		filters.Arg("label", containers.LabelProject+"="+project), filters.Arg("label", containers.LabelRun))
	list, err := c.scope.Client.ContainerList(t.Context(), container.ListOptions{All: !running, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// runContainers returns the IDs of the project's runs' containers.
func (c *cluster) runContainers(t *testing.T, project string, running bool) []string {
	t.Helper()
	return containerIDs(c.runContainerList(t, project, running))
}

// noRunContainers waits for every run container of the project to be gone
// (removed once its end is recorded: no run here is kept).
func (c *cluster) noRunContainers(t *testing.T, project string) {
	t.Helper()
	dockertest.Eventually(t, 30*time.Second, 200*time.Millisecond, func() error {
		if ids := c.runContainers(t, project, false); len(ids) > 0 {
			return fmt.Errorf("run containers left behind: %v", ids)
		}
		return nil
	})
}
