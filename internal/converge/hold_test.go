package converge

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/hatchery/hatchery/internal/containers"
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
