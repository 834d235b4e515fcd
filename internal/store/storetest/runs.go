package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

// RunRuns checks the runs' records and the schedules' states: a tick is
// recorded once whoever records it, a run's first end stands, and what
// the scheduler reads back is what it wrote.
func RunRuns(t *testing.T, open Open) {
	run := func(id, egg string, tick time.Time, created time.Duration) store.Run {
		return store.Run{ID: id, Project: "default/shop", Egg: egg, Trigger: "schedule", ScheduledAt: tick,
			CreatedAt: t0.Add(created), State: store.RunPending, Command: []string{"sh", "-c", "echo hi"}, Timeout: time.Minute}
	}
	initSchedule := func(t *testing.T, s Store, egg string, last time.Time) {
		t.Helper()
		if ok, err := s.InitSchedule(ctx(t), store.ScheduleState{Project: "default/shop", Egg: egg, LastTick: last, UpdatedAt: t0}); err != nil || !ok {
			t.Fatalf("InitSchedule: %v, %v", ok, err)
		}
	}

	t.Run("a run reads back as it was recorded", func(t *testing.T) {
		s := open(t)
		want := run("r1", "report", t0.Add(time.Minute), 0)
		want.Actor, want.Kept, want.StopEgg, want.Host, want.TTY = "alice", true, true, "h1", true
		if err := s.CreateRuns(ctx(t), []store.Run{want}, nil); err != nil {
			t.Fatal(err)
		}
		got, err := s.Run(ctx(t), "r1")
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("read back\n%+v\nwant\n%+v", got, want)
		}
		if _, err := s.Run(ctx(t), "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("an unknown run: %v, want ErrNotFound", err)
		}
	})

	t.Run("a tick is recorded once, and a pass that decided ticks already decided keeps nothing", func(t *testing.T) {
		s := open(t)
		initSchedule(t, s, "report", t0)
		tick := t0.Add(time.Minute)
		state := &store.ScheduleState{Project: "default/shop", Egg: "report", LastTick: tick, UpdatedAt: t0}
		if err := s.CreateRuns(ctx(t), []store.Run{run("r1", "report", tick, 0)}, state); err != nil {
			t.Fatal(err)
		}
		// Another server's pass, deciding the same tick from the same last tick.
		err := s.CreateRuns(ctx(t), []store.Run{run("r2", "report", tick, time.Second)}, state)
		if !errors.Is(err, store.ErrExists) {
			t.Fatalf("the same tick again: %v, want ErrExists", err)
		}
		// Even without the schedule's state, the tick's unique key refuses it.
		err = s.CreateRuns(ctx(t), []store.Run{run("r3", "report", tick, time.Second)}, nil)
		if !errors.Is(err, store.ErrExists) {
			t.Fatalf("the same tick without a state: %v, want ErrExists", err)
		}
		if _, err := s.Run(ctx(t), "r3"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a refused run was kept: %v", err)
		}
		// Manual runs have no tick: any number of them.
		for _, id := range []string{"m1", "m2"} {
			m := run(id, "report", time.Time{}, time.Second)
			m.Trigger = "manual"
			if err := s.CreateRuns(ctx(t), []store.Run{m}, nil); err != nil {
				t.Fatalf("manual run %s: %v", id, err)
			}
		}
		states, err := s.ListScheduleStates(ctx(t), "default/shop")
		if err != nil || len(states) != 1 || !states[0].LastTick.Equal(tick) {
			t.Fatalf("states: %+v, %v; want the last tick %v", states, err, tick)
		}
	})

	t.Run("two writers racing on one tick: one wins", func(t *testing.T) {
		s := open(t)
		initSchedule(t, s, "report", t0)
		tick := t0.Add(time.Minute)
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() {
				errs[i] = s.CreateRuns(ctx(t), []store.Run{run(string(rune('a'+i)), "report", tick, 0)},
					&store.ScheduleState{Project: "default/shop", Egg: "report", LastTick: tick, UpdatedAt: t0})
			})
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, store.ErrExists):
				t.Fatalf("a racing writer: %v", err)
			}
		}
		runs, err := s.ListRuns(ctx(t), store.RunFilter{Project: "default/shop"})
		if err != nil || won != 1 || len(runs) != 1 {
			t.Fatalf("%d won, runs %+v (%v); want one", won, runs, err)
		}
	})

	t.Run("runs list newest first, by project, egg and release", func(t *testing.T) {
		s := open(t)
		for i, r := range []store.Run{run("a", "report", t0.Add(time.Minute), 0), run("b", "report", t0.Add(2*time.Minute), time.Second),
			run("c", "clean", t0.Add(time.Minute), 2*time.Second)} {
			if err := s.CreateRuns(ctx(t), []store.Run{r}, nil); err != nil {
				t.Fatalf("run %d: %v", i, err)
			}
		}
		if err := s.ReleaseRun(ctx(t), "a", t0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			f    store.RunFilter
			want []string
		}{
			{store.RunFilter{}, []string{"c", "b", "a"}},
			{store.RunFilter{Project: "default/shop", Egg: "report"}, []string{"b", "a"}},
			{store.RunFilter{Project: "default/other"}, nil},
			{store.RunFilter{Unreleased: true}, []string{"c", "b"}},
			{store.RunFilter{Limit: 1}, []string{"c"}},
		} {
			runs, err := s.ListRuns(ctx(t), c.f)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, r := range runs {
				ids = append(ids, r.ID)
			}
			if !reflect.DeepEqual(ids, c.want) {
				t.Errorf("ListRuns(%+v) = %v, want %v", c.f, ids, c.want)
			}
		}
	})

	t.Run("a run's progress is recorded until its end, and its first end stands", func(t *testing.T) {
		s := open(t)
		if err := s.CreateRuns(ctx(t), []store.Run{run("r1", "report", t0.Add(time.Minute), 0)}, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.DeliverRun(ctx(t), "r1", "h1", t0.Add(time.Second), 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if err := s.DeliverRun(ctx(t), "r1", "h2", t0.Add(2*time.Second), 0); err != nil {
			t.Fatal(err)
		}
		started := store.RunProgress{State: store.RunRunning, StartedAt: t0.Add(2 * time.Second)}
		for i, want := range []bool{true, false} { // the same report again changes nothing
			if changed, err := s.RecordRunProgress(ctx(t), "r1", started); err != nil || changed != want {
				t.Fatalf("start %d: %v, %v; want %v", i, changed, err, want)
			}
		}
		end := store.RunProgress{State: store.RunExited, EndedAt: t0.Add(5 * time.Second), ExitCode: 3}
		if changed, err := s.RecordRunProgress(ctx(t), "r1", end); err != nil || !changed {
			t.Fatalf("end: %v, %v", changed, err)
		}
		later := store.RunProgress{State: store.RunLost, EndedAt: t0.Add(time.Minute)}
		if changed, err := s.RecordRunProgress(ctx(t), "r1", later); err != nil || changed {
			t.Fatalf("a second end: %v, %v; want no change", changed, err)
		}
		got, err := s.Run(ctx(t), "r1")
		if err != nil {
			t.Fatal(err)
		}
		if got.Host != "h1" || !got.DeliveredAt.Equal(t0.Add(time.Second)) || got.Delay != 300*time.Millisecond ||
			got.State != store.RunExited || got.ExitCode != 3 || !got.StartedAt.Equal(started.StartedAt) || !got.EndedAt.Equal(end.EndedAt) {
			t.Fatalf("recorded %+v", got)
		}
		if _, err := s.RecordRunProgress(ctx(t), "nope", end); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("an unknown run: %v, want ErrNotFound", err)
		}
	})

	t.Run("stop, keep and release are recorded", func(t *testing.T) {
		s := open(t)
		if err := s.CreateRuns(ctx(t), []store.Run{run("r1", "report", t0.Add(time.Minute), 0)}, nil); err != nil {
			t.Fatal(err)
		}
		for i, want := range []bool{true, false} {
			if changed, err := s.RequestRunStop(ctx(t), "r1"); err != nil || changed != want {
				t.Fatalf("stop %d: %v, %v; want %v", i, changed, err, want)
			}
		}
		if err := s.SetRunKept(ctx(t), "r1", true); err != nil {
			t.Fatal(err)
		}
		if err := s.ReleaseRun(ctx(t), "r1", t0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		got, err := s.Run(ctx(t), "r1")
		if err != nil || !got.StopRequested || !got.Kept || !got.ReleasedAt.Equal(t0.Add(time.Hour)) {
			t.Fatalf("recorded %+v, %v", got, err)
		}
		for _, err := range []error{s.ReleaseRun(ctx(t), "nope", t0), s.SetRunKept(ctx(t), "nope", true)} {
			if !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("an unknown run: %v, want ErrNotFound", err)
			}
		}
	})

	t.Run("the records of released runs past the newest of each egg are pruned", func(t *testing.T) {
		s := open(t)
		for i := range 5 {
			r := run(fmt.Sprint("a", i), "report", t0.Add(time.Duration(i+1)*time.Minute), time.Duration(i)*time.Second)
			if err := s.CreateRuns(ctx(t), []store.Run{r}, nil); err != nil {
				t.Fatal(err)
			}
			if i != 0 { // a0, the oldest, is still in its host's desired state
				if err := s.ReleaseRun(ctx(t), r.ID, t0.Add(time.Hour)); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := s.CreateRuns(ctx(t), []store.Run{run("b0", "clean", t0.Add(time.Minute), 0)}, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.ReleaseRun(ctx(t), "b0", t0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		n, err := s.PruneRuns(ctx(t), 2)
		if err != nil || n != 2 {
			t.Fatalf("PruneRuns: %d, %v; want a1 and a2 deleted", n, err)
		}
		runs, err := s.ListRuns(ctx(t), store.RunFilter{})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range runs {
			ids = append(ids, r.ID)
		}
		if want := []string{"a4", "a3", "b0", "a0"}; !reflect.DeepEqual(ids, want) {
			t.Fatalf("left %v, want %v (the newest two of each egg, and those not released)", ids, want)
		}
	})

	t.Run("the last success of each egg's schedule", func(t *testing.T) {
		s := open(t)
		for i, r := range []store.Run{run("a", "report", t0.Add(time.Minute), 0), run("b", "report", t0.Add(2*time.Minute), 0),
			run("c", "report", t0.Add(3*time.Minute), 0)} {
			if err := s.CreateRuns(ctx(t), []store.Run{r}, nil); err != nil {
				t.Fatal(err)
			}
			code := 0
			if r.ID == "c" {
				code = 1 // failed last: the success before stands
			}
			if _, err := s.RecordRunProgress(ctx(t), r.ID, store.RunProgress{State: store.RunExited, ExitCode: code,
				EndedAt: t0.Add(time.Duration(i+1) * time.Minute)}); err != nil {
				t.Fatal(err)
			}
		}
		manual := run("m", "report", time.Time{}, time.Hour)
		manual.Trigger = "manual" // a `hatch run` that succeeded later says nothing of the schedule
		if err := s.CreateRuns(ctx(t), []store.Run{manual}, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RecordRunProgress(ctx(t), "m", store.RunProgress{State: store.RunExited, EndedAt: t0.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		got, err := s.LastSuccesses(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if want := t0.Add(2 * time.Minute); len(got) != 1 || !got["default/shop"]["report"].Equal(want) {
			t.Fatalf("last successes %v, want report at %v", got, want)
		}
	})

	t.Run("a schedule is initialised once, paused and resumed past its pause", func(t *testing.T) {
		s := open(t)
		initSchedule(t, s, "report", t0)
		if ok, err := s.InitSchedule(ctx(t), store.ScheduleState{Project: "default/shop", Egg: "report", LastTick: t0.Add(time.Hour)}); err != nil || ok {
			t.Fatalf("a second init: %v, %v; want no change", ok, err)
		}
		if changed, err := s.PauseSchedule(ctx(t), "default/shop", "report", true, t0.Add(time.Minute), t0.Add(time.Minute)); err != nil || !changed {
			t.Fatalf("pause: %v, %v", changed, err)
		}
		if changed, err := s.PauseSchedule(ctx(t), "default/shop", "report", true, t0.Add(time.Minute), t0.Add(time.Minute)); err != nil || changed {
			t.Fatalf("pause again: %v, %v; want no change", changed, err)
		}
		states, err := s.ListScheduleStates(ctx(t), "")
		if err != nil || len(states) != 1 || !states[0].Paused || !states[0].LastTick.Equal(t0) {
			t.Fatalf("paused: %+v, %v", states, err)
		}
		if changed, err := s.PauseSchedule(ctx(t), "default/shop", "report", false, t0.Add(time.Hour), t0.Add(time.Hour)); err != nil || !changed {
			t.Fatalf("resume: %v, %v", changed, err)
		}
		states, err = s.ListScheduleStates(ctx(t), "default/shop")
		if err != nil || len(states) != 1 || states[0].Paused || !states[0].LastTick.Equal(t0.Add(time.Hour)) {
			t.Fatalf("resumed: %+v, %v; want the last tick at the resume", states, err)
		}
		// Pausing an egg the scheduler has not seen yet creates its state.
		if changed, err := s.PauseSchedule(ctx(t), "default/shop", "clean", true, t0, t0); err != nil || !changed {
			t.Fatalf("pause a new one: %v, %v", changed, err)
		}
		if states, _ := s.ListScheduleStates(ctx(t), "default/other"); len(states) != 0 {
			t.Fatalf("another project's states: %+v", states)
		}
	})
}

// RunRunFencing checks that the scheduler's writes made under a lease taken
// over are refused and keep nothing.
func RunRunFencing(t *testing.T, open OpenRunFencing) {
	s := open(t)
	now := time.Now()
	if _, err := s.AcquireLease(ctx(t), lease(store.LoopsLease, "tok-a", "loops", "srv-a", now, time.Minute)); err != nil {
		t.Fatal(err)
	}
	fenced := store.WithFence(ctx(t), store.Fence{Project: store.LoopsLease, Token: "tok-a"})
	if _, err := s.InitSchedule(fenced, store.ScheduleState{Project: "default/shop", Egg: "report", LastTick: t0}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireLease(ctx(t), lease(store.LoopsLease, "tok-b", "loops", "srv-b", now.Add(2*time.Minute), time.Minute)); err != nil {
		t.Fatal(err)
	}
	r := store.Run{ID: "r1", Project: "default/shop", Egg: "report", Trigger: "schedule", ScheduledAt: t0.Add(time.Minute),
		CreatedAt: t0, State: store.RunPending}
	err := s.CreateRuns(fenced, []store.Run{r}, &store.ScheduleState{Project: "default/shop", Egg: "report", LastTick: r.ScheduledAt})
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("a tick recorded by the holder taken over: %v, want ErrFenced", err)
	}
	if _, err := s.Run(ctx(t), "r1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused run was kept: %v", err)
	}
	states, err := s.ListScheduleStates(ctx(t), "")
	if err != nil || len(states) != 1 || !states[0].LastTick.Equal(t0) {
		t.Fatalf("the refused tick moved the schedule: %+v, %v", states, err)
	}
}

// RunFencingStore is what RunRunFencing needs.
type RunFencingStore interface {
	store.Leases
	store.Runs
	store.ScheduleStates
}

// OpenRunFencing returns a new, empty store for one test.
type OpenRunFencing func(t *testing.T) RunFencingStore
