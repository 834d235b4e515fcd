package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/containers/fake"
	"github.com/hatchery/hatchery/internal/contract"
)

// staleCacheHost sets up issue 15's finding: the host runs v2 (three web
// replicas and a stateful db), but the cache still holds v1, written before
// any of v2's containers were created (the write of v2 failed).
func staleCacheHost(t *testing.T, f *fake.Fake, dir string) (v1, v2 contract.DesiredState) {
	t.Helper()
	db := contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: "db", Image: "db:1", Replicas: 1, Port: 5432,
		Rollout: contract.Rollout{Order: contract.StopFirst}}
	v1 = desiredState(web(3), db)
	web2, db2 := web(3), db
	web2.Image, db2.Image = "web:2", "db:2"
	v2 = desiredState(web2, db2)

	c, err := OpenCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Save(v1, f.Now().Add(-time.Minute), 0); err != nil {
		t.Fatal(err)
	}
	for _, w := range v2.Workloads {
		for slot := range w.Replicas {
			f.Add(containers.Container{Labels: containers.Labels(testHost, w, slot, contract.SpecHash(w)),
				State: contract.StateRunning, Healthy: true})
		}
	}
	return v1, v2
}

// changes lists the lifecycle events since the first n, but exits.
func changes(f *fake.Fake, n int) []fake.Event {
	var out []fake.Event
	for _, e := range f.Events()[n:] {
		if e.Kind != fake.EventExit {
			out = append(out, e)
		}
	}
	return out
}

func TestAStaleCacheRollsNothingBackWhileTheControlPlaneIsDown(t *testing.T) {
	f, cp, dir := newFake(t), newFakeControlPlane(), t.TempDir()
	v1, v2 := staleCacheHost(t, f, dir)
	cp.setDown(true)
	before := len(f.Events())
	cfg := testConfig(t, f, cp, dir)
	cfg.StaleCacheWait = 600 * time.Millisecond
	a := startAgent(t, cfg)

	eventually(t, "a report of v2's containers", func() error {
		r, ok := a.Status()
		if !ok || len(r.Containers) != 4 {
			return fmt.Errorf("report %+v", r)
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond) // within the wait: several converges
	if ev := changes(f, before); len(ev) != 0 {
		t.Fatalf("converging from a cache older than the containers changed them: %+v", ev)
	}
	for _, w := range v2.Workloads {
		if n := running(f.All(), w); n != w.Replicas {
			t.Fatalf("%s: %d of v2 running", w.Egg, n)
		}
	}
	// The wait is a bound: with the control plane still silent after it,
	// the cache is all the agent has, and it converges to it.
	eventually(t, "the cache's state once the wait is over", func() error {
		a.Notify() // the fake's instant tasks fire no change signal
		for _, w := range v1.Workloads {
			if n := running(f.All(), w); n != w.Replicas {
				return fmt.Errorf("%s: %d of v1 running", w.Egg, n)
			}
		}
		return nil
	})
}

func TestAStaleCacheRollsNothingBackBeforeTheControlPlaneAnswers(t *testing.T) {
	f, cp, dir := newFake(t), newFakeControlPlane(), t.TempDir()
	_, v2 := staleCacheHost(t, f, dir)
	cp.set(v2)
	cp.delay = 300 * time.Millisecond // the first converge comes before the answer
	before := len(f.Events())
	a := startAgent(t, testConfig(t, f, cp, dir))

	eventually(t, "v2 from the control plane, and cached", func() error {
		if d, ok := a.Desired(); !ok || d.Version != v2.Version {
			return fmt.Errorf("holds %q", d.Version)
		}
		c, err := OpenCache(dir)
		if err != nil {
			return err
		}
		got, ok, err := c.Load()
		if err != nil || !ok || got.State.Version != v2.Version {
			return fmt.Errorf("cache holds %q (%v)", got.State.Version, err)
		}
		return nil
	})
	time.Sleep(100 * time.Millisecond) // a converge towards v2
	if ev := changes(f, before); len(ev) != 0 {
		t.Fatalf("the agent changed containers the control plane wants as they are: %+v", ev)
	}
}

func TestACacheWriteThatFailsIsRetriedAndReported(t *testing.T) {
	f, cp, dir := newFake(t), newFakeControlPlane(), t.TempDir()
	w := web(2)
	cp.set(desiredState(w))
	cfg := testConfig(t, f, cp, dir)
	cfg.CacheRetryInterval = 50 * time.Millisecond
	a := startAgent(t, cfg)
	eventually(t, "two replicas", func() error {
		if n := running(f.All(), w); n != 2 {
			return fmt.Errorf("%d running", n)
		}
		return nil
	})

	// The cache can no longer be replaced: a directory stands in its way.
	path := filepath.Join(dir, cacheFile)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(path, "blocker"), 0o700); err != nil {
		t.Fatal(err)
	}
	w2 := w
	w2.Image = "web:2"
	v2 := desiredState(w2)
	cp.set(v2)
	eventually(t, "v2 rolled, and the failed write in the report", func() error {
		a.Notify() // the fake's instant tasks fire no change signal
		if n := running(f.All(), w2); n != 2 {
			return fmt.Errorf("%d of v2 running", n)
		}
		r, _ := cp.lastReport()
		if !slices.ContainsFunc(r.Errors, func(e string) bool {
			return strings.Contains(e, "desired-state cache") && strings.Contains(e, "retrying")
		}) {
			return fmt.Errorf("report errors %q", r.Errors)
		}
		return nil
	})

	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	eventually(t, "v2 cached once the write works, and the error gone", func() error {
		c, err := OpenCache(dir)
		if err != nil {
			return err
		}
		got, ok, err := c.Load()
		if err != nil || !ok || got.State.Version != v2.Version {
			return fmt.Errorf("cache holds %q (ok %v, %v)", got.State.Version, ok, err)
		}
		if r, _ := a.Status(); len(r.Errors) != 0 {
			return fmt.Errorf("errors %q", r.Errors)
		}
		return nil
	})
}

// pausingDocker calls pause the first time the agent tells it the desired
// workloads: in the middle of a converge, after the desired state was read.
type pausingDocker struct {
	containers.Client
	once  sync.Once
	pause func()
}

func (d *pausingDocker) SetWorkloads([]contract.WorkloadSpec) { d.once.Do(d.pause) }

// The control plane's first answer can land while the first converge, from
// the stale cache, is under way: that converge must keep its hold. Seen in
// the full-data-dir chaos test, once: the hold was read after the answer had
// lifted it, and the cache's state was converged towards without it, which
// replaced the stateful replica newer than the cache.
func TestAStaleCacheRollsNothingBackWhenTheControlPlaneAnswersMidConverge(t *testing.T) {
	f, cp, dir := newFake(t), newFakeControlPlane(), t.TempDir()
	_, v2 := staleCacheHost(t, f, dir)
	cp.set(v2)
	cp.setDown(true) // until the first converge has read the cache's state
	before := len(f.Events())
	var agent atomic.Pointer[Agent]
	docker := &pausingDocker{Client: f, pause: func() {
		cp.setDown(false)
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if d, ok := agent.Load().Desired(); ok && d.Version == v2.Version {
				return
			}
			time.Sleep(time.Millisecond)
		}
		t.Error("the control plane's state never reached the agent")
	}}
	a, err := New(testConfig(t, docker, cp, dir))
	if err != nil {
		t.Fatal(err)
	}
	agent.Store(a)
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			t.Errorf("close agent: %v", err)
		}
	})

	eventually(t, "a report from a converge towards v2", func() error {
		if r, _ := cp.lastReport(); r.Version != v2.Version {
			return fmt.Errorf("last report of version %q", r.Version)
		}
		return nil
	})
	if ev := changes(f, before); len(ev) != 0 {
		t.Fatalf("a converge from the cache, answered mid-way, changed containers newer than the cache: %+v", ev)
	}
}

// Issue 26's finding: the cache write of v2 fails (a full disk), the host
// rolls to v2 anyway, and the agent restarts with the control plane down.
// However long it stays down (no StaleCacheWait at all here), the agent
// converges nothing of v1, the older cache: v2's containers carry a later
// generation than the cache, so every change is held and the report says
// why; a crashed v2 replica is still restarted in place. Once the control
// plane answers, the hold ends and the state it sends is cached at a
// generation above every container's.
func TestACacheOlderThanTheContainersRollsNothingBackHoweverLongTheControlPlaneIsDown(t *testing.T) {
	f, cp, dir := newFake(t), newFakeControlPlane(), t.TempDir()
	w1 := web(3)
	cp.set(desiredState(w1))
	a1, err := New(testConfig(t, f, cp, dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := a1.Start(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, cacheFile)
	var v1Cache []byte
	eventually(t, "v1 running and cached", func() error {
		a1.Notify() // the fake's instant tasks fire no change signal
		if n := running(f.All(), w1); n != 3 {
			return fmt.Errorf("%d of v1 running", n)
		}
		v1Cache, err = os.ReadFile(path)
		return err
	})

	// The cache can no longer be replaced (a directory stands in its way,
	// as a full disk would): v2 rolls all the same.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(path, "blocker"), 0o700); err != nil {
		t.Fatal(err)
	}
	w2 := w1
	w2.Image = "web:2"
	v2 := desiredState(w2)
	cp.set(v2)
	eventually(t, "v2 rolled", func() error {
		a1.Notify()
		for _, c := range f.All() {
			if c.SpecHash != contract.SpecHash(w2) || c.State != contract.StateRunning {
				return fmt.Errorf("%s: spec %s, %s", c.ID, c.SpecHash, c.State)
			}
		}
		if n := running(f.All(), w2); n != 3 {
			return fmt.Errorf("%d of v2 running", n)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The agent is gone; the disk holds the cache the failed write left.
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, v1Cache, 0o600); err != nil {
		t.Fatal(err)
	}
	v2Containers := f.All()

	cp.setDown(true)
	cfg := testConfig(t, f, cp, dir)
	cfg.StaleCacheWait = 0
	before := len(f.Events())
	a2 := startAgent(t, cfg)
	holding := func() error {
		r, ok := a2.Status()
		if !ok || !slices.ContainsFunc(r.Errors, func(e string) bool {
			return strings.Contains(e, "older than 3 containers created for version "+v2.Version)
		}) {
			return fmt.Errorf("report errors %q", r.Errors)
		}
		return nil
	}
	eventually(t, "the hold in the report", holding)
	// Ten more converges, each seen as a new report.
	for range 10 {
		last, _ := a2.Status()
		a2.Notify()
		eventually(t, "one more converge", func() error {
			if r, _ := a2.Status(); !r.Time.After(last.Time) {
				return errors.New("no new report yet")
			}
			return holding()
		})
	}
	if ev := changes(f, before); len(ev) != 0 {
		t.Fatalf("converging from the older cache changed containers: %+v", ev)
	}

	// A crashed v2 replica comes back in place, still v2.
	if err := f.Crash(v2Containers[1].ID, 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the crashed v2 replica restarted in place", func() error {
		a2.Notify()
		if n := running(f.All(), w2); n != 3 {
			return fmt.Errorf("%d of v2 running", n)
		}
		return nil
	})
	for _, e := range changes(f, before) {
		if e.Kind != fake.EventRestart {
			t.Errorf("while holding: %+v", e)
		}
	}
	if n := running(f.All(), w1); n != 0 {
		t.Fatalf("%d of v1 running", n)
	}

	cp.set(v2)
	cp.setDown(false)
	eventually(t, "v2 cached above the containers' generation, the hold over", func() error {
		a2.Notify()
		c, err := OpenCache(dir)
		if err != nil {
			return err
		}
		got, ok, err := c.Load()
		if err != nil || !ok || got.State.Version != v2.Version || got.Generation <= v2Containers[0].Stamp.Generation {
			return fmt.Errorf("cache holds %q at generation %d (containers at %d; %v)", got.State.Version, got.Generation,
				v2Containers[0].Stamp.Generation, err)
		}
		if r, _ := a2.Status(); len(r.Errors) != 0 {
			return fmt.Errorf("report errors %q", r.Errors)
		}
		return nil
	})
}
