//go:build docker

package docker

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// job is a run of the test app as a one-shot job exiting with code.
func (v *env) job(id, code string) containers.RunRequest {
	w := v.spec("migrate")
	w.Env = map[string]string{"APP_JOB": "1", "APP_JOB_EXIT": code}
	w.Health = contract.HealthCheck{}
	w.Port = 0
	return containers.RunRequest{HostID: v.host, RunID: id, Spec: w, SpecHash: contract.SpecHash(w)}
}

// runContainers lists the containers Docker holds for a run, by its label.
func (v *env) runContainers(id string) []container.Summary {
	v.t.Helper()
	cs, err := v.s.Client.ContainerList(v.t.Context(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", containers.LabelRun+"="+id), filters.Arg("label", containers.LabelHost+"="+v.host))})
	if err != nil {
		v.t.Fatal(err)
	}
	return cs
}

// newEnvOn returns a second Engine on v's host (a restarted agent's).
func newEnvOn(t *testing.T, v *env) *Engine {
	cfg := testConfig(t, v.host)
	cfg.SecretDir, cfg.Labels = v.s.ShmDir(), v.s.Labels(nil)
	return newEngine(t, v.s, cfg)
}

func runOf(cs []containers.Container, id string) (containers.Container, bool) {
	i := slices.IndexFunc(cs, func(c containers.Container) bool { return c.RunID == id })
	if i < 0 {
		return containers.Container{}, false
	}
	return cs[i], true
}

func TestARunsContainerExitsWithItsCodeAndIsNeverStartedTwice(t *testing.T) {
	v := newEnv(t)
	req := v.job("r1", "3")
	if err := v.e.StartRun(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	cs := v.waitFor("the run exited", func(cs []containers.Container) bool {
		c, ok := runOf(cs, "r1")
		return ok && !c.Placeholder() && c.State == contract.StateCrashed
	})
	c, _ := runOf(cs, "r1")
	// Docker may date the end of a process this quick a millisecond before its start.
	if c.ExitCode != 3 || c.StartedAt.IsZero() || c.FinishedAt.Before(c.StartedAt.Add(-time.Second)) || c.Name != req.Name() {
		t.Errorf("run container %+v: want %s exited 3 with its times", c, req.Name())
	}
	if lines, err := v.e.Logs(t.Context(), c.ID, 10); err != nil || !strings.Contains(strings.Join(lines, "\n"), "job done, exit 3") {
		t.Errorf("logs %q (%v): want the job's line", lines, err)
	}
	inspected, err := v.s.Client.ContainerInspect(t.Context(), c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if inspected.HostConfig.RestartPolicy.Name != container.RestartPolicyDisabled || inspected.Config.Healthcheck != nil {
		t.Errorf("restart policy %q, health check %+v: want none", inspected.HostConfig.RestartPolicy.Name, inspected.Config.Healthcheck)
	}

	// Asked again, by this Engine or by a new one (a restarted agent): the
	// ended container is the run, never started again.
	again := newEnvOn(t, v)
	for _, e := range []*Engine{v.e, again} {
		if err := e.StartRun(t.Context(), req); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second)
	for _, f := range append(v.e.Failures(), again.Failures()...) {
		t.Errorf("task failed: %v", f.Err)
	}
	after, err := v.s.Client.ContainerInspect(t.Context(), c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(v.runContainers("r1")); n != 1 || after.State.StartedAt != inspected.State.StartedAt || after.State.Running {
		t.Errorf("%d containers for r1, started at %s then %s (running %v): want one, started once", n, inspected.State.StartedAt, after.State.StartedAt, after.State.Running)
	}
}

func TestAStoppedRunIsKilledAfterItsStopTimeoutAndKept(t *testing.T) {
	v := newEnv(t)
	req := v.job("r2", "0")
	req.Spec.Command = []string{"-sleep"} // deaf to its stop signal
	req.Spec.StopTimeout = time.Second
	req.SpecHash = contract.SpecHash(req.Spec)
	if err := v.e.StartRun(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	cs := v.waitFor("the run runs", func(cs []containers.Container) bool {
		c, ok := runOf(cs, "r2")
		return ok && c.State == contract.StateRunning
	})
	c, _ := runOf(cs, "r2")
	// Deaf once it says so: a SIGTERM before that ends PID 1 with exit 2.
	dockertest.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		if lines, err := v.e.Logs(t.Context(), c.ID, 5); err != nil || !slices.Contains(lines, "sleeping") {
			return fmt.Errorf("log %q (%v)", lines, err)
		}
		return nil
	})
	began := time.Now()
	if err := v.e.StopRun(t.Context(), containers.StopRequest{ID: c.ID, WorkloadID: c.WorkloadID, StopTimeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	cs = v.waitFor("the run killed", func(cs []containers.Container) bool {
		c, ok := runOf(cs, "r2")
		return ok && c.State == contract.StateCrashed
	})
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("the stop took %v, want its 1s stop timeout and the kill", took)
	}
	if c, _ := runOf(cs, "r2"); c.ExitCode != 137 {
		lines, _ := v.e.Logs(t.Context(), c.ID, 20)
		t.Errorf("exit %d, want 137 (killed); its log:\n%s", c.ExitCode, strings.Join(lines, "\n"))
	}
	if n := len(v.runContainers("r2")); n != 1 {
		t.Errorf("%d containers for r2 after the stop, want it kept", n)
	}
}
