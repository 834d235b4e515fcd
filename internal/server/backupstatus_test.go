package server

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

// TestTheProjectStatusShowsEachVolumesBackupsAndItsWarning reads the
// project status on a real store with three volumes: one whose newest
// backup failed (its warning names the time and error, though an older
// one was good), one scheduled every hour whose last good backup is three
// hours old, and one backed up well within its interval (no warning).
func TestTheProjectStatusShowsEachVolumesBackupsAndItsWarning(t *testing.T) {
	sh := newSecureHarness(t, DefaultConfig())
	live, _ := sh.createJoinToken(time.Hour, 10)
	alpha, _ := sh.join(live, "alpha")
	now := sh.clock.Now()
	volume := func(name string, backup map[string]any) {
		t.Helper()
		in := map[string]any{"labels": map[string]any{}, "egg": "db", "placement": map[string]any{}, "resources": map[string]any{}}
		if backup != nil {
			in["backup"] = backup
		}
		if err := sh.store.PutResource(t.Context(), "default/shop", &resource.Deployed{ID: "v-" + name, Type: resource.Volume, Name: name,
			Inputs: in, Outputs: map[string]any{"name": name, "host": alpha}}); err != nil {
			t.Fatal(err)
		}
	}
	hourly := map[string]any{"schedule": map[string]any{"every": "1h"}}
	volume("data", nil)
	volume("logs", hourly)
	volume("fresh", hourly)
	n := 0
	task := func(vol, state, errText string, ended time.Time) {
		t.Helper()
		n++
		tk := store.VolumeTask{ID: strings.Repeat("0", 15) + string(rune('a'+n)), Kind: "backup", Project: "default/shop", Volume: vol,
			Host: alpha, Trigger: "manual", CreatedAt: ended.Add(-time.Minute), State: store.TaskPending}
		if err := sh.store.CreateVolumeTask(t.Context(), tk, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := sh.store.RecordVolumeTaskProgress(t.Context(), tk.ID, store.VolumeTaskProgress{State: state, EndedAt: ended, Error: errText, Manifest: "m" + tk.ID}); err != nil {
			t.Fatal(err)
		}
	}
	task("data", store.TaskDone, "", now.Add(-3*time.Hour))
	task("data", store.TaskFailed, "before hook exited 1", now.Add(-time.Hour))
	task("logs", store.TaskDone, "", now.Add(-3*time.Hour))
	task("fresh", store.TaskDone, "", now.Add(-30*time.Minute))

	st := decode[api.ProjectStatus](t, sh.do("GET", "/api/v1/projects/default/shop/status", nil), http.StatusOK)
	by := map[string]api.VolumeBackupState{}
	for _, v := range st.Volumes {
		by[v.Name] = v
	}
	if len(by) != 3 {
		t.Fatalf("volumes %+v, want data, fresh and logs", st.Volumes)
	}
	data := by["data"]
	if data.LastOutcome != store.TaskFailed || data.LastGood == nil || !data.LastGood.Equal(now.Add(-3*time.Hour)) || data.Schedule != "" ||
		!strings.HasPrefix(data.Warning, "last backup failed at ") || !strings.HasSuffix(data.Warning, ": before hook exited 1") {
		t.Errorf("data: %+v", data)
	}
	logs := by["logs"]
	if logs.LastOutcome != store.TaskDone || logs.Schedule != "every 1h" ||
		logs.Warning != "last good backup is 3h old, more than twice its schedule's interval (1h)" {
		t.Errorf("logs: %+v (warning %q)", logs, logs.Warning)
	}
	if fresh := by["fresh"]; fresh.Warning != "" || fresh.LastGood == nil {
		t.Errorf("fresh: %+v", fresh)
	}
}
