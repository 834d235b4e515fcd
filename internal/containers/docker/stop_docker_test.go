//go:build docker

package docker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

func TestRestartInPlaceWithTheStopSignalSetAtCreate(t *testing.T) {
	v := newEnv(t)
	w := v.spec("web")
	w.StopSignal = "SIGUSR1"
	v.start(w, 0, "")
	before := v.waitFor("healthy", func(cs []containers.Container) bool { return allHealthy(cs, "web", 1) })[0]
	req := containers.RestartRequest{ID: before.ID, WorkloadID: before.WorkloadID, StartedAt: before.StartedAt, StopTimeout: 5 * time.Second}
	if err := v.e.Restart(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	after := v.waitFor("restarted and healthy", func(cs []containers.Container) bool {
		return allHealthy(cs, "web", 1) && cs[0].StartedAt.After(before.StartedAt)
	})[0]
	if after.ID != before.ID || after.Name != before.Name {
		t.Fatalf("restart replaced the container: %s -> %s", before.ID, after.ID)
	}
	logs, err := v.e.Logs(t.Context(), after.ID, 50)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(logs, func(l string) bool { return strings.Contains(l, "received SIGUSR1, shutting down") }) {
		t.Errorf("the restart did not stop the app with its stop signal; log:\n%s", strings.Join(logs, "\n"))
	}
	// Asked again with what the caller saw before: someone got there first.
	if err := v.e.Restart(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if c := v.list()[0]; !c.StartedAt.Equal(after.StartedAt) {
		t.Errorf("a stale restart request restarted the container again")
	}
}

func TestStopKillsAfterTheTimeout(t *testing.T) {
	v := newEnv(t)
	w := v.spec("web")
	w.Env["APP_IGNORE_STOP"] = "1"
	v.start(w, 0, "")
	c := v.waitFor("healthy", func(cs []containers.Container) bool { return allHealthy(cs, "web", 1) })[0]
	start := time.Now()
	if err := v.e.Stop(t.Context(), containers.StopRequest{ID: c.ID, StopTimeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	v.gone(c.ID)
	if took := time.Since(start); took < time.Second || took > 8*time.Second {
		t.Errorf("stop of a container ignoring its signal took %s, want the 1s timeout then a kill", took)
	}
}

// recordingIngress is an ingress whose drains end when the test says so.
type recordingIngress struct {
	idle chan struct{}
	// running, if set, tells whether a container still runs: a Gone that
	// comes while it does is recorded as "gone <id> while running".
	running func(id string) bool
	mu      sync.Mutex // guards calls
	// calls, in order: "drain <id>", "gone <id>".
	calls []string
}

func (r *recordingIngress) Drain(ctx context.Context, id string) error {
	r.record("drain " + id)
	select {
	case <-r.idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *recordingIngress) Gone(id string) {
	if r.running != nil && r.running(id) {
		r.record("gone " + id + " while running")
		return
	}
	r.record("gone " + id)
}

func (r *recordingIngress) record(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, s)
}

func (r *recordingIngress) log() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// waitCalls waits until the ingress was called as many times as want, then
// checks the calls were want. Gone comes once the container is removed,
// so a moment after it is.
func (r *recordingIngress) waitCalls(t *testing.T, want ...string) {
	t.Helper()
	dockertest.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if got := r.log(); len(got) < len(want) {
			return fmt.Errorf("ingress calls %v so far, want %v", got, want)
		}
		return nil
	})
	if got := r.log(); !slices.Equal(got, want) {
		t.Errorf("ingress calls %v, want %v (a Gone while the container ran cuts its connections before its stop signal)", got, want)
	}
}

// TestDrainWaitsForTheIngressThenStops: the container is stopped once the
// ingress says it is idle, or at the drain timeout, and only once it has
// stopped is the ingress told it is gone: connections still open at the
// drain timeout are the application's to close on its stop signal.
func TestDrainWaitsForTheIngressThenStops(t *testing.T) {
	ing := &recordingIngress{idle: make(chan struct{})}
	v := newEnv(t, func(c *Config) { c.Ingress = ing })
	running := func(id string) bool {
		c, err := v.s.Client.ContainerInspect(context.Background(), id)
		return err == nil && c.State != nil && c.State.Running
	}
	ing.running = running
	for slot := range 2 {
		v.start(v.spec("web"), slot, "")
	}
	cs := v.waitFor("two healthy", func(cs []containers.Container) bool { return allHealthy(cs, "web", 2) })

	// Idle after 700ms, well within the drain timeout.
	start := time.Now()
	if err := v.e.Drain(t.Context(), containers.StopRequest{ID: cs[0].ID, DrainTimeout: 20 * time.Second, StopTimeout: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if c := v.list(); c[0].State != contract.StateDraining || c[0].Healthy {
		t.Errorf("a container being drained shows %s healthy=%v", c[0].State, c[0].Healthy)
	}
	if _, err := v.s.Client.ContainerInspect(t.Context(), cs[0].ID); err != nil {
		t.Fatal("the container was stopped before the ingress said it was idle")
	}
	time.Sleep(400 * time.Millisecond)
	close(ing.idle)
	v.gone(cs[0].ID)
	if took := time.Since(start); took < 700*time.Millisecond || took > 10*time.Second {
		t.Errorf("drain took %s", took)
	}
	ing.waitCalls(t, "drain "+cs[0].ID, "gone "+cs[0].ID)

	// An ingress that never goes idle: the drain timeout bounds the wait.
	ing2 := &recordingIngress{idle: make(chan struct{}), running: running}
	v.e.cfg.Ingress = ing2
	start = time.Now()
	if err := v.e.Drain(t.Context(), containers.StopRequest{ID: cs[1].ID, DrainTimeout: time.Second, StopTimeout: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	v.gone(cs[1].ID)
	if took := time.Since(start); took < time.Second || took > 10*time.Second {
		t.Errorf("drain with a 1s timeout and a busy ingress took %s", took)
	}
	ing2.waitCalls(t, "drain "+cs[1].ID, "gone "+cs[1].ID)
}

// A restart (for failed checks: the container may still serve) drains
// first, and the ingress hears it is gone only once it stopped. A paused
// container shows paused and not healthy, and restarts like any other.
func TestRestartDrainsFirstAndRestartsAPausedContainer(t *testing.T) {
	ing := &recordingIngress{idle: make(chan struct{})}
	close(ing.idle) // nothing in flight: the drain ends at once
	v := newEnv(t, func(c *Config) { c.Ingress = ing })
	ing.running = func(id string) bool {
		c, err := v.s.Client.ContainerInspect(context.Background(), id)
		return err == nil && c.State != nil && c.State.Running
	}
	v.start(v.spec("web"), 0, "")
	before := v.waitFor("healthy", func(cs []containers.Container) bool { return allHealthy(cs, "web", 1) })[0]

	if err := v.s.Client.ContainerPause(t.Context(), before.ID); err != nil {
		t.Fatal(err)
	}
	paused := v.waitFor("paused and not healthy", func(cs []containers.Container) bool {
		return len(cs) == 1 && cs[0].Paused && !cs[0].Healthy && cs[0].State == contract.StateRunning
	})[0]
	req := containers.RestartRequest{ID: paused.ID, WorkloadID: paused.WorkloadID, StartedAt: paused.StartedAt,
		StopTimeout: 2 * time.Second, DrainTimeout: 5 * time.Second}
	if err := v.e.Restart(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	after := v.waitFor("restarted, unpaused and healthy", func(cs []containers.Container) bool {
		return allHealthy(cs, "web", 1) && !cs[0].Paused && cs[0].StartedAt.After(before.StartedAt)
	})[0]
	if after.ID != before.ID {
		t.Fatalf("restart replaced the container: %s -> %s", before.ID, after.ID)
	}
	ing.waitCalls(t, "drain "+before.ID, "gone "+before.ID)
}

// A stop-first start drains the container it replaces before its stop
// signal, as Drain does: the old container runs until the ingress says its
// requests in flight are done, and the ingress hears it is gone once it
// stopped. Stopping it undrained cut those requests (and a write on its
// volume among them).
func TestAStopFirstReplaceDrainsTheOldContainerFirst(t *testing.T) {
	ing := &recordingIngress{idle: make(chan struct{})}
	v := newEnv(t, func(c *Config) { c.Ingress = ing })
	ing.running = func(id string) bool {
		c, err := v.s.Client.ContainerInspect(context.Background(), id)
		return err == nil && c.State != nil && c.State.Running
	}
	w := v.spec("db")
	w.Rollout.DrainTimeout = 20 * time.Second
	v.start(w, 0, "")
	old := v.waitFor("healthy", func(cs []containers.Container) bool { return allHealthy(cs, "db", 1) })[0]

	w2 := w
	w2.Env = map[string]string{"APP_VERSION": "v2"}
	v.start(w2, 0, old.ID)
	dockertest.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		if !slices.Contains(ing.log(), "drain "+old.ID) {
			return fmt.Errorf("ingress calls %v, want a drain of the replaced container", ing.log())
		}
		return nil
	})
	if !ing.running(old.ID) {
		t.Fatal("the replaced container was stopped before the ingress said its requests were done")
	}
	close(ing.idle)
	v.gone(old.ID)
	v.waitFor("the new container healthy", func(cs []containers.Container) bool {
		return allHealthy(cs, "db", 1) && cs[0].ID != old.ID
	})
	ing.waitCalls(t, "drain "+old.ID, "gone "+old.ID)
}
