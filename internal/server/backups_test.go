package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/backup"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/volumes"
)

// TestAHostTokenReachesOnlyItsOwnVolumeTasks walks the hosts' data routes
// of volume backups with two hosts' tokens: a host writes a chunk only to
// its own open backup (not to another host's, through its own path or
// the other's), and reads only the chunks its own restore's manifest
// lists (a chunk the store holds but the manifest does not list is not
// found).
func TestAHostTokenReachesOnlyItsOwnVolumeTasks(t *testing.T) {
	sh := newSecureHarness(t, DefaultConfig())
	live, _ := sh.createJoinToken(time.Hour, 10)
	alpha, alphaTok := sh.join(live, "alpha")
	beta, betaTok := sh.join(live, "beta")
	now := sh.clock.Now()
	task := func(id, kind, backupID string) {
		t.Helper()
		if err := sh.store.CreateVolumeTask(t.Context(), store.VolumeTask{ID: id, Kind: kind, Project: "default/shop", Volume: "data",
			Host: alpha, Trigger: "manual", CreatedAt: now, DeliveredAt: now, State: store.TaskPending, Backup: backupID}, nil); err != nil {
			t.Fatal(err)
		}
	}
	status := func(token, method, path string, body []byte) (int, []byte) {
		t.Helper()
		resp := sh.doAs(token, method, path, bytes.NewReader(body))
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	const backupTask, restoreTask = "00000000000000b1", "00000000000000c1"
	task(backupTask, "backup", "")

	stray := []byte("a chunk no manifest lists")
	sum := sha256.Sum256(stray)
	strayID := hex.EncodeToString(sum[:])
	for _, c := range []struct {
		who, token, host string
		want             int
	}{
		{"beta, through its own path", betaTok, beta, http.StatusForbidden},
		{"beta, through alpha's path", betaTok, alpha, http.StatusForbidden},
		{"alpha", alphaTok, alpha, http.StatusNoContent},
	} {
		if got, body := status(c.token, "PUT", "/api/v1/hosts/"+c.host+"/volume-tasks/"+backupTask+"/chunks/"+strayID, stray); got != c.want {
			t.Errorf("PUT a chunk of alpha's backup as %s: %d %s, want %d", c.who, got, body, c.want)
		}
	}
	if got, _ := status(alphaTok, "PUT", "/api/v1/hosts/"+alpha+"/volume-tasks/"+backupTask+"/chunks/"+strings.Repeat("0", 64), stray); got != http.StatusBadRequest {
		t.Errorf("PUT a chunk whose SHA-256 is not its ID: %d, want 400", got)
	}

	// A backup in the store, and a restore of it assigned to alpha.
	key, err := backup.DeriveVolumeKey(bytes.Repeat([]byte{7}, 32), backup.VolumeID{Namespace: "default", Project: "shop", Volume: "data"})
	if err != nil {
		t.Fatal(err)
	}
	bs := &volumes.BlobStore{Blobs: sh.blobs, Tasks: sh.store}
	m, _, err := backup.Backup(t.Context(), strings.NewReader(strings.Repeat("kv data ", 20_000)), key, bs, now)
	if err != nil {
		t.Fatal(err)
	}
	task(restoreTask, "restore", m.ID)
	chunk := "/volume-tasks/" + restoreTask + "/chunks/" + m.Chunks[0].ID
	if got, body := status(alphaTok, "GET", "/api/v1/hosts/"+alpha+chunk, nil); got != http.StatusOK || backup.CheckObject(m.Chunks[0].ID, body) != nil {
		t.Errorf("alpha GETs a chunk of its restore: %d, want 200 with the chunk", got)
	}
	if got, _ := status(alphaTok, "GET", "/api/v1/hosts/"+alpha+"/volume-tasks/"+restoreTask+"/chunks/"+strayID, nil); got != http.StatusNotFound {
		t.Errorf("alpha GETs a stored chunk its restore's manifest does not list: %d, want 404", got)
	}
	if got, _ := status(betaTok, "GET", "/api/v1/hosts/"+beta+chunk, nil); got != http.StatusForbidden {
		t.Errorf("beta GETs a chunk of alpha's restore: %d, want 403", got)
	}
	if got, _ := status(alphaTok, "GET", "/api/v1/hosts/"+alpha+"/volume-tasks/"+backupTask+"/chunks/"+m.Chunks[0].ID, nil); got != http.StatusForbidden {
		t.Errorf("alpha GETs a chunk through its backup task: %d, want 403", got)
	}
	if got, body := status(alphaTok, "GET", "/api/v1/hosts/"+alpha+"/volume-tasks/"+restoreTask+"/manifest", nil); got != http.StatusOK ||
		backup.CheckObject(m.ID, body) != nil {
		t.Errorf("alpha GETs its restore's manifest: %d, want 200 with the manifest", got)
	}
	// An ended restore reads nothing more.
	if _, err := sh.store.RecordVolumeTaskProgress(t.Context(), restoreTask, store.VolumeTaskProgress{State: store.TaskDone, EndedAt: now}); err != nil {
		t.Fatal(err)
	}
	if got, _ := status(alphaTok, "GET", "/api/v1/hosts/"+alpha+chunk, nil); got != http.StatusForbidden {
		t.Errorf("alpha GETs a chunk of its ended restore: %d, want 403", got)
	}
}

// The cross-host rows of the volume tasks' data routes: mallory tries
// each on alpha's open backup and restore, through its own {id} and
// through alpha's, and is refused both ways; nothing of what it sent is
// stored.
func init() {
	const backupTask, restoreTask = "00000000000000b1", "00000000000000c1"
	chunk := []byte("mallory's chunk")
	sum := sha256.Sum256(chunk)
	chunkID := hex.EncodeToString(sum[:])
	row := func(method, suffix string, body []byte) func(t *testing.T, w *crossHostWorld) {
		return func(t *testing.T, w *crossHostWorld) {
			now := w.sh.clock.Now()
			for _, tk := range []store.VolumeTask{
				{ID: backupTask, Kind: "backup", Host: w.alpha.ID},
				{ID: restoreTask, Kind: "restore", Host: w.alpha.ID, Backup: chunkID},
			} {
				tk.Project, tk.Volume, tk.Trigger, tk.CreatedAt, tk.DeliveredAt, tk.State = "default/shop", "data", "manual", now, now, store.TaskPending
				if err := w.sh.store.CreateVolumeTask(t.Context(), tk, nil); err != nil {
					t.Fatal(err)
				}
			}
			for _, host := range []string{w.mallory.ID, w.alpha.ID} {
				var r io.Reader
				if body != nil {
					r = bytes.NewReader(body)
				}
				resp, err := w.mallory.C.Send(t.Context(), method, "/api/v1/hosts/"+host+"/volume-tasks/"+suffix, r, "application/octet-stream")
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusForbidden {
					t.Errorf("mallory's %s of alpha's task through host %s's path: %d, want 403", method, host, resp.StatusCode)
				}
			}
			if _, err := w.sh.blobs.Stat(t.Context(), "sha256:"+chunkID); err == nil {
				t.Errorf("mallory's chunk was stored")
			}
		}
	}
	crossHostRows["POST /api/v1/hosts/{id}/volume-tasks/{task}/missing"] = row("POST", backupTask+"/missing", []byte(`["`+chunkID+`"]`))
	crossHostRows["PUT /api/v1/hosts/{id}/volume-tasks/{task}/chunks/{chunk}"] = row("PUT", backupTask+"/chunks/"+chunkID, chunk)
	crossHostRows["PUT /api/v1/hosts/{id}/volume-tasks/{task}/manifest/{manifest}"] = row("PUT", backupTask+"/manifest/"+chunkID, chunk)
	crossHostRows["GET /api/v1/hosts/{id}/volume-tasks/{task}/manifest"] = row("GET", restoreTask+"/manifest", nil)
	crossHostRows["GET /api/v1/hosts/{id}/volume-tasks/{task}/chunks/{chunk}"] = row("GET", restoreTask+"/chunks/"+chunkID, nil)
}

// TestTheBackupRoutesAnswerTheAPIsShapes takes a project's volume through
// the project routes as the CLI does: a backup now (201, the task as
// recorded on the volume's host), read back and long-polled, listed,
// refused to forget while open (409), and a restore with no good backup
// yet (404).
func TestTheBackupRoutesAnswerTheAPIsShapes(t *testing.T) {
	sh := newSecureHarness(t, DefaultConfig())
	live, _ := sh.createJoinToken(time.Hour, 10)
	alpha, alphaTok := sh.join(live, "alpha")
	report := `{"host_id": "` + alpha + `", "version": "", "containers": []}`
	if resp := sh.doAs(alphaTok, "POST", "/api/v1/hosts/"+alpha+"/status", strings.NewReader(report)); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("alpha's report: %d", resp.StatusCode)
	}
	if err := sh.store.PutResource(t.Context(), "default/shop", &resource.Deployed{ID: "v1", Type: resource.Volume, Name: "data",
		Inputs:  map[string]any{"labels": map[string]any{}, "egg": "db", "placement": map[string]any{}, "resources": map[string]any{}},
		Outputs: map[string]any{"name": "data", "host": alpha}}); err != nil {
		t.Fatal(err)
	}
	const p = "/api/v1/projects/default/shop"
	got := decode[api.VolumeTask](t, sh.do("POST", p+"/volumes/data/backups", nil), http.StatusCreated)
	if got.Kind != "backup" || got.Volume != "data" || got.Host != alpha || got.HostName != "alpha" || got.State != store.TaskPending ||
		got.Trigger != api.TriggerManual || got.Consistency != "hooks" {
		t.Fatalf("the backup: %+v", got)
	}
	if again := decode[api.VolumeTask](t, sh.do("GET", p+"/volume-tasks/"+got.ID+"?state=pending&wait=50ms", nil), http.StatusOK); again.ID != got.ID {
		t.Fatalf("long-poll: %+v", again)
	}
	list := decode[[]api.VolumeTask](t, sh.do("GET", p+"/backups?volume=data", nil), http.StatusOK)
	if len(list) != 1 || list[0].ID != got.ID {
		t.Fatalf("backups: %+v", list)
	}
	decode[api.Error](t, sh.do("DELETE", p+"/backups/"+got.ID, nil), http.StatusConflict)
	decode[api.Error](t, sh.do("POST", p+"/volumes/data/restore", strings.NewReader(`{"dry_run": true}`)), http.StatusNotFound)
	decode[api.Error](t, sh.do("POST", p+"/volumes/data/restore", strings.NewReader(`{"to": "Bad Name"}`)), http.StatusBadRequest)
}
