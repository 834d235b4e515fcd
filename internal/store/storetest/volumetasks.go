package storetest

import (
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

// RunVolumeTasks checks the records of volume backups and restores: a
// backup tick is recorded once whoever records it, a task's first end
// stands, and what the service reads back is what it wrote.
func RunVolumeTasks(t *testing.T, open Open) {
	task := func(id, volume string, tick time.Time, created time.Duration) store.VolumeTask {
		return store.VolumeTask{ID: id, Kind: "backup", Project: "default/shop", Volume: volume, Host: "h1", Trigger: "schedule",
			ScheduledAt: tick, CreatedAt: t0.Add(created), State: store.TaskPending, Consistency: "hooks"}
	}
	initSchedule := func(t *testing.T, s Store, volume string, last time.Time) {
		t.Helper()
		if ok, err := s.InitVolumeSchedule(ctx(t), store.ScheduleState{Project: "default/shop", Egg: volume, LastTick: last, UpdatedAt: t0}); err != nil || !ok {
			t.Fatalf("InitVolumeSchedule: %v, %v", ok, err)
		}
	}
	ids := func(list []store.VolumeTask) []string {
		var out []string
		for _, v := range list {
			out = append(out, v.ID)
		}
		return out
	}

	t.Run("a task reads back as it was recorded", func(t *testing.T) {
		s := open(t)
		want := task("v1", "data", t0.Add(time.Minute), 0)
		want.Kind, want.Actor, want.Backup, want.Target, want.Phase = "restore", "alice", "ab12", "hatch-x", "fetch"
		want.Bytes, want.Chunks, want.NewChunks, want.SentBytes, want.StoredBytes = 10, 2, 1, 5, 6
		want.Output, want.Error, want.Manifest = "out", "err", "cd34"
		want.DeliveredAt, want.StartedAt = t0.Add(time.Second), t0.Add(2*time.Second)
		if err := s.CreateVolumeTask(ctx(t), want, nil); err != nil {
			t.Fatal(err)
		}
		got, err := s.VolumeTask(ctx(t), "v1")
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("read back\n%+v\nwant\n%+v", got, want)
		}
		if _, err := s.VolumeTask(ctx(t), "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("an unknown task: %v, want ErrNotFound", err)
		}
	})

	t.Run("a backup tick is recorded once, and moves the volume's last tick", func(t *testing.T) {
		s := open(t)
		initSchedule(t, s, "data", t0)
		if ok, err := s.InitVolumeSchedule(ctx(t), store.ScheduleState{Project: "default/shop", Egg: "data", LastTick: t0.Add(time.Hour)}); err != nil || ok {
			t.Fatalf("a second init: %v, %v; want it refused", ok, err)
		}
		tick := t0.Add(time.Minute)
		state := &store.ScheduleState{Project: "default/shop", Egg: "data", LastTick: tick, UpdatedAt: t0}
		if err := s.CreateVolumeTask(ctx(t), task("v1", "data", tick, 0), state); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateVolumeTask(ctx(t), task("v2", "data", tick, time.Second), state); !errors.Is(err, store.ErrExists) {
			t.Fatalf("the same tick again: %v, want ErrExists", err)
		}
		if err := s.CreateVolumeTask(ctx(t), task("v3", "data", tick, time.Second), nil); !errors.Is(err, store.ErrExists) {
			t.Fatalf("the same tick without a state: %v, want ErrExists", err)
		}
		for _, id := range []string{"v2", "v3"} {
			if _, err := s.VolumeTask(ctx(t), id); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("refused task %s was kept: %v", id, err)
			}
		}
		// Manual backups have no tick, and another volume's tick is its own.
		for _, v := range []store.VolumeTask{task("m1", "data", time.Time{}, 0), task("m2", "data", time.Time{}, 0), task("o1", "logs", tick, 0)} {
			if err := s.CreateVolumeTask(ctx(t), v, nil); err != nil {
				t.Fatalf("task %s: %v", v.ID, err)
			}
		}
		states, err := s.ListVolumeSchedules(ctx(t))
		if err != nil || len(states) != 1 || states[0].Egg != "data" || !states[0].LastTick.Equal(tick) {
			t.Fatalf("states: %+v, %v; want data's last tick %v", states, err, tick)
		}
	})

	t.Run("two writers racing on one tick: one wins", func(t *testing.T) {
		s := open(t)
		initSchedule(t, s, "data", t0)
		tick := t0.Add(time.Minute)
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() {
				errs[i] = s.CreateVolumeTask(ctx(t), task(string(rune('a'+i)), "data", tick, 0),
					&store.ScheduleState{Project: "default/shop", Egg: "data", LastTick: tick, UpdatedAt: t0})
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
		list, err := s.ListVolumeTasks(ctx(t), store.VolumeTaskFilter{})
		if err != nil || won != 1 || len(list) != 1 {
			t.Fatalf("%d won, tasks %v (%v); want one", won, ids(list), err)
		}
	})

	t.Run("tasks list newest first, by project, volume, kind, release and forgetting", func(t *testing.T) {
		s := open(t)
		r := task("c", "data", time.Time{}, 2*time.Second)
		r.Kind = "restore"
		for _, v := range []store.VolumeTask{task("a", "data", time.Time{}, 0), task("b", "logs", time.Time{}, time.Second), r} {
			if err := s.CreateVolumeTask(ctx(t), v, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.ReleaseVolumeTask(ctx(t), "a", t0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if changed, err := s.ForgetVolumeTask(ctx(t), "b", t0.Add(time.Hour)); err != nil || !changed {
			t.Fatalf("forget: %v, %v", changed, err)
		}
		if changed, err := s.ForgetVolumeTask(ctx(t), "b", t0.Add(2*time.Hour)); err != nil || changed {
			t.Fatalf("forget again: %v, %v; want no change", changed, err)
		}
		for _, c := range []struct {
			f    store.VolumeTaskFilter
			want []string
		}{
			{store.VolumeTaskFilter{}, []string{"c", "a"}},
			{store.VolumeTaskFilter{Forgotten: true}, []string{"c", "b", "a"}},
			{store.VolumeTaskFilter{Project: "default/shop", Volume: "data", Kind: "backup"}, []string{"a"}},
			{store.VolumeTaskFilter{Kind: "restore"}, []string{"c"}},
			{store.VolumeTaskFilter{Project: "default/other"}, nil},
			{store.VolumeTaskFilter{Unreleased: true}, []string{"c"}},
			{store.VolumeTaskFilter{Limit: 1}, []string{"c"}},
		} {
			list, err := s.ListVolumeTasks(ctx(t), c.f)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(list); !reflect.DeepEqual(got, c.want) {
				t.Errorf("%+v: %v, want %v", c.f, got, c.want)
			}
		}
		if _, err := s.ForgetVolumeTask(ctx(t), "nope", t0); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("forget an unknown task: %v, want ErrNotFound", err)
		}
	})

	t.Run("the first delivery and the first end stand", func(t *testing.T) {
		s := open(t)
		if err := s.CreateVolumeTask(ctx(t), task("v1", "data", time.Time{}, 0), nil); err != nil {
			t.Fatal(err)
		}
		if err := s.DeliverVolumeTask(ctx(t), "v1", "h2", t0.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		if err := s.DeliverVolumeTask(ctx(t), "v1", "h3", t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		running := store.VolumeTaskProgress{State: store.TaskRunning, Phase: "copy", StartedAt: t0.Add(2 * time.Second), Bytes: 100}
		if changed, err := s.RecordVolumeTaskProgress(ctx(t), "v1", running); err != nil || !changed {
			t.Fatalf("running: %v, %v", changed, err)
		}
		if changed, err := s.RecordVolumeTaskProgress(ctx(t), "v1", running); err != nil || changed {
			t.Fatalf("the same report again: %v, %v; want no change", changed, err)
		}
		done := store.VolumeTaskProgress{State: store.TaskDone, EndedAt: t0.Add(time.Minute), Manifest: "m1", Bytes: 200,
			Chunks: 3, NewChunks: 2, SentBytes: 150, StoredBytes: 180}
		if changed, err := s.RecordVolumeTaskProgress(ctx(t), "v1", done); err != nil || !changed {
			t.Fatalf("done: %v, %v", changed, err)
		}
		if changed, err := s.RecordVolumeTaskProgress(ctx(t), "v1", store.VolumeTaskProgress{State: store.TaskLost, Error: "late"}); err != nil || changed {
			t.Fatalf("a second end: %v, %v; want it ignored", changed, err)
		}
		got, err := s.VolumeTask(ctx(t), "v1")
		if err != nil {
			t.Fatal(err)
		}
		if got.Host != "h2" || !got.DeliveredAt.Equal(t0.Add(time.Second)) || got.State != store.TaskDone || got.Manifest != "m1" ||
			!got.StartedAt.Equal(running.StartedAt) || !got.EndedAt.Equal(done.EndedAt) || got.SentBytes != 150 || got.Chunks != 3 {
			t.Fatalf("recorded %+v; want the first delivery, the start kept and the first end", got)
		}
		if _, err := s.RecordVolumeTaskProgress(ctx(t), "nope", done); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("progress of an unknown task: %v, want ErrNotFound", err)
		}
	})
}
