package volumes

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/backup"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/desired"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/store"
)

// failoverWorld is a project with egg db on h1, its volume data there
// with a backup policy and failover after 12s, and a live h2.
func failoverWorld(t *testing.T, h *harness) {
	t.Helper()
	h.report(t, "h1", nil)
	h.report(t, "h2", nil)
	h.volume(t, "data", "h1", map[string]any{"keep": 3})
	recs, err := h.st.ListResources(t.Context(), project)
	if err != nil {
		t.Fatal(err)
	}
	vol := recs[slices.IndexFunc(recs, func(r *resource.Deployed) bool { return r.Name == "data" })]
	vol.Inputs["failover"] = map[string]any{"after": "12s"}
	if err := h.st.PutResource(t.Context(), project, vol); err != nil {
		t.Fatal(err)
	}
	egg := &resource.Deployed{ID: "id-db", Type: resource.Egg, Name: "db", Inputs: map[string]any{"image": "db:1", "replicas": 1,
		"volumes":   []any{map[string]any{"type": "volume", "source": "data", "target": "/data", "fenced": true}},
		"placement": map[string]any{"volume": "data", "volume_host": "h1"}}, Outputs: map[string]any{"address": "db", "hosts": []any{}}}
	if err := h.st.PutResource(t.Context(), project, egg); err != nil {
		t.Fatal(err)
	}
	e, err := desired.NewEgg(project, "db", egg.Inputs, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	outputs, err := h.states.PlaceEgg(t.Context(), project, e, nil)
	if err != nil {
		t.Fatal(err)
	}
	egg.Outputs = outputs
	if err := h.st.PutResource(t.Context(), project, egg); err != nil {
		t.Fatal(err)
	}
}

// failedOverToH2 makes the failover world with a good backup, loses h1
// past after, and returns the one restore the failover delivered to h2.
func failedOverToH2(t *testing.T, h *harness) store.VolumeTask {
	t.Helper()
	failoverWorld(t, h)
	h.goodBackup(t, "data")
	h.loseHost(t, "h1")
	h.clock.advance(13 * time.Second)
	h.report(t, "h2", nil)
	h.pass(t)
	tasks := h.failoverTasks(t)
	if len(tasks) != 1 || tasks[0].Host != "h2" {
		t.Fatalf("failover restores: %+v, want one on h2", tasks)
	}
	return tasks[0]
}

// loseHost marks host down as the fleet's liveness would: not heard since
// the clock's now.
func (h *harness) loseHost(t *testing.T, host string) {
	t.Helper()
	if _, err := h.st.MarkHostDown(t.Context(), host, h.clock.now().Add(time.Millisecond), h.clock.now()); err != nil {
		t.Fatal(err)
	}
}

// record returns the project's deployed resource of that name.
func (h *harness) record(t *testing.T, typ resource.Kind, name string) *resource.Deployed {
	t.Helper()
	recs, err := h.st.ListResources(t.Context(), project)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Type == typ && r.Name == name {
			return r
		}
	}
	t.Fatalf("no %s %s recorded", typ, name)
	return nil
}

// failoverTasks returns the volume's restores a failover made, newest first.
func (h *harness) failoverTasks(t *testing.T) []store.VolumeTask {
	t.Helper()
	list, err := h.st.ListVolumeTasks(t.Context(), store.VolumeTaskFilter{Project: project, Volume: "data", Kind: string(contract.TaskRestore)})
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(list, func(t store.VolumeTask) bool { return t.Trigger != api.TriggerFailover })
}

// TestALostHostsVolumeIsRestoredElsewhereAndItsCopyKeptStale walks one
// failover: nothing moves before after; then the volume's last good
// backup is restored on h2 with the egg held there, the records and
// desired states moved, an event telling the data window; the restore's
// end starts the egg; h1 back finds its copy stale, kept, never mounted,
// until it is forgotten.
func TestALostHostsVolumeIsRestoredElsewhereAndItsCopyKeptStale(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		failoverWorld(t, h)
		b := h.goodBackup(t, "data")
		h.clock.advance(5 * time.Second)
		h.report(t, "h1", nil) // last heard
		lastHeard := h.clock.now()
		h.loseHost(t, "h1")

		h.clock.advance(11 * time.Second)
		h.report(t, "h2", nil)
		h.pass(t)
		if got := h.failoverTasks(t); len(got) != 0 {
			t.Fatalf("failover before after passed: %+v", got)
		}

		h.clock.advance(time.Second + time.Millisecond)
		h.report(t, "h2", nil)
		h.pass(t)
		tasks := h.failoverTasks(t)
		if len(tasks) != 1 || tasks[0].Host != "h2" || tasks[0].Backup != b || tasks[0].DeliveredAt.IsZero() ||
			tasks[0].Target != contract.VolumeName("h2", "default", "shop", "data") {
			t.Fatalf("failover restores: %+v; want one of backup %s delivered to h2 into its own volume", tasks, b)
		}
		d2 := h.desiredState(t, "h2")
		if w, ok := d2.Workload("default/shop/db"); !ok || w.Replicas != 0 || w.Volumes[0].DockerName != tasks[0].Target {
			t.Fatalf("db on h2 during the restore: %+v, %v; want held at 0 replicas mounting %s", w, ok, tasks[0].Target)
		}
		if !slices.ContainsFunc(d2.Volumes, func(v contract.VolumeSpec) bool { return v.Name == "data" && v.Stale == nil && !v.Delete }) {
			t.Fatalf("h2's volumes %+v: want data kept", d2.Volumes)
		}
		d1 := h.desiredState(t, "h1")
		if _, ok := d1.Workload("default/shop/db"); ok {
			t.Fatalf("db is still in h1's desired state: it would start there when h1 is heard again")
		}
		if len(d1.Volumes) != 1 || d1.Volumes[0].Stale == nil || d1.Volumes[0].Stale.MovedTo != "h2" || d1.Volumes[0].Delete {
			t.Fatalf("h1's volumes %+v: want data stale, moved to h2, not deleted", d1.Volumes)
		}
		vol := h.record(t, resource.Volume, "data")
		fo, err := inputs.Decode[api.VolumeFailover](vol.Outputs[inputs.OutputFailover].(map[string]any))
		if err != nil || vol.Outputs[inputs.OutputHost] != "h2" || fo.From != "h1" || fo.To != "h2" || fo.Backup != b ||
			!fo.LastHeard.Equal(lastHeard) || fo.DataWindow != "17s" {
			t.Fatalf("volume record outputs %+v (%v); want host h2 and the failover from h1 with a data window of 17s (the backup to the failover)", vol.Outputs, err)
		}
		egg := h.record(t, resource.Egg, "db")
		if pl := egg.Inputs["placement"].(map[string]any); pl["volume_host"] != "h2" {
			t.Fatalf("db's placement %+v: want its volume's host h2", pl)
		}
		e, ok := eventOf(h.events(t), store.EventVolumeFailedOver)
		if !ok || e.Host != "h2" || !strings.Contains(e.Message, "up to 17s") || !strings.Contains(e.Message, "on host h2") {
			t.Fatalf("volume.failed_over: %+v, %v; want one naming h2 and a 17s data window", e, ok)
		}

		h.pass(t)
		if got := h.failoverTasks(t); len(got) != 1 {
			t.Fatalf("a second pass failed over again: %+v", got)
		}

		h.report(t, "h2", []contract.VolumeTaskStatus{{ID: tasks[0].ID, State: contract.TaskDone, EndedAt: h.clock.now()}})
		h.pass(t)
		if w, _ := h.desiredState(t, "h2").Workload("default/shop/db"); w.Replicas != 1 {
			t.Fatalf("db has %d replicas on h2 after the restore, want 1", w.Replicas)
		}

		h.clock.advance(time.Second)
		h.report(t, "h1", nil) // back (a report marks its host up)
		h.pass(t)
		e, ok = eventOf(h.events(t), store.EventVolumeStaleCopy)
		if !ok || e.Host != "h1" || !strings.Contains(e.Message, "--from-host h1") {
			t.Fatalf("volume.stale_copy: %+v, %v; want one for h1 telling how to restore from it", e, ok)
		}
		states, err := h.svc.BackupStates(t.Context(), project)
		if err != nil {
			t.Fatal(err)
		}
		if len(states) != 1 || states[0].Failover == nil || states[0].Failover.To != "h2" || len(states[0].StaleCopies) != 1 ||
			states[0].StaleCopies[0].Found == nil {
			t.Fatalf("hatch status's volumes %+v: want the failover to h2 and h1's copy found", states)
		}
		if _, ok := h.desiredState(t, "h1").Workload("default/shop/db"); ok {
			t.Fatal("db came back to h1")
		}

		if err := h.svc.ForgetStaleCopy(t.Context(), project, "data", "nowhere", "alice"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("forgetting a copy no host has: %v, want ErrNotFound", err)
		}
		if err := h.svc.ForgetStaleCopy(t.Context(), project, "data", "h1", "alice"); err != nil {
			t.Fatal(err)
		}
		if d1 := h.desiredState(t, "h1"); len(d1.Volumes) != 1 || !d1.Volumes[0].Delete {
			t.Fatalf("h1's volumes after forget: %+v; want the stale copy marked for deletion", d1.Volumes)
		}
	})
}

// TestAFailoverWithNoGoodBackupMovesNothingAndSaysSoOnce: the egg stays
// where its data is, and one event says why.
func TestAFailoverWithNoGoodBackupMovesNothingAndSaysSoOnce(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		failoverWorld(t, h)
		h.loseHost(t, "h1")
		h.clock.advance(13 * time.Second)
		h.report(t, "h2", nil)
		h.pass(t)
		h.pass(t)
		if got := h.failoverTasks(t); len(got) != 0 {
			t.Fatalf("failover restores without a backup: %+v", got)
		}
		if host := h.record(t, resource.Volume, "data").Outputs[inputs.OutputHost]; host != "h1" {
			t.Fatalf("the volume moved to %v with nothing to restore", host)
		}
		var n int
		for _, e := range h.events(t) {
			if e.Type == store.EventVolumeFailoverFailed {
				n++
				if !strings.Contains(e.Message, "no good backup") {
					t.Errorf("volume.failover_failed says %q; want why", e.Message)
				}
			}
		}
		if n != 1 {
			t.Fatalf("%d volume.failover_failed events, want 1", n)
		}
	})
}

// TestAFailedFailoverRestoreNeverStartsTheEggOnAnEmptyVolume: the egg
// stays at 0 replicas after its restore failed, and the restore is tried
// again once failoverRetryGap has passed.
func TestAFailedFailoverRestoreNeverStartsTheEggOnAnEmptyVolume(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		first := []store.VolumeTask{failedOverToH2(t, h)}
		h.report(t, "h2", []contract.VolumeTaskStatus{{ID: first[0].ID, State: contract.TaskFailed, EndedAt: h.clock.now(), Error: "chunk corrupt"}})
		h.pass(t)
		if w, _ := h.desiredState(t, "h2").Workload("default/shop/db"); w.Replicas != 0 {
			t.Fatalf("db has %d replicas after its failover restore failed, want 0", w.Replicas)
		}
		if got := h.failoverTasks(t); len(got) != 1 {
			t.Fatalf("tried again before the gap: %+v", got)
		}
		h.clock.advance(failoverRetryGap)
		h.report(t, "h2", nil)
		h.pass(t)
		again := h.failoverTasks(t)
		if len(again) != 2 || again[0].Host != "h2" || again[0].Backup != first[0].Backup || store.TaskEnded(again[0].State) {
			t.Fatalf("failover restores after the gap: %+v; want a second one of the same backup on h2", again)
		}
		if w, _ := h.desiredState(t, "h2").Workload("default/shop/db"); w.Replicas != 0 {
			t.Fatalf("db has %d replicas during the second try, want 0", w.Replicas)
		}
		for i := 2; i <= maxFailoverRestores; i++ {
			last := h.failoverTasks(t)[0]
			h.report(t, "h2", []contract.VolumeTaskStatus{{ID: last.ID, State: contract.TaskFailed, EndedAt: h.clock.now(), Error: "chunk corrupt"}})
			h.pass(t)
			h.clock.advance(failoverRetryGap)
			h.report(t, "h2", nil)
			h.pass(t)
			h.pass(t)
		}
		if got := h.failoverTasks(t); len(got) != maxFailoverRestores {
			t.Fatalf("%d failover restores, want %d tries and no more", len(got), maxFailoverRestores)
		}
		var gaveUp int
		for _, e := range h.events(t) {
			if e.Type == store.EventVolumeFailoverFailed && strings.Contains(e.Message, "failed 3 times") && strings.Contains(e.Message, "egg db stays stopped") {
				gaveUp++
			}
		}
		if gaveUp != 1 {
			t.Fatalf("%d events saying the failover gave up, want 1", gaveUp)
		}
		if w, _ := h.desiredState(t, "h2").Workload("default/shop/db"); w.Replicas != 0 {
			t.Fatalf("db has %d replicas after the failover gave up, want 0", w.Replicas)
		}
	})
}

// TestAFailoverNeverRestoresOverAStaleCopy: the volume failed over from h1
// to h2; h2 lost in turn, the only other host, h1, holds a stale copy,
// which a restore would overwrite: nothing moves and the event says why.
// Once that copy is forgotten, the volume goes back to h1.
func TestAFailoverNeverRestoresOverAStaleCopy(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		first := failedOverToH2(t, h)
		h.report(t, "h2", []contract.VolumeTaskStatus{{ID: first.ID, State: contract.TaskDone, EndedAt: h.clock.now()}})
		h.report(t, "h1", nil) // back
		h.pass(t)
		// A backup taken on h2, so that h2's loss has something to restore.
		got, err := h.svc.Backup(t.Context(), project, "data", "", "")
		if err != nil {
			t.Fatal(err)
		}
		m, _, err := backup.Backup(t.Context(), strings.NewReader("kv"), h.volumeKeyOf(t, "data"), hostStore{svc: h.svc, host: "h2", task: got.ID}, h.clock.now())
		if err != nil {
			t.Fatal(err)
		}
		h.report(t, "h2", []contract.VolumeTaskStatus{{ID: got.ID, State: contract.TaskDone, EndedAt: h.clock.now(), Manifest: m.ID}})
		h.pass(t)

		h.loseHost(t, "h2")
		h.clock.advance(13 * time.Second)
		h.report(t, "h1", nil)
		h.pass(t)
		if got := h.failoverTasks(t); len(got) != 1 {
			t.Fatalf("failover restores: %+v; want none over h1's stale copy", got)
		}
		e, ok := eventOf(h.events(t), store.EventVolumeFailoverFailed)
		if !ok || !strings.Contains(e.Message, "stale copy") {
			t.Fatalf("volume.failover_failed: %+v, %v; want one naming the stale copy in the way", e, ok)
		}
		if err := h.svc.ForgetStaleCopy(t.Context(), project, "data", "h1", "alice"); err != nil {
			t.Fatal(err)
		}
		h.pass(t)
		tasks := h.failoverTasks(t)
		if len(tasks) != 2 || tasks[0].Host != "h1" || tasks[0].Backup != m.ID {
			t.Fatalf("failover restores after the copy was forgotten: %+v; want one of %s on h1", tasks, m.ID)
		}
		d1 := h.desiredState(t, "h1")
		if len(d1.Volumes) != 1 || d1.Volumes[0].Delete || d1.Volumes[0].Stale != nil {
			t.Fatalf("h1's volumes %+v: want only the volume kept (the forgotten copy's entry gone: it has its Docker name)", d1.Volumes)
		}
	})
}
