//go:build docker

package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// TestJobsScheduleConcurrencyAndTimeout runs three schedules of every 5 s
// side by side on one real control plane and agent, each run a server of
// the test app (it runs until stopped):
//   - forbid: each run crashes 7 s in (APP_CRASH_AFTER), so the tick 5 s
//     after a run's is skipped while it still runs, and the next one runs;
//     on Docker no two of its runs' containers ran at once;
//   - replace: each tick stops the run before it (recorded stopped) and
//     starts its own;
//   - timeout 2s: each run is killed 2 s in, recorded timed out, shown so
//     by `hatch runs`, with a run.timed_out event.
//
// Containers are counted by their run label on Docker: each started run
// has exactly one, and no container is of a run not recorded.
func TestJobsScheduleConcurrencyAndTimeout(t *testing.T) {
	c := newCluster(t, clusterOptions{agents: []string{"a"}})
	image := dockertest.Image(t, dockertest.ImageSpec{})
	c.applyWithImage(t, image, `project: conc
eggs:
  forbid:
    image: IMAGE
    pull: missing
    env: {APP_CRASH_AFTER: 7s}
    stop_timeout: 1s
    schedule: {every: 5s}
  replace:
    image: IMAGE
    pull: missing
    stop_timeout: 1s
    schedule: {every: 5s, concurrency: replace}
  timeout:
    image: IMAGE
    pull: missing
    stop_timeout: 1s
    schedule: {every: 5s, timeout: 2s}
`)
	applied := time.Now()

	// Enough of each: a skip followed by a run, two replaced runs, two
	// timed-out runs (about 22 s of ticks).
	var runs map[string][]api.Run
	dockertest.Eventually(t, 45*time.Second, time.Second, func() error {
		runs = c.eggRuns("conc")
		forbid := runs["forbid"]
		skip := slices.IndexFunc(forbid, func(r api.Run) bool { return r.State == store.RunSkipped })
		switch {
		case skip < 0 || !slices.ContainsFunc(forbid, func(r api.Run) bool {
			return r.ScheduledAt.After(forbid[skip].ScheduledAt) && !r.StartedAt.IsZero()
		}):
			return fmt.Errorf("forbid: no skipped tick followed by a started run yet: %s", describeRuns(forbid))
		case countState(runs["replace"], string(store.RunStopped)) < 2:
			return fmt.Errorf("replace: fewer than 2 runs stopped yet: %s", describeRuns(runs["replace"]))
		case countState(runs["timeout"], store.RunTimedOut) < 2:
			return fmt.Errorf("timeout: fewer than 2 runs timed out yet: %s", describeRuns(runs["timeout"]))
		}
		return nil
	})
	t.Logf("enough ticks %v after the apply", time.Since(applied).Round(time.Millisecond))
	starts := c.runStarts(t, "conc")

	t.Run("forbid skips a tick while the previous run runs, and no two runs overlap on Docker", func(t *testing.T) {
		forbid := runs["forbid"]
		for _, r := range forbid {
			if r.State != store.RunSkipped {
				continue
			}
			// The run of the tick 5 s before still ran at this tick.
			prev := slices.IndexFunc(forbid, func(p api.Run) bool { return p.ScheduledAt.Equal(r.ScheduledAt.Add(-5 * time.Second)) })
			if prev < 0 || forbid[prev].State == store.RunSkipped || forbid[prev].StartedAt.IsZero() ||
				(!forbid[prev].EndedAt.IsZero() && forbid[prev].EndedAt.Before(r.ScheduledAt)) {
				t.Errorf("tick %s skipped, but the run before it did not run then: %s", r.ScheduledAt.Format(time.TimeOnly), describeRuns(forbid))
			}
			if !r.StartedAt.IsZero() || len(starts[r.ID]) > 0 {
				t.Errorf("skipped run %s started (%d containers)", r.ID, len(starts[r.ID]))
			}
		}
		var spans [][2]time.Time
		for _, r := range forbid {
			for _, ctr := range starts[r.ID] {
				spans = append(spans, containerSpan(t, ctr))
			}
		}
		slices.SortFunc(spans, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
		for i := 1; i < len(spans); i++ {
			if prevEnd := spans[i-1][1]; prevEnd.IsZero() || spans[i][0].Before(prevEnd) {
				t.Errorf("two runs of forbid ran at once on Docker: one %v–%v, the next from %v", spans[i-1][0], prevEnd, spans[i][0])
			}
		}
	})

	t.Run("replace stops the running run and starts the tick's", func(t *testing.T) {
		replace := runs["replace"]
		for _, r := range replace {
			if r.State != string(store.RunStopped) {
				continue
			}
			next := slices.IndexFunc(replace, func(n api.Run) bool { return n.ScheduledAt.Equal(r.ScheduledAt.Add(5 * time.Second)) })
			if next < 0 || replace[next].StartedAt.IsZero() {
				t.Errorf("run %s (tick %s) was stopped, but no run of the next tick started: %s", r.ID, r.ScheduledAt.Format(time.TimeOnly), describeRuns(replace))
				continue
			}
			// Stopped by the next tick (its stop timeout is 1 s), not
			// by its own end.
			if end := r.EndedAt; end.Before(replace[next].ScheduledAt) || end.After(replace[next].ScheduledAt.Add(4*time.Second)) {
				t.Errorf("run %s ended at %v, want within a few seconds after the next tick %v", r.ID, end, replace[next].ScheduledAt)
			}
			for _, ctr := range starts[r.ID] {
				if ctr.State.Running {
					t.Errorf("stopped run %s's container still runs", r.ID)
				}
			}
		}
	})

	t.Run("timeout kills a run past it, recorded timed out, with its event", func(t *testing.T) {
		for _, r := range runs["timeout"] {
			if r.State != store.RunTimedOut {
				continue
			}
			if d := r.EndedAt.Sub(r.StartedAt); d < 2*time.Second || d > 5*time.Second {
				t.Errorf("run %s timed out after %v, want 2 s (and its stop timeout of 1 s at most)", r.ID, d)
			}
		}
		if out := c.mustHatch(nil, "runs", "conc", "timeout"); strings.Count(out, " timed_out ") < 2 {
			t.Errorf("hatch runs shows fewer than 2 runs timed out:\n%s", out)
		}
		if n := len(slices.DeleteFunc(c.eventMessages(string(store.EventRunTimedOut)), func(m string) bool {
			return !strings.Contains(m, "egg timeout") || !strings.Contains(m, "timeout of 2s")
		})); n < 2 {
			t.Errorf("%d run.timed_out events of egg timeout, want at least 2", n)
		}
	})

	t.Run("each started run has exactly one container, and every container is a recorded run's", func(t *testing.T) {
		c.checkOneContainerPerRun(t, runs, starts)
	})
}

// applyWithImage applies a hatch.yaml in which IMAGE stands for image.
func (c *cluster) applyWithImage(tb testing.TB, image, yaml string) {
	tb.Helper()
	c.mustHatch(nil, "apply", "-f", filepath.Join(writeProject(tb, map[string]string{"hatch.yaml": strings.ReplaceAll(yaml, "IMAGE", image)}), "hatch.yaml"), "--yes")
}

// eggRuns returns the project's runs (namespace default) by egg.
func (c *cluster) eggRuns(project string) map[string][]api.Run {
	c.t.Helper()
	var runs api.Runs
	c.getJSON("/api/v1/projects/default/"+project+"/runs", &runs)
	out := map[string][]api.Run{}
	for _, r := range runs.Runs {
		out[r.Egg] = append(out[r.Egg], r)
	}
	for _, l := range out {
		slices.SortFunc(l, func(a, b api.Run) int { return a.ScheduledAt.Compare(b.ScheduledAt) })
	}
	return out
}

// runStarts inspects every container of the project's runs on Docker (the
// run label), by run ID: each is one start of a run.
func (c *cluster) runStarts(t testing.TB, project string) map[string][]container.InspectResponse {
	t.Helper()
	out := map[string][]container.InspectResponse{}
	for _, s := range c.runContainerList(t, project, false) {
		ctr, err := c.scope.Client.ContainerInspect(t.Context(), s.ID)
		if err != nil {
			t.Fatal(err)
		}
		id := s.Labels[containers.LabelRun]
		out[id] = append(out[id], ctr)
	}
	return out
}

// checkOneContainerPerRun checks that each run recorded as started has
// exactly one container on Docker, that a run not started has none, and
// that no container is of a run not recorded.
func (c *cluster) checkOneContainerPerRun(t *testing.T, runs map[string][]api.Run, starts map[string][]container.InspectResponse) {
	t.Helper()
	recorded := map[string]bool{}
	for _, l := range runs {
		for _, r := range l {
			recorded[r.ID] = true
			if n := len(starts[r.ID]); (n != 1 && !r.StartedAt.IsZero()) || (n != 0 && r.StartedAt.IsZero() && r.Ended()) {
				t.Errorf("run %s of %s (tick %s, %s) has %d containers on Docker", r.ID, r.Egg, r.ScheduledAt.Format(time.TimeOnly), r.State, n)
			}
		}
	}
	for id, l := range starts {
		if !recorded[id] {
			t.Errorf("%d containers on Docker of run %s, which is not recorded", len(l), id)
		}
	}
}

// containerSpan is when a container started and finished (zero: still
// running).
func containerSpan(t testing.TB, ctr container.InspectResponse) [2]time.Time {
	t.Helper()
	started, err := time.Parse(time.RFC3339Nano, ctr.State.StartedAt)
	if err != nil {
		t.Fatalf("container %s: started at %q: %v", ctr.ID, ctr.State.StartedAt, err)
	}
	var finished time.Time
	if !ctr.State.Running {
		if finished, err = time.Parse(time.RFC3339Nano, ctr.State.FinishedAt); err != nil {
			t.Fatalf("container %s: finished at %q: %v", ctr.ID, ctr.State.FinishedAt, err)
		}
	}
	return [2]time.Time{started, finished}
}

// countState counts the runs in state.
func countState(runs []api.Run, state string) int {
	n := 0
	for _, r := range runs {
		if r.State == state {
			n++
		}
	}
	return n
}

// describeRuns is one line per run: tick, trigger, state, start and end.
func describeRuns(runs []api.Run) string {
	var b strings.Builder
	for _, r := range runs {
		fmt.Fprintf(&b, "\n  %s tick %s %s %s started %s ended %s", r.ID, r.ScheduledAt.Format("15:04:05.000"), r.Trigger, r.State,
			r.StartedAt.Format("15:04:05.000"), r.EndedAt.Format("15:04:05.000"))
	}
	return b.String()
}

// scheduleAccuracyRuns is how many ticks BenchmarkScheduleAccuracy times:
// as many as fit about 70 s of every 2s.
const scheduleAccuracyRuns = 35

// BenchmarkScheduleAccuracy is issue 28's figure of the scheduler: a
// schedule of every 2 s (concurrency allow, so that no tick waits for the
// record of the previous run's end) on one real control plane and agent,
// and each run's container start on Docker (its StartedAt) against its
// scheduled tick, over scheduleAccuracyRuns ticks: p50 and p99 in ms, and
// p99 over the goal of 1 s (≤ 1 meets it). The run records' own started_at
// is logged beside it, and each tick's lateness in order. Every 1s was
// tried: on this shared 2-core machine the runs fell behind (53 of 60
// started in 90 s, p50 3.5 s late), so it is every 2s.
func BenchmarkScheduleAccuracy(b *testing.B) {
	c := newCluster(b, clusterOptions{agents: []string{"a"}})
	image := dockertest.Image(b, dockertest.ImageSpec{})
	c.applyWithImage(b, image, `project: accuracy
eggs:
  tick:
    image: IMAGE
    pull: missing
    env: {APP_JOB: "1"}
    schedule: {every: 2s, concurrency: allow, keep_runs: 100}
`)
	for b.Loop() {
		var runs []api.Run
		dockertest.Eventually(b, 90*time.Second, time.Second, func() error {
			runs = slices.DeleteFunc(c.eggRuns("accuracy")["tick"], func(r api.Run) bool { return r.StartedAt.IsZero() })
			if len(runs) < scheduleAccuracyRuns {
				return fmt.Errorf("%d runs started of %d", len(runs), scheduleAccuracyRuns)
			}
			return nil
		})
		runs = runs[:scheduleAccuracyRuns]
		starts := c.runStarts(b, "accuracy")
		var onDocker, recorded []time.Duration
		var inOrder strings.Builder // each tick's lateness, in the ticks' order
		for _, r := range runs {
			if len(starts[r.ID]) != 1 {
				b.Fatalf("run %s has %d containers on Docker, want 1", r.ID, len(starts[r.ID]))
			}
			onDocker = append(onDocker, containerSpan(b, starts[r.ID][0])[0].Sub(r.ScheduledAt))
			recorded = append(recorded, r.StartedAt.Sub(r.ScheduledAt))
			fmt.Fprintf(&inOrder, " %.1f", onDocker[len(onDocker)-1].Seconds())
		}
		b.Logf("each tick's container start after it, in s, in the ticks' order:%s", inOrder.String())
		slices.Sort(onDocker)
		slices.Sort(recorded)
		p50, p99 := percentile(onDocker, .5), percentile(onDocker, .99)
		b.Logf("container start after its tick over %d ticks of every 2s: p50 %v, p99 %v, slowest %v (the run records' started_at: p50 %v, p99 %v)",
			len(runs), p50, p99, onDocker[len(onDocker)-1], percentile(recorded, .5), percentile(recorded, .99))
		b.ReportMetric(millis(p50), "p50-ms")
		b.ReportMetric(millis(p99), "p99-ms")
		b.ReportMetric(millis(p99)/1000, "p99/1000ms")
	}
}
