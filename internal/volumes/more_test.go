package volumes

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/backup"
	"github.com/hatchery/hatchery/internal/backup/backuptest"
	"github.com/hatchery/hatchery/internal/blob"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/desired"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/store/sqlite"
)

// TestAReportFromBeforeTheLoopBeganIsNotActedOn: after a restart, a
// host's report received before the loop began says nothing yet (the
// host may have moved on since); its next report is taken.
func TestAReportFromBeforeTheLoopBeganIsNotActedOn(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		h.report(t, "h1", nil)
		h.volume(t, "data", "h1", nil)
		got, err := h.svc.Backup(t.Context(), project, "data", "", "alice")
		if err != nil {
			t.Fatal(err)
		}
		h.report(t, "h1", []contract.VolumeTaskStatus{{ID: got.ID, State: contract.TaskFailed, Error: "old news"}})
		h.clock.advance(time.Second)
		h.began = h.clock.now() // the server restarts
		h.pass(t)
		if r := h.task(t, got.ID); r.State != store.TaskPending {
			t.Fatalf("a report from before the restart was acted on: %+v", r)
		}
		h.clock.advance(time.Second)
		h.report(t, "h1", []contract.VolumeTaskStatus{{ID: got.ID, State: contract.TaskFailed, Error: "disk full"}})
		h.pass(t)
		if r := h.task(t, got.ID); r.State != store.TaskFailed || r.Error != "disk full" {
			t.Fatalf("the fresh report was not taken: %+v", r)
		}
	})
}

// TestTheLastGoodBackupOfAVolumeIsAGauge: /metrics carries when each
// volume's last good backup ended, and nothing for a failed one.
func TestTheLastGoodBackupOfAVolumeIsAGauge(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		if got := gauges(t, h.svc.Collector()); len(got) != 0 {
			t.Fatalf("gauges before any backup: %v", got)
		}
		ended := time.UnixMilli(1_800_000_000_000).UTC()
		for i, state := range []string{store.TaskDone, store.TaskFailed} {
			if err := h.st.CreateVolumeTask(t.Context(), store.VolumeTask{ID: strings.Repeat(string(rune('a'+i)), 16), Kind: "backup",
				Project: project, Volume: "data", Trigger: "schedule", CreatedAt: ended, EndedAt: ended.Add(time.Duration(i) * time.Hour),
				State: state}, nil); err != nil {
				t.Fatal(err)
			}
		}
		got := gauges(t, h.svc.Collector())
		if len(got) != 1 || got["default/shop/data"] != 1.8e9 {
			t.Fatalf("gauges %v, want default/shop/data at 1.8e9", got)
		}
	})
}

// gauges gathers hatch_volume_backup_last_success_timestamp_seconds by
// namespace/project/volume.
func gauges(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "hatch_volume_backup_last_success_timestamp_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[label(m, "namespace")+"/"+label(m, "project")+"/"+label(m, "volume")] = m.GetGauge().GetValue()
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestBlobCollectionKeepsTheChunksOfABackupInProgress: a chunk uploaded
// for a backup that has not ended is not retained yet, and the collector
// leaves it while the backup is open; once no backup is open, an
// unreferenced chunk is collected.
func TestBlobCollectionKeepsTheChunksOfABackupInProgress(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		chunk := []byte("a chunk of a backup in progress")
		sum := sha256.Sum256(chunk)
		id := hex.EncodeToString(sum[:])
		if _, _, err := h.blobs.Put(t.Context(), "sha256:"+id, bytes.NewReader(chunk), 1<<20); err != nil {
			t.Fatal(err)
		}
		if err := h.st.CreateVolumeTask(t.Context(), store.VolumeTask{ID: "00000000000000a1", Kind: "backup", Project: project,
			Volume: "data", Host: "h1", Trigger: "manual", CreatedAt: h.clock.now().Add(-time.Hour), State: store.TaskRunning}, nil); err != nil {
			t.Fatal(err)
		}
		g := GuardCollector{Blobs: h.blobs, S: h.svc}
		time.Sleep(10 * time.Millisecond) // past a zero grace
		if removed, err := g.Collect(t.Context(), nil, 0); err != nil || len(removed) != 0 {
			t.Fatalf("collected %v (%v) while a backup is in progress", removed, err)
		}
		if _, err := h.st.RecordVolumeTaskProgress(t.Context(), "00000000000000a1", store.VolumeTaskProgress{State: store.TaskFailed, EndedAt: h.clock.now()}); err != nil {
			t.Fatal(err)
		}
		if removed, err := g.Collect(t.Context(), nil, 0); err != nil || len(removed) != 1 {
			t.Fatalf("collected %v (%v) with no backup open; want the unreferenced chunk", removed, err)
		}
	})
}

// TestANewControlPlaneWithTheBucketAndTheKeyListsAndRestoresEveryBackup:
// a control plane with an empty database, given only the backup store and
// the cluster's backup key, lists a backup another one took and plans
// and delivers its restore. The bucket is an in-memory backup.Store here
// (the S3 store's own tests run against a real server).
func TestANewControlPlaneWithTheBucketAndTheKeyListsAndRestoresEveryBackup(t *testing.T) {
	bucket := backuptest.NewMem()
	open := func(t *testing.T) *harness {
		st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "hatch.db"), zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		b, err := blob.Open(filepath.Join(t.TempDir(), "blobs"))
		if err != nil {
			t.Fatal(err)
		}
		h := harnessOn(t, st, b, "srv-a")
		h.svc.deps.Store = bucket
		return h
	}
	old := open(t)
	old.report(t, "h1", nil)
	old.volume(t, "data", "h1", nil)
	id := old.goodBackup(t, "data")

	fresh := open(t) // the old database is gone: only the bucket and the key
	fresh.report(t, "h1", nil)
	fresh.volume(t, "data", "h1", nil)
	list, err := fresh.svc.List(t.Context(), project, "data")
	if err != nil || len(list) != 1 || list[0].Manifest != id || !list[0].FromStore {
		t.Fatalf("the new control plane lists %+v (%v); want the old one's backup, from the store", list, err)
	}
	_, task, err := fresh.svc.Restore(t.Context(), project, "data", api.RestoreRequest{From: id}, "alice")
	if err != nil || task == nil {
		t.Fatalf("restore on the new control plane: %v", err)
	}
	m, err := backup.OpenManifest(t.Context(), hostStore{svc: fresh.svc, host: "h1", task: task.ID}, id, fresh.volumeKeyOf(t, "data"))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := backup.Restore(t.Context(), m, fresh.volumeKeyOf(t, "data"), hostStore{svc: fresh.svc, host: "h1", task: task.ID}, &out, t.TempDir()); err != nil {
		t.Fatalf("the restore's host reads the backup: %v", err)
	}
	if out.String() != strings.Repeat("kv ", 10_000) {
		t.Fatalf("restored %d bytes, not the volume's", out.Len())
	}
	if _, err := fresh.svc.Forget(t.Context(), project, id, "alice"); err != nil {
		t.Fatal(err)
	}
	if list, _ := fresh.svc.List(t.Context(), project, "data"); len(list) != 0 {
		t.Fatalf("a forgotten backup is listed again from the store: %+v", list)
	}
}

// TestAStopBackupHoldsItsEggStoppedAndPlacesItAgainAtItsEnd: a backup with
// consistency stop scales the egg that mounts the volume to 0 on its host,
// an apply placing the egg meanwhile keeps it there, and the backup's
// release places it again.
func TestAStopBackupHoldsItsEggStoppedAndPlacesItAgainAtItsEnd(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		h.report(t, "h1", nil)
		h.volume(t, "data", "h1", map[string]any{"consistency": "stop"})
		egg := &resource.Deployed{ID: "id-db", Type: resource.Egg, Name: "db", Inputs: map[string]any{"image": "db:1", "replicas": 1,
			"volumes":   []any{map[string]any{"type": "volume", "source": "data", "target": "/data"}},
			"placement": map[string]any{"volume": "data", "volume_host": "h1"}}, Outputs: map[string]any{"address": "db", "hosts": []any{}}}
		if err := h.st.PutResource(t.Context(), project, egg); err != nil {
			t.Fatal(err)
		}
		place := func() {
			t.Helper()
			e, err := desired.NewEgg(project, "db", egg.Inputs, "", 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.states.PlaceEgg(t.Context(), project, e, nil); err != nil {
				t.Fatal(err)
			}
		}
		replicas := func() int {
			t.Helper()
			w, _ := h.desiredState(t, "h1").Workload("default/shop/db")
			return w.Replicas
		}
		place()
		if n := replicas(); n != 1 {
			t.Fatalf("db has %d replicas before the backup, want 1", n)
		}
		got, err := h.svc.Backup(t.Context(), project, "data", "", "alice")
		if err != nil {
			t.Fatal(err)
		}
		if n := replicas(); n != 0 {
			t.Fatalf("db has %d replicas during its stop backup, want 0", n)
		}
		place() // an apply meanwhile
		if n := replicas(); n != 0 {
			t.Fatalf("db placed again during its stop backup has %d replicas, want 0", n)
		}
		h.report(t, "h1", []contract.VolumeTaskStatus{{ID: got.ID, State: contract.TaskFailed, Error: "before hook failed", Output: "no"}})
		h.pass(t)
		if n := replicas(); n != 1 {
			t.Fatalf("db has %d replicas after its backup ended, want 1 again", n)
		}
		if r := h.task(t, got.ID); r.State != store.TaskFailed || r.Output != "no" || r.ReleasedAt.IsZero() {
			t.Fatalf("the failed backup: %+v", r)
		}
	})
}

// TestARestoreIntoTheVolumeItselfHoldsItsEggAndEndsWithAnEvent: the
// restore's host gets the backup and the volume's own Docker name as its
// target, the egg is held at 0 replicas there while it runs, and its end
// is a restore.done event with its actor.
func TestARestoreIntoTheVolumeItselfHoldsItsEggAndEndsWithAnEvent(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		h.report(t, "h1", nil)
		h.volume(t, "data", "h1", nil)
		h.eggOn(t, "h1", "data")
		b := h.goodBackup(t, "data")
		_, task, err := h.svc.Restore(t.Context(), project, "data", api.RestoreRequest{From: b}, "bob")
		if err != nil {
			t.Fatal(err)
		}
		d := h.desiredState(t, "h1")
		if len(d.VolumeTasks) != 1 || d.VolumeTasks[0].Kind != contract.TaskRestore ||
			d.VolumeTasks[0].Target != contract.VolumeName("h1", "default", "shop", "data") || d.VolumeTasks[0].Backup != b {
			t.Fatalf("h1's tasks: %+v; want the restore of %s into the volume itself", d.VolumeTasks, b)
		}
		if w, _ := d.Workload("default/shop/db"); w.Replicas != 0 {
			t.Fatalf("db has %d replicas during the restore of its volume, want 0", w.Replicas)
		}
		h.report(t, "h1", []contract.VolumeTaskStatus{{ID: task.ID, State: contract.TaskDone, EndedAt: h.clock.now(), Bytes: 30_000}})
		h.pass(t)
		if r := h.task(t, task.ID); r.State != store.TaskDone || r.ReleasedAt.IsZero() {
			t.Fatalf("the restore: %+v; want done and released", r)
		}
		if e, ok := eventOf(h.events(t), store.EventRestoreDone); !ok || e.Actor != "bob" {
			t.Fatalf("restore.done: %+v, %v; want one by bob", e, ok)
		}
	})
}
