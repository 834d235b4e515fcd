package volumes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/backup"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/jobs"
	"github.com/hatchery/hatchery/internal/store"
)

// TestAManualBackupIsDeliveredWithItsVolumesKeyAndEndsFromItsHostsReport
// takes a backup of a volume with consistency stop through the service as
// the agent would (its chunks and manifest through the host's data
// routes): it is recorded, delivered to the volume's host only with the
// volume's own key (never the cluster's), the egg held stopped there; its
// end comes from the host's report, with the actor's event, its chunks
// retained, and it leaves the desired state.
func TestAManualBackupIsDeliveredWithItsVolumesKeyAndEndsFromItsHostsReport(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		h.report(t, "h1", nil)
		h.report(t, "h2", nil)
		h.volume(t, "data", "h1", map[string]any{"consistency": "stop", "before": []any{"sync"}})
		h.eggOn(t, "h1", "data")
		got, err := h.svc.Backup(t.Context(), project, "data", "", "alice")
		if err != nil {
			t.Fatal(err)
		}
		if got.State != store.TaskPending || got.Host != "h1" || got.DeliveredAt.IsZero() || got.Actor != "alice" || got.Consistency != "stop" {
			t.Fatalf("recorded %+v; want pending, delivered to h1, by alice, consistency stop", got)
		}
		d := h.desiredState(t, "h1")
		if len(d.VolumeTasks) != 1 {
			t.Fatalf("h1's volume tasks: %+v, want the backup", d.VolumeTasks)
		}
		task := d.VolumeTasks[0]
		key := h.volumeKeyOf(t, "data")
		if string(task.Key) != fmt.Sprintf("%x", key.Secret()) || string(task.Key) == fmt.Sprintf("%x", h.key) {
			t.Fatalf("the task's key is not the volume's own")
		}
		if task.Consistency != contract.ConsistencyStop || task.Egg != "db" || len(task.Before) != 1 ||
			task.Volume.DockerName != contract.VolumeName("h1", "default", "shop", "data") {
			t.Fatalf("delivered %+v; want consistency stop, egg db, its before hook, the volume's Docker name", task)
		}
		if w, ok := d.Workload("default/shop/db"); !ok || w.Replicas != 0 {
			t.Fatalf("egg db on h1: %+v; want it held at 0 replicas while a stop backup is there", w)
		}
		if n := len(h.desiredState(t, "h2").VolumeTasks); n != 0 {
			t.Fatalf("h2 was given %d volume tasks", n)
		}
		if _, err := h.svc.Backup(t.Context(), project, "data", "", "bob"); !errors.Is(err, ErrRefused) {
			t.Fatalf("a second backup while one is open: %v, want ErrRefused", err)
		}

		// The agent: the volume's tar stream into the store, as h1.
		as := hostStore{svc: h.svc, host: "h1", task: got.ID}
		m, stats, err := backup.Backup(t.Context(), bytes.NewReader(bytes.Repeat([]byte("volume data "), 50_000)), key, as, h.clock.now())
		if err != nil {
			t.Fatal(err)
		}
		h.report(t, "h1", []contract.VolumeTaskStatus{{ID: got.ID, State: contract.TaskRunning, Phase: "copy", StartedAt: h.clock.now()}})
		h.pass(t)
		if r := h.task(t, got.ID); r.State != store.TaskRunning || r.Phase != "copy" {
			t.Fatalf("after a running report: %+v", r)
		}
		h.clock.advance(time.Second)
		h.report(t, "h1", []contract.VolumeTaskStatus{{ID: got.ID, State: contract.TaskDone, EndedAt: h.clock.now(), Manifest: m.ID,
			Bytes: stats.Bytes, Chunks: stats.Chunks, NewChunks: stats.NewChunks, SentBytes: stats.SentBytes, StoredBytes: stats.StoredBytes}})
		h.pass(t)
		r := h.task(t, got.ID)
		if r.State != store.TaskDone || r.Manifest != m.ID || r.Bytes != stats.Bytes || r.ReleasedAt.IsZero() {
			t.Fatalf("after the done report: %+v; want done with its manifest and released", r)
		}
		if n := len(h.desiredState(t, "h1").VolumeTasks); n != 0 {
			t.Fatalf("the ended backup is still in h1's desired state (%d tasks)", n)
		}
		e, ok := eventOf(h.events(t), store.EventBackupDone)
		if !ok || e.Actor != "alice" || e.Host != "h1" {
			t.Fatalf("backup.done event: %+v, %v; want one by alice on h1", e, ok)
		}
		refs, err := h.st.ReferencedBlobs(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range append([]backup.ChunkRef{{ID: m.ID}}, m.Chunks...) {
			if !strings.Contains(strings.Join(refs, " "), "sha256:"+c.ID) {
				t.Fatalf("object %s of the good backup is not retained from blob collection", c.ID)
			}
		}
		list, err := h.svc.List(t.Context(), project, "data")
		if err != nil || len(list) != 1 || list[0].Manifest != m.ID {
			t.Fatalf("List: %+v, %v; want the backup", list, err)
		}
	})
}

// TestAHostsClaimsAboutATaskNotItsOwnAreIgnored: a report from another
// host about a task delivered to h1 changes nothing; h2 cannot write to it
// through the data routes either.
func TestAHostsClaimsAboutATaskNotItsOwnAreIgnored(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		h.report(t, "h1", nil)
		h.volume(t, "data", "h1", nil)
		got, err := h.svc.Backup(t.Context(), project, "data", "", "alice")
		if err != nil {
			t.Fatal(err)
		}
		h.report(t, "h2", []contract.VolumeTaskStatus{{ID: got.ID, State: contract.TaskFailed, Error: "made up"}})
		h.pass(t)
		if r := h.task(t, got.ID); r.State != store.TaskPending || r.Error != "" {
			t.Fatalf("h2's claim was taken: %+v", r)
		}
		chunk := []byte("x")
		id := fmt.Sprintf("%x", sha(chunk))
		if err := h.svc.PutChunk(t.Context(), "h2", got.ID, id, chunk); !errors.Is(err, ErrForbidden) {
			t.Fatalf("h2 writes a chunk to h1's backup: %v, want ErrForbidden", err)
		}
		if _, err := h.svc.GetManifest(t.Context(), "h1", got.ID); !errors.Is(err, ErrForbidden) {
			t.Fatalf("h1 reads a restore's manifest through a backup task: %v, want ErrForbidden", err)
		}
	})
}

// TestATaskOfAHostThatWentDownIsLost: a host marked down with a backup
// open: the backup is lost, with a failure event, and leaves its state.
func TestATaskOfAHostThatWentDownIsLost(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		h.report(t, "h1", nil)
		h.volume(t, "data", "h1", nil)
		got, err := h.svc.Backup(t.Context(), project, "data", "", "alice")
		if err != nil {
			t.Fatal(err)
		}
		h.clock.advance(time.Minute)
		if _, err := h.st.MarkHostDown(t.Context(), "h1", h.clock.now(), h.clock.now()); err != nil {
			t.Fatal(err)
		}
		h.pass(t)
		r := h.task(t, got.ID)
		if r.State != store.TaskLost || r.ReleasedAt.IsZero() {
			t.Fatalf("after its host went down: %+v; want lost and released", r)
		}
		if _, ok := eventOf(h.events(t), store.EventBackupFailed); !ok {
			t.Fatal("no backup.failed event for the lost backup")
		}
		if _, err := h.svc.Backup(t.Context(), project, "data", "", "alice"); !errors.Is(err, ErrRefused) {
			t.Fatalf("a backup of a volume whose host is down: %v, want ErrRefused", err)
		}
		// A late report of its end does not bring it back.
		h.report(t, "h1", []contract.VolumeTaskStatus{{ID: got.ID, State: contract.TaskDone, Manifest: strings.Repeat("a", 64)}})
		h.pass(t)
		if r := h.task(t, got.ID); r.State != store.TaskLost {
			t.Fatalf("a late report changed a lost backup: %+v", r)
		}
	})
}

// TestARestoreIsRefusedWhileARunningContainerMountsTheVolume: per the
// host's report; once the egg is stopped the plan is given, and a restore
// --to a new volume writes a volume the desired state keeps beside it.
func TestARestoreIsRefusedWhileARunningContainerMountsTheVolume(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		h.report(t, "h1", nil)
		h.volume(t, "data", "h1", nil)
		h.eggOn(t, "h1", "data")
		b := h.goodBackup(t, "data")
		h.report(t, "h1", nil, contract.ContainerStatus{WorkloadID: "default/shop/db", Slot: 1, State: contract.StateRunning})
		_, _, err := h.svc.Restore(t.Context(), project, "data", api.RestoreRequest{DryRun: true}, "alice")
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "mounts volume") {
			t.Fatalf("a restore while db runs on the volume: %v, want ErrRefused naming the mount", err)
		}
		h.report(t, "h1", nil, contract.ContainerStatus{WorkloadID: "default/shop/db", Slot: 1, State: contract.StateStopped})
		plan, task, err := h.svc.Restore(t.Context(), project, "data", api.RestoreRequest{DryRun: true}, "alice")
		if err != nil || task != nil || plan.Backup.Manifest != b || plan.Host != "h1" || !plan.Replaces {
			t.Fatalf("dry run: %+v, %v, %v; want the plan of the latest backup, nothing recorded", plan, task, err)
		}
		_, task, err = h.svc.Restore(t.Context(), project, "data", api.RestoreRequest{To: "copy"}, "alice")
		if err != nil || task == nil {
			t.Fatalf("restore --to copy: %v", err)
		}
		target := contract.VolumeName("h1", "default", "shop", "copy")
		d := h.desiredState(t, "h1")
		if len(d.VolumeTasks) != 1 || d.VolumeTasks[0].Target != target || d.VolumeTasks[0].Backup != b {
			t.Fatalf("h1's tasks: %+v; want the restore into %s", d.VolumeTasks, target)
		}
		kept := false
		for _, v := range d.Volumes {
			kept = kept || v.Name == "copy" && v.DockerName == target && !v.Delete
		}
		if !kept {
			t.Fatalf("h1's volumes %+v do not keep the restore's new volume", d.Volumes)
		}
		if w, _ := d.Workload("default/shop/db"); w.Replicas != 1 {
			t.Fatalf("a restore into a new volume held egg db: %+v", w)
		}
		// Its chunks are the backup's only.
		if _, err := h.svc.GetChunk(t.Context(), "h1", task.ID, strings.Repeat("0", 64)); !errors.Is(err, ErrNotFound) {
			t.Fatalf("a chunk the manifest does not list: %v, want ErrNotFound", err)
		}
		key := h.volumeKeyOf(t, "data")
		m, err := backup.OpenManifest(t.Context(), hostStore{svc: h.svc, host: "h1", task: task.ID}, b, key)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := backup.Restore(t.Context(), m, key, hostStore{svc: h.svc, host: "h1", task: task.ID}, &out, t.TempDir()); err != nil {
			t.Fatalf("the restore's host reads its backup: %v", err)
		}
	})
}

// goodBackup takes a backup of the volume through the service, as its
// host h1, and returns its manifest ID.
func (h *harness) goodBackup(t *testing.T, name string) string {
	t.Helper()
	got, err := h.svc.Backup(t.Context(), project, name, "", "alice")
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := backup.Backup(t.Context(), strings.NewReader(strings.Repeat("kv ", 10_000)), h.volumeKeyOf(t, name),
		hostStore{svc: h.svc, host: "h1", task: got.ID}, h.clock.now())
	if err != nil {
		t.Fatal(err)
	}
	h.report(t, "h1", []contract.VolumeTaskStatus{{ID: got.ID, State: contract.TaskDone, EndedAt: h.clock.now(), Manifest: m.ID}})
	h.pass(t)
	if r := h.task(t, got.ID); r.State != store.TaskDone {
		t.Fatalf("the backup: %+v", r)
	}
	return m.ID
}

// TestABackupWhoseManifestDoesNotCheckFails: a host that reports done
// with a manifest never uploaded gets a failed backup, never a good one.
func TestABackupWhoseManifestDoesNotCheckFails(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		h.report(t, "h1", nil)
		h.volume(t, "data", "h1", nil)
		got, err := h.svc.Backup(t.Context(), project, "data", "", "")
		if err != nil {
			t.Fatal(err)
		}
		h.report(t, "h1", []contract.VolumeTaskStatus{{ID: got.ID, State: contract.TaskDone, Manifest: strings.Repeat("b", 64)}})
		h.pass(t)
		if r := h.task(t, got.ID); r.State != store.TaskFailed || r.Manifest != "" || !strings.Contains(r.Error, "manifest") {
			t.Fatalf("a done report naming no stored manifest: %+v; want failed", r)
		}
		// An older good backup passed off as a new one.
		h.clock.advance(time.Minute)
		old := h.goodBackup(t, "data")
		h.clock.advance(time.Hour)
		again, err := h.svc.Backup(t.Context(), project, "data", "", "")
		if err != nil {
			t.Fatal(err)
		}
		h.report(t, "h1", []contract.VolumeTaskStatus{{ID: again.ID, State: contract.TaskDone, Manifest: old}})
		h.pass(t)
		if r := h.task(t, again.ID); r.State != store.TaskFailed || !strings.Contains(r.Error, "before the backup was asked for") {
			t.Fatalf("a done report naming an older backup: %+v; want failed", r)
		}
	})
}

// TestRetentionKeepsTheVolumesLastGoodBackups: with keep 2, of four good
// backups the two newest stay, the others are forgotten with an event and
// their chunks released.
func TestRetentionKeepsTheVolumesLastGoodBackups(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		h.report(t, "h1", nil)
		h.volume(t, "data", "h1", map[string]any{"keep": 2})
		for i := range 4 {
			id := fmt.Sprintf("%016x", i+1)
			if err := h.st.CreateVolumeTask(t.Context(), store.VolumeTask{ID: id, Kind: "backup", Project: project, Volume: "data",
				Host: "h1", Trigger: "manual", CreatedAt: h.clock.now().Add(time.Duration(i) * time.Minute), State: store.TaskDone,
				Manifest: strings.Repeat(fmt.Sprint(i), 64), ReleasedAt: h.clock.now()}, nil); err != nil {
				t.Fatal(err)
			}
			if err := h.st.RetainBlobs(t.Context(), retentionOwner(id), []string{"sha256:" + strings.Repeat(fmt.Sprint(i), 64)}); err != nil {
				t.Fatal(err)
			}
		}
		// A volume no longer deployed (hatch destroy --volumes): its backups outlive it.
		for i := range 3 {
			if err := h.st.CreateVolumeTask(t.Context(), store.VolumeTask{ID: fmt.Sprintf("%016x", 100+i), Kind: "backup", Project: project,
				Volume: "gone", Trigger: "manual", CreatedAt: h.clock.now(), State: store.TaskDone, Manifest: strings.Repeat("e", 64),
				ReleasedAt: h.clock.now()}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.svc.Retain(t.Context()); err != nil {
			t.Fatal(err)
		}
		if gone, err := h.svc.List(t.Context(), project, "gone"); err != nil || len(gone) != 3 {
			t.Fatalf("the destroyed volume's backups: %d (%v), want all 3 kept", len(gone), err)
		}
		list, err := h.svc.List(t.Context(), project, "data")
		if err != nil || len(list) != 2 || list[0].ID != fmt.Sprintf("%016x", 4) || list[1].ID != fmt.Sprintf("%016x", 3) {
			t.Fatalf("kept %+v (%v); want the two newest", list, err)
		}
		refs, _ := h.st.ReferencedBlobs(t.Context())
		if len(refs) != 2 {
			t.Fatalf("retained blobs %v; want the kept backups' only", refs)
		}
		n := 0
		for _, e := range h.events(t) {
			if e.Type == store.EventBackupForgotten {
				n++
			}
		}
		if n != 2 {
			t.Fatalf("%d backup.forgotten events, want 2", n)
		}
	})
}

// TestAVolumesBackupTickIsRecordedOnceWhicheverServerDecidesIt: two
// servers' schedulers decide the same due tick of a volume's schedule:
// one backup is recorded, delivered by the next pass; a tick while it is
// open is skipped.
func TestAVolumesBackupTickIsRecordedOnceWhicheverServerDecidesIt(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		h.report(t, "h1", nil)
		h.volume(t, "data", "h1", map[string]any{"schedule": map[string]any{"every": "1m"}})
		other := harnessOn(t, h.st, h.blobs, "srv-b")
		other.clock = h.clock
		other.svc.now, other.svc.deps.Now = h.clock.now, h.clock.now
		items, err := h.svc.Scheduled(t.Context(), "")
		if err != nil || len(items) != 1 || items[0].Egg != "data" || items[0].Ticks == nil {
			t.Fatalf("Scheduled: %+v, %v; want volume data's schedule", items, err)
		}
		sc := items[0]
		start := h.clock.now()
		if ok, err := h.svc.InitSchedule(t.Context(), store.ScheduleState{Project: project, Egg: "data", LastTick: start, UpdatedAt: start}); err != nil || !ok {
			t.Fatalf("InitSchedule: %v, %v", ok, err)
		}
		h.clock.advance(sc.Timer.Next(start).Sub(start) + time.Millisecond)
		states, err := h.svc.ScheduleStates(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		st := states[project+" data"]
		for _, s := range []*Service{h.svc, other.svc} {
			if err := s.DecideTicks(t.Context(), sc, st, h.clock.now(), start.Add(-time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
		list, err := h.st.ListVolumeTasks(t.Context(), store.VolumeTaskFilter{Project: project})
		if err != nil || len(list) != 1 || list[0].State != store.TaskPending || list[0].Trigger != api.TriggerSchedule {
			t.Fatalf("tasks %+v (%v); want one scheduled backup", list, err)
		}
		h.pass(t)
		if r := h.task(t, list[0].ID); r.DeliveredAt.IsZero() || len(h.desiredState(t, "h1").VolumeTasks) != 1 {
			t.Fatalf("the scheduled backup was not delivered: %+v", r)
		}
		// The next tick, while it is still open: skipped.
		states, _ = h.svc.ScheduleStates(t.Context())
		h.clock.advance(time.Minute)
		if err := h.svc.DecideTicks(t.Context(), sc, states[project+" data"], h.clock.now(), start.Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
		list, _ = h.st.ListVolumeTasks(t.Context(), store.VolumeTaskFilter{Project: project})
		if len(list) != 2 || list[0].State != store.TaskSkipped {
			t.Fatalf("tasks %+v; want the second tick skipped", list)
		}
	})
}

// TestTheOneSchedulerFiresAVolumesBackupTicks runs the jobs scheduler's
// loop with the volumes as one of its sources: a volume whose backup runs
// every second gets a scheduled backup per tick, each tick once, with no
// egg's run recorded for it.
func TestTheOneSchedulerFiresAVolumesBackupTicks(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		h.report(t, "h1", nil)
		h.volume(t, "data", "h1", map[string]any{"schedule": map[string]any{"every": "1s"}})
		cfg := jobs.DefaultConfig()
		cfg.Tick = 100 * time.Millisecond
		sched, err := jobs.New(cfg, jobs.Deps{Runs: h.st, Schedules: h.st, Leases: h.st, Events: h.st, Records: h.st, Hosts: h.st,
			Desired: h.states, Sources: []jobs.Source{jobs.EggSchedules{Projects: h.st}, h.svc}, ServerID: "srv-a",
			Logger: zaptest.NewLogger(t), Now: time.Now})
		if err != nil {
			t.Fatal(err)
		}
		run, err := sched.BeginLoops(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); run(ctx) }()
		deadline := time.Now().Add(10 * time.Second)
		var list []store.VolumeTask
		for time.Now().Before(deadline) {
			if list, err = h.st.ListVolumeTasks(t.Context(), store.VolumeTaskFilter{Project: project}); err != nil {
				t.Fatal(err)
			}
			if len(list) >= 2 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		cancel()
		<-done
		if len(list) < 2 {
			t.Fatalf("backup tasks after the scheduler ran: %+v; want one per tick", list)
		}
		ticks := map[time.Time]bool{}
		for _, v := range list {
			if v.ScheduledAt.IsZero() || ticks[v.ScheduledAt] || v.Kind != "backup" || v.Volume != "data" {
				t.Fatalf("tasks %+v: want one scheduled backup of data per tick", list)
			}
			ticks[v.ScheduledAt] = true
		}
		if list[len(list)-1].State != store.TaskPending || list[0].State != store.TaskSkipped {
			t.Fatalf("tasks %+v: want the first pending and the next skipped while it is open", list)
		}
		if runs, _ := h.st.ListRuns(t.Context(), store.RunFilter{}); len(runs) != 0 {
			t.Fatalf("the volume's ticks recorded egg runs: %+v", runs)
		}
		if scheds, err := sched.Schedules(t.Context(), project); err != nil || len(scheds) != 0 {
			t.Fatalf("the eggs' schedules list %+v (%v); a volume's is not an egg's", scheds, err)
		}
	})
}
