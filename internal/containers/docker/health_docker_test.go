//go:build docker

package docker

import (
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// TestHealthStates starts one workload per health rule at once, all on one
// network, and waits for each to show the state its rule gives.
func TestHealthStates(t *testing.T) {
	v := newEnv(t)
	checked := dockertest.Image(t, dockertest.ImageSpec{Healthcheck: dockertest.AppHealthcheck})
	fast := contract.HealthCheck{Interval: 300 * time.Millisecond, Retries: 2}

	workloads := map[string]func(*contract.WorkloadSpec){
		// An HTTP probe that starts failing after a second.
		"turns-unhealthy": func(w *contract.WorkloadSpec) { w.Env["APP_UNHEALTHY_AFTER"] = "1s" },
		// Slow boot inside a long start period: no failure counts.
		"slow-boot": func(w *contract.WorkloadSpec) {
			w.Env["APP_BOOT_DELAY"] = "2s"
			w.Health.StartPeriod = 30 * time.Second
		},
		// The image's own HEALTHCHECK, no agent probe and no port.
		"image-check": func(w *contract.WorkloadSpec) { w.Image, w.Health, w.Port = checked, contract.HealthCheck{}, 0 },
		// A Docker HEALTHCHECK from the spec's cmd, failing.
		"cmd-failing": func(w *contract.WorkloadSpec) {
			w.Health = fast
			w.Health.Cmd = []string{"/app", "-check", "-check-url", "http://127.0.0.1:1/"}
		},
		// No health block: tcp on the port; nothing listens on 9999.
		"tcp-port-closed": func(w *contract.WorkloadSpec) {
			w.Health, w.Port = contract.HealthCheck{Interval: 300 * time.Millisecond, Retries: 2}, 9999
		},
		"tcp-port-open": func(w *contract.WorkloadSpec) { w.Health = contract.HealthCheck{Interval: 300 * time.Millisecond} },
		// Nothing to check: running is healthy.
		"running-only": func(w *contract.WorkloadSpec) { w.Health, w.Port = contract.HealthCheck{}, 0 },
		// A crash and a one-shot job.
		"crasher": func(w *contract.WorkloadSpec) { w.Env["APP_CRASH_AFTER"] = "500ms" },
		"job":     func(w *contract.WorkloadSpec) { w.Env["APP_JOB"] = "1"; w.Restart = contract.RestartNo },
	}
	specs := map[string]contract.WorkloadSpec{}
	var all []contract.WorkloadSpec
	for egg, mutate := range workloads {
		w := v.spec(egg)
		mutate(&w)
		specs[egg] = w
		all = append(all, w)
	}
	v.e.SetWorkloads(all)
	start := time.Now()
	for _, w := range all {
		v.start(w, 0, "")
	}

	// While slow-boot boots, its failures do not count.
	for time.Since(start) < 1500*time.Millisecond {
		if c := of(v.list(), "slow-boot"); len(c) == 1 && (c[0].FailingStreak != 0 || c[0].Healthy) {
			logs, _ := v.e.Logs(t.Context(), c[0].ID, 20)
			in, _ := v.s.Client.ContainerInspect(t.Context(), c[0].ID)
			t.Fatalf("slow-boot during its start period (%s after start): streak %d healthy %v\nstarted %s\nnetworks %+v\nlogs %q", time.Since(start), c[0].FailingStreak, c[0].Healthy, in.State.StartedAt, in.NetworkSettings.Networks, logs)
		}
		time.Sleep(100 * time.Millisecond)
	}

	one := func(cs []containers.Container, egg string) (containers.Container, bool) {
		mine := of(cs, egg)
		if len(mine) != 1 || mine[0].Placeholder() {
			return containers.Container{}, false
		}
		return mine[0], true
	}
	unhealthy := func(egg string) func(containers.Container) bool {
		return func(c containers.Container) bool {
			return c.State == contract.StateRunning && !c.Healthy && c.FailingStreak >= specs[egg].HealthRetries()
		}
	}
	healthy := func(c containers.Container) bool { return c.State == contract.StateRunning && c.Healthy }
	want := map[string]func(containers.Container) bool{
		"turns-unhealthy": unhealthy("turns-unhealthy"),
		"slow-boot":       healthy,
		"image-check":     healthy,
		"cmd-failing": func(c containers.Container) bool {
			return c.State == contract.StateRunning && !c.Healthy && c.FailingStreak >= 2
		},
		"tcp-port-closed": unhealthy("tcp-port-closed"),
		"tcp-port-open":   healthy,
		"running-only":    healthy,
		"crasher": func(c containers.Container) bool {
			return c.State == contract.StateCrashed && c.ExitCode == 1 && !c.Healthy
		},
		"job": func(c containers.Container) bool { return c.State == contract.StateCompleted && c.ExitCode == 0 },
	}
	v.waitFor("every workload in its expected health state", func(cs []containers.Container) bool {
		for egg, ok := range want {
			c, found := one(cs, egg)
			if !found || !ok(c) {
				return false
			}
		}
		return true
	})
	// turns-unhealthy passed before it failed: it was healthy once, so the
	// change notifications cover both turns.
	if v.changes.Load() < int32(len(all)) {
		t.Errorf("%d change notifications for %d workloads", v.changes.Load(), len(all))
	}
}
