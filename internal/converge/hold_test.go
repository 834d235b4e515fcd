package converge

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/containers/fake"
	"github.com/hatchery/hatchery/internal/contract"
)

// The finding: the cache holds v1, the host runs v2 (the cache write failed
// while it converged to v2). Converging from the cache would roll every
// replica back and replace the stateful egg on its volume; held, the plan
// touches none of the containers newer than the cache.
func TestHoldKeepsContainersNewerThanTheCache(t *testing.T) {
	v1web, v1db := wl("web", 3), wl("db", 1, stateful)
	v2web, v2db := v1web, v1db
	v2web.Image, v2db.Image = "img:web-v3", "img:db-v3"
	extra := wl("cache", 1) // new in v2, unknown to the cache
	cacheWritten := t0.Add(-10 * time.Minute)
	young := created(5 * time.Minute) // made after the cache was written
	actual := []containers.Container{
		ctr("w0", v2web, 0, up(v2web), contract.StateRunning, young),
		ctr("w1", v2web, 1, up(v2web), contract.StateRunning, young),
		ctr("w2", v2web, 2, up(v2web), contract.StateCrashed, young),
		ctr("d0", v2db, 0, up(v2db), contract.StateRunning, young),
		ctr("x0", extra, 0, up(extra), contract.StateRunning, young),
	}
	cached := desiredOf(v1web, v1db)
	h := healthySince(time.Hour, "w0", "w1", "d0", "x0")

	plan := Diff(cached, actual, h, t0)
	if len(plan.Steps) == 0 {
		t.Fatal("Diff plans nothing against the stale cache: the test shows nothing")
	}
	held := Hold(plan, actual, host, cacheWritten)
	equalSteps(t, held, nil)
	if len(held.Held) != len(plan.Steps) {
		t.Errorf("held %d steps of %d", len(held.Held), len(plan.Steps))
	}

	// Containers older than the cache are not held: the cache knew them.
	held = Hold(plan, actual, host, t0.Add(-4*time.Minute))
	equalSteps(t, held, render(plan))
}

// A restart in place keeps the container's own spec, so it goes ahead: a
// replica killed while the control plane is down comes back from the cache.
func TestHoldLetsAYoungCrashedContainerRestart(t *testing.T) {
	w := wl("web", 2)
	actual := []containers.Container{
		ctr("a", w, 0, up(w), contract.StateRunning),
		ctr("b", w, 1, up(w), contract.StateCrashed),
	}
	plan := Hold(Diff(desiredOf(w), actual, healthySince(time.Hour, "a"), t0), actual, host, t0.Add(-time.Hour))
	equalSteps(t, plan, []string{"restart web/1 b"})
	if len(plan.Held) != 0 {
		t.Errorf("held %+v", plan.Held)
	}
}

// Hold's rule over arbitrary hosts and desired states: no step it keeps
// removes, rolls or replaces a container younger than since, or starts beside
// one; every step of the plan is either kept or held, in order; and the
// failures of workloads it held are not recorded.
func TestPropertyHoldNeverTouchesYoungContainers(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genScenario(t)
		for i := range s.actual {
			s.actual[i].Created = t0.Add(-time.Duration(rapid.IntRange(1, 120).Draw(t, "age-"+strconv.Itoa(i))) * time.Minute)
		}
		since := t0.Add(-time.Duration(rapid.IntRange(0, 121).Draw(t, "since")) * time.Minute)
		d := s.changed
		if rapid.Bool().Draw(t, "unchanged") {
			d = s.desired
		}
		plan := Diff(d, s.actual, NewHistory(), t0)
		got := Hold(plan, s.actual, host, since)

		type slotKey struct {
			w    string
			slot int
		}
		young, slots := map[string]bool{}, map[slotKey]bool{}
		for _, c := range s.actual {
			if containers.Owned(c.Labels, host) && c.ID != "" && c.Created.After(since) {
				young[c.ID] = true
				slots[slotKey{c.WorkloadID, c.Slot}] = true
			}
		}
		for _, st := range got.Steps {
			switch {
			case st.Action == ActionRestart:
			case st.Action == ActionStart || st.Action == ActionReplace:
				if slots[slotKey{st.WorkloadID, st.ReplicaIndex}] {
					t.Fatalf("kept %s beside a young container", st)
				}
				if young[st.ContainerID] {
					t.Fatalf("kept %s of a young container", st)
				}
			default:
				if young[st.ContainerID] {
					t.Fatalf("kept %s of a young container", st)
				}
			}
		}
		// Kept and held partition the plan's steps, each in its order.
		if len(got.Steps)+len(got.Held) != len(plan.Steps) {
			t.Fatalf("%d kept + %d held != %d planned", len(got.Steps), len(got.Held), len(plan.Steps))
		}
		ki, hi := 0, 0
		for _, st := range plan.Steps {
			switch {
			case ki < len(got.Steps) && got.Steps[ki] == st:
				ki++
			case hi < len(got.Held) && got.Held[hi] == st:
				hi++
			default:
				t.Fatalf("step %s neither kept nor held in order", st)
			}
		}
		// A step is held only for a reason.
		for _, st := range got.Held {
			if st.Action == ActionRestart || !(young[st.ContainerID] || slots[slotKey{st.WorkloadID, st.ReplicaIndex}]) {
				t.Fatalf("held %s without a young container", st)
			}
		}
		for _, f := range got.Failures {
			if slices.ContainsFunc(got.Held, func(st Step) bool { return st.WorkloadID == f.WorkloadID }) {
				t.Fatalf("failure %+v kept for a workload with held steps", f)
			}
		}
		if !got.WakeAt.Equal(plan.WakeAt) {
			t.Fatalf("WakeAt %v, want the plan's %v", got.WakeAt, plan.WakeAt)
		}
	})
}

// stamped labels a container as created for the desired state of
// generation gen.
func stamped(gen int64) ctrOpt {
	return func(c *containers.Container) {
		c.Labels = containers.StateStamp{Version: "v" + strconv.FormatInt(gen, 10), Generation: gen}.AddTo(c.Labels)
		c.Stamp = containers.StampFromLabels(c.Labels)
	}
}

// The finding of issue 26: the cache (generation 5) holds v1, the host runs
// containers made for v2 (generation 6), and they look older than the cache
// by the clock (here: created before it was written, as after a clock step
// or a StaleCacheWait long past). HoldNewer keeps every one of them, starts
// no v1 replica in any slot and no workload v2 removed, and still restarts
// a crashed container in place.
func TestHoldNewerKeepsContainersOfALaterStateWhateverTheirAge(t *testing.T) {
	v1web, v1db := wl("web", 3), wl("db", 1, stateful)
	gone := wl("gone", 1) // in the cache; v2 removed it
	v2web, v2db := v1web, v1db
	v2web.Image, v2db.Image = "img:web-v3", "img:db-v3"
	v2web.Replicas = 2 // v2 scaled down: the cache would start slot 2 at v1
	old := created(time.Hour)
	actual := []containers.Container{
		ctr("w0", v2web, 0, up(v2web), contract.StateRunning, old, stamped(6)),
		ctr("w1", v2web, 1, up(v2web), contract.StateCrashed, old, stamped(6)),
		ctr("d0", v2db, 0, up(v2db), contract.StateRunning, old, stamped(6)),
	}
	h := healthySince(time.Hour, "w0", "d0")
	plan := Diff(desiredOf(v1web, v1db, gone), actual, h, t0)
	if len(plan.Steps) < 4 {
		t.Fatalf("Diff plans %q against the stale cache: the test shows nothing", render(plan))
	}

	held := HoldNewer(plan, actual, host, 5, h, t0)
	equalSteps(t, held, []string{"restart web/1 w1"})
	if len(held.Held) != len(plan.Steps) || len(held.Failures) != 0 {
		t.Errorf("held %d of %d steps, failures %+v", len(held.Held), len(plan.Steps), held.Failures)
	}
	if len(held.Newer) != 3 {
		t.Errorf("newer containers %d, want 3", len(held.Newer))
	}

	// The cache at generation 6 knew these containers: nothing is held.
	same := HoldNewer(plan, actual, host, 6, h, t0)
	equalSteps(t, same, render(plan))
	if len(same.Held) != 0 || len(same.Newer) != 0 {
		t.Errorf("held %v, newer %v at the containers' own generation", same.Held, same.Newer)
	}
	// Containers of an older agent (no stamp) or another host never hold.
	unstamped := []containers.Container{ctr("w0", v2web, 0, up(v2web), contract.StateRunning)}
	equalSteps(t, HoldNewer(plan, unstamped, "h2", 0, h, t0), render(plan))
	equalSteps(t, HoldNewer(plan, unstamped, host, 0, h, t0), render(plan))
}

// Converge end to end on the fake: the host converged to v2 (generation 6),
// then a converge from a cache of v1 (generation 5) runs for ten minutes of
// simulated time, through a crash: no v1 container is ever created, the v2
// replicas stay (the crashed one restarted in place), and every container
// carries the stamp of the state that made it.
func TestConvergeFromAnOlderCacheStartsNothingOfIt(t *testing.T) {
	v1 := wl("web", 3)
	v2 := v1
	v2.Image = "img:web-v3"
	s := newSim(t, v2)
	opts := testOptions(t)
	opts.Stamp = containers.StateStamp{Version: "v2", Generation: 6}
	for range 60 {
		if _, err := Converge(context.Background(), s.f, s.desired, s.h, s.f.Now(), opts); err != nil {
			t.Fatal(err)
		}
		s.f.Advance(time.Second)
	}
	before := s.list()
	if len(before) != 3 {
		t.Fatalf("%d containers after the v2 roll, want 3", len(before))
	}
	for _, c := range before {
		if c.Stamp != opts.Stamp || c.SpecHash != up(v2) {
			t.Fatalf("container %s: stamp %+v, spec %s; want %+v, %s", c.ID, c.Stamp, c.SpecHash, opts.Stamp, up(v2))
		}
	}
	if err := s.f.Crash(before[1].ID, 1); err != nil {
		t.Fatal(err)
	}

	cached := desiredOf(v1)
	cacheOpts := testOptions(t)
	cacheOpts.Stamp, cacheOpts.FromCache = containers.StateStamp{Version: "v1", Generation: 5}, true
	seen := 0
	for range 600 {
		plan, err := Converge(context.Background(), s.f, cached, s.h, s.f.Now(), cacheOpts)
		if err != nil {
			t.Fatal(err)
		}
		if len(plan.Newer) > 0 {
			seen++
		}
		s.f.Advance(time.Second)
	}
	for _, e := range s.f.Events() {
		if e.Kind == fake.EventCreate && e.SpecHash == up(v1) {
			t.Fatalf("a v1 container was created from the older cache: %+v", e)
		}
	}
	if seen != 600 {
		t.Errorf("%d converges of 600 found the containers newer than the cache", seen)
	}
	after := s.list()
	if len(after) != 3 {
		t.Fatalf("%d containers, want the 3 of v2", len(after))
	}
	for i, c := range after {
		if c.ID != before[i].ID || c.SpecHash != up(v2) || c.State != contract.StateRunning {
			t.Errorf("slot %d: %s %s %s, want %s of v2 running", c.Slot, c.ID, c.SpecHash, c.State, before[i].ID)
		}
	}
}
