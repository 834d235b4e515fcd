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

// TestDiffWakesWhenAWaitEnds: every decision Diff defers by the clock says
// when it will change, so the agent converges then and not on its next
// periodic tick (a crash-loop restart once waited up to 30 s for it).
func TestDiffWakesWhenAWaitEnds(t *testing.T) {
	web := wl("web", 1)
	slow := wl("web", 1, func(w *contract.WorkloadSpec) { w.Rollout.MinReady = 20 * time.Second })
	patient := wl("web", 1, func(w *contract.WorkloadSpec) { w.Health.StartPeriod = 30 * time.Second })
	tests := []struct {
		name    string
		w       contract.WorkloadSpec
		actual  []containers.Container
		history map[string]ContainerHistory
		want    time.Time // zero: nothing waits on the clock
	}{
		{
			name: "crash-loop back-off: the second restart waits 1 s after the last",
			w:    web,
			actual: []containers.Container{ctr("c1", web, 0, up(web), contract.StateCrashed,
				func(c *containers.Container) { c.FinishedAt = t0.Add(-200 * time.Millisecond) })},
			history: map[string]ContainerHistory{"c1": {Restarts: 1, LastRestart: t0.Add(-1500 * time.Millisecond)}},
			// The exit is later than the last restart: the back-off counts from it.
			want: t0.Add(-200 * time.Millisecond).Add(BackoffBase),
		},
		{
			name: "min_ready: the stale container goes once the replacement has been healthy 20 s",
			w:    slow,
			actual: []containers.Container{
				ctr("old", slow, 0, old, contract.StateRunning),
				ctr("new", slow, 0, up(slow), contract.StateRunning, created(5*time.Second)),
			},
			history: map[string]ContainerHistory{"new": {HealthySince: t0.Add(-5 * time.Second), HealthyStart: t0.Add(-5 * time.Second)}},
			want:    t0.Add(15 * time.Second),
		},
		{
			name: "progress deadline: a booting replacement failing its checks fails when its deadline passes",
			w:    web,
			actual: []containers.Container{
				ctr("old", web, 0, old, contract.StateRunning),
				ctr("new", web, 0, up(web), contract.StateRunning, created(time.Minute), unhealthy(1)),
			},
			want: t0.Add(-time.Minute).Add(contract.DefaultProgressDeadline),
		},
		{
			name:    "start period: failures stop being forgiven when it ends",
			w:       patient,
			actual:  []containers.Container{ctr("c1", patient, 0, up(patient), contract.StateRunning, created(10*time.Second), unhealthy(5))},
			history: map[string]ContainerHistory{"c1": {HealthyStart: t0.Add(-10 * time.Second)}},
			want:    t0.Add(20 * time.Second),
		},
		{
			name:   "a healthy, up-to-date slot waits on nothing",
			w:      web,
			actual: []containers.Container{ctr("c1", web, 0, up(web), contract.StateRunning)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewHistory()
			for id, ch := range tt.history {
				h.Containers[id] = ch
			}
			p := Diff(desiredOf(tt.w), tt.actual, h, t0)
			if !p.WakeAt.Equal(tt.want) {
				t.Fatalf("WakeAt = %v, want %v (plan %v)", p.WakeAt, tt.want, render(p))
			}
			if !tt.want.IsZero() {
				// Just before, the decision still waits; at WakeAt it is made.
				before := Diff(desiredOf(tt.w), tt.actual, h, tt.want.Add(-time.Millisecond))
				at := Diff(desiredOf(tt.w), tt.actual, h, tt.want)
				if !slices.Equal(render(before), render(p)) || slices.Equal(render(at), render(p)) {
					t.Fatalf("plan at t0 %v, just before WakeAt %v, at WakeAt %v: want the change exactly at WakeAt",
						render(p), render(before), render(at))
				}
			}
		})
	}
}

// TestPropertyNothingChangesBeforeWakeAt: for any host, history and time,
// Diff's decisions stay the same at every moment before the WakeAt it gave
// (or for an hour, if it gave none). A clock-driven decision that WakeAt
// missed would leave the agent idle until its periodic tick.
func TestPropertyNothingChangesBeforeWakeAt(t *testing.T) {
	// A missed wake-up shows in a few cases in a thousand: ten rounds of
	// rapid's hundred.
	for range 10 {
		rapid.Check(t, nothingChangesBeforeWakeAt)
	}
}

func nothingChangesBeforeWakeAt(t *rapid.T) {
	s := genScenario(t)
	rehash := map[string]string{} // a container up to date before the edit stays so
	for i := range s.desired.Workloads {
		w := &s.desired.Workloads[i]
		before := up(*w)
		w.Rollout.MinReady = time.Duration(rapid.IntRange(0, 60).Draw(t, "min-ready")) * time.Second
		w.Health.StartPeriod = time.Duration(rapid.IntRange(0, 60).Draw(t, "start-period")) * time.Second
		rehash[before] = up(*w)
	}
	h := NewHistory()
	for i := range s.actual {
		c := &s.actual[i]
		c.ID = "x" + strconv.Itoa(i)
		if h, ok := rehash[c.SpecHash]; ok {
			c.SpecHash = h
		}
		age := time.Duration(rapid.IntRange(0, 600).Draw(t, "age")) * time.Second
		c.Created, c.StartedAt = t0.Add(-age), t0.Add(-age)
		if c.State == contract.StateRunning && !c.Healthy {
			c.FailingStreak = rapid.IntRange(0, 5).Draw(t, "failing")
		}
		if rapid.Bool().Draw(t, "has-history") {
			ch := ContainerHistory{
				Restarts:    rapid.IntRange(0, 12).Draw(t, "restarts"),
				LastRestart: t0.Add(-time.Duration(rapid.IntRange(0, 600).Draw(t, "since-restart")) * time.Second),
			}
			if rapid.Bool().Draw(t, "was-healthy") {
				ch.HealthyStart = c.StartedAt
				if c.Healthy {
					ch.HealthySince = t0.Add(-time.Duration(rapid.IntRange(0, 120).Draw(t, "healthy-for")) * time.Second)
				}
			}
			h.Containers[c.ID] = ch
		}
	}
	p := Diff(s.desired, s.actual, h, t0)
	limit := p.WakeAt
	if limit.IsZero() {
		limit = t0.Add(time.Hour)
	}
	if !limit.After(t0) {
		t.Fatalf("WakeAt %v is not in the future", p.WakeAt)
	}
	// rapid draws small numbers most often: check the last moment before
	// the limit and the middle too, not only a drawn one.
	span := limit.Sub(t0)
	drawn := time.Duration(rapid.Int64Range(1, int64(span)-1).Draw(t, "later"))
	for _, d := range []time.Duration{drawn, span / 2, span - time.Millisecond} {
		if d <= 0 {
			continue
		}
		if q := Diff(s.desired, s.actual, h, t0.Add(d)); !slices.Equal(render(p), render(q)) {
			t.Fatalf("at t0: %v (WakeAt %v); at t0+%v, before it: %v", render(p), p.WakeAt, d, render(q))
		}
	}
}

// TestPropertyDiffIsTotal feeds Diff containers with any slot, negative and
// past the replica count included (labels cannot say so today; a future
// source of containers might): each one outside the workload's slots is
// removed unless work on it is in progress, and each slot is still planned,
// as if the odd container were not there. A negative slot once hid every
// other container of its workload from the slot loop: a duplicate start, the
// stray kept.
func TestPropertyDiffIsTotal(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := wl("web", rapid.IntRange(0, 4).Draw(t, "replicas"))
		var actual, inRange []containers.Container
		n := rapid.IntRange(0, 8).Draw(t, "containers")
		for i := range n {
			state := rapid.SampledFrom([]contract.ContainerState{contract.StateRunning, contract.StateStarting,
				contract.StateCrashed, contract.StateDraining, contract.StateUnknown}).Draw(t, "state")
			hash := old
			if rapid.Bool().Draw(t, "up-to-date") {
				hash = up(w)
			}
			c := ctr("x"+strconv.Itoa(i), w, 0, hash, state)
			c.Slot = rapid.IntRange(-3, 6).Draw(t, "slot")
			actual = append(actual, c)
			if c.Slot >= 0 && c.Slot < w.Replicas {
				inRange = append(inRange, c)
			}
		}
		p := Diff(desiredOf(w), actual, nil, t0)
		targeted := map[string]Action{}
		for _, st := range p.Steps {
			targeted[st.ContainerID] = st.Action
		}
		for _, c := range actual {
			if c.Slot >= 0 && c.Slot < w.Replicas || c.State == contract.StateDraining {
				continue
			}
			if a := targeted[c.ID]; a != ActionStop && a != ActionDrain {
				t.Fatalf("container %s in slot %d of %d replicas: step %q, want it removed; plan %v", c.ID, c.Slot, w.Replicas, a, render(p))
			}
		}
		// The slots themselves are planned exactly as without the strays.
		want := render(Diff(desiredOf(w), inRange, nil, t0))
		var got []string
		for _, st := range p.Steps {
			if st.ReplicaIndex >= 0 && st.ReplicaIndex < w.Replicas {
				got = append(got, render(Plan{Steps: []Step{st}})...)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("in-range steps %v, want %v as without the out-of-range containers", got, want)
		}
	})
}
