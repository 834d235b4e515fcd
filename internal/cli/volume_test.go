package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/client"
)

// backupAPI answers the backup routes of internal/api/backups.go as a
// control plane would, from canned answers, and records what it was sent.
type backupAPI struct {
	mu sync.Mutex // guards every field below
	// started is the answer of POST .../backups and of a restore's real
	// POST; steps are the task's next states, one per long-poll.
	started api.VolumeTask
	steps   []api.VolumeTask
	list    []api.VolumeTask
	plan    api.RestorePlan
	// What was asked.
	restores []api.RestoreRequest
	polls    []string // each long-poll's state=
	forgot   []string
	starts   int
}

func newBackupAPI(t *testing.T) *backupAPI {
	t.Helper()
	isolate(t)
	f := &backupAPI{}
	mux := http.NewServeMux()
	const project = "/api/v1/projects/{ns}/{p}"
	mux.HandleFunc("POST "+project+"/volumes/{v}/backups", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.starts++
		writeTestJSON(w, http.StatusCreated, f.started)
	})
	mux.HandleFunc("GET "+project+"/volume-tasks/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if r.PathValue("id") != f.started.ID {
			writeTestJSON(w, http.StatusNotFound, api.Error{Code: "not_found", Message: "no such task"})
			return
		}
		f.polls = append(f.polls, r.URL.Query().Get("state"))
		if _, err := time.ParseDuration(r.URL.Query().Get("wait")); err != nil {
			writeTestJSON(w, http.StatusBadRequest, api.Error{Code: "bad_request", Message: "wait: " + err.Error()})
			return
		}
		next := f.steps[0]
		if len(f.steps) > 1 {
			f.steps = f.steps[1:]
		}
		writeTestJSON(w, http.StatusOK, next)
	})
	mux.HandleFunc("GET "+project+"/backups", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		var out []api.VolumeTask
		for _, b := range f.list {
			if v := r.URL.Query().Get("volume"); v == "" || v == b.Volume {
				out = append(out, b)
			}
		}
		writeTestJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("POST "+project+"/volumes/{v}/restore", func(w http.ResponseWriter, r *http.Request) {
		var req api.RestoreRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			writeTestJSON(w, http.StatusBadRequest, api.Error{Code: "bad_request", Message: err.Error()})
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.restores = append(f.restores, req)
		if req.DryRun {
			writeTestJSON(w, http.StatusOK, f.plan)
			return
		}
		writeTestJSON(w, http.StatusCreated, f.started)
	})
	mux.HandleFunc("DELETE "+project+"/backups/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.forgot = append(f.forgot, r.PathValue("ns")+"/"+r.PathValue("p")+"/"+r.PathValue("id"))
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Setenv(client.EnvServer, srv.URL)
	t.Setenv(client.EnvToken, adminToken())
	return f
}

var taskStart = time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)

func backupTask(state, phase string) api.VolumeTask {
	return api.VolumeTask{ID: "vt-1", Kind: "backup", Namespace: "default", Project: "shop", Volume: "data",
		Host: "h-1", HostName: "h1", Trigger: api.TriggerManual, CreatedAt: taskStart, State: state, Phase: phase}
}

func TestVolumeBackupPrintsEachPhaseThenItsSizeSentChunksAndDuration(t *testing.T) {
	f := newBackupAPI(t)
	f.started = backupTask("pending", "")
	done := backupTask("done", "")
	done.StartedAt, done.EndedAt = taskStart, taskStart.Add(12300*time.Millisecond)
	done.Manifest, done.Bytes, done.SentBytes, done.StoredBytes, done.Chunks, done.NewChunks = "m-3f9c", 200<<20, 4<<20, 150<<20, 120, 3
	f.steps = []api.VolumeTask{backupTask("running", "before"), backupTask("running", "before"), backupTask("running", "copy"), backupTask("running", "after"), done}

	code, stdout, stderr := run(t, "volume", "backup", "shop", "data")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	phases := []string{"backup vt-1 of volume data on host h1", "pending", "running: before", "running: copy", "running: after", "done"}
	at := 0
	for _, p := range phases {
		i := strings.Index(stderr[at:], p)
		if i < 0 {
			t.Fatalf("stderr lacks %q after offset %d (phases in order, each once):\n%s", p, at, stderr)
		}
		at += i + len(p)
	}
	if n := strings.Count(stderr, "running: before"); n != 1 {
		t.Errorf("an unchanged phase printed %d times:\n%s", n, stderr)
	}
	for _, want := range []string{"backup m-3f9c of volume data", "200.0 MB", "4.0 MB sent", "3 of 120 chunks new", "150.0 MB stored", "in 12.3s"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the summary lacks %q: %s", want, stdout)
		}
	}
	if f.polls[0] != "pending" || f.polls[len(f.polls)-1] != "running" {
		t.Errorf("long-polls sent states %v, want each the task's last known state", f.polls)
	}
}

func TestAFailedVolumeBackupExitsOneWithItsErrorAndItsHooksOutputDefused(t *testing.T) {
	f := newBackupAPI(t)
	f.started = backupTask("pending", "")
	failed := backupTask("failed", "")
	failed.Error = "before exited with code 2: the copy was skipped"
	failed.Output = "pg_dump: connection refused\n\x1b]52;c;Y3VybA==\aowned\r"
	f.steps = []api.VolumeTask{failed}

	code, stdout, stderr := run(t, "volume", "backup", "shop", "data")
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr %s", code, stderr)
	}
	if stdout != "" {
		t.Errorf("a failed backup printed a summary: %q", stdout)
	}
	checkDefused(t, "hatch volume backup", stderr, false, "before exited with code 2", "  | pg_dump: connection refused", `  | \x1b]52;c;Y3VybA==\aowned\r`)
}

func TestVolumeBackupDetachedPrintsTheTaskIDOnly(t *testing.T) {
	f := newBackupAPI(t)
	f.started = backupTask("pending", "")
	code, stdout, stderr := run(t, "volume", "backup", "-d", "shop", "data")
	if code != 0 || stdout != "vt-1\n" || len(f.polls) != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q, %d polls; want the ID and no follow", code, stdout, stderr, len(f.polls))
	}
}

func TestVolumeCommandsRefuseABadNameBeforeAnyRequest(t *testing.T) {
	f := newBackupAPI(t)
	for _, args := range [][]string{
		{"volume", "backup", "shop", "Data!"},
		{"volume", "backups", "shop", "../x"},
		{"volume", "restore", "shop", "data", "--to", "New Vol"},
		{"volume", "backups", "Shop"},
		{"volume", "backups", "shop", "-o", "yaml"},
	} {
		code, _, stderr := run(t, args...)
		if code != 1 || !strings.HasPrefix(stderr, "hatch: ") {
			t.Errorf("%v: exit %d, stderr %q; want refused", args, code, stderr)
		}
	}
	if f.starts != 0 || len(f.restores) != 0 {
		t.Fatalf("a request was sent for a bad name: %d backups, %d restores", f.starts, len(f.restores))
	}
}

func TestVolumeBackupsIsATableOrJSON(t *testing.T) {
	f := newBackupAPI(t)
	good := backupTask("done", "")
	good.Manifest, good.StartedAt, good.EndedAt, good.Bytes, good.SentBytes = "m-2", taskStart, taskStart.Add(4*time.Second), 3<<30, 0
	good.Consistency, good.Trigger = "stop", api.TriggerSchedule
	bad := backupTask("failed", "")
	bad.ID, bad.Volume, bad.HostName, bad.Consistency, bad.Error = "vt-0", "cache", "h\x1b[2J2", "hooks", "before failed"
	f.list = []api.VolumeTask{good, bad}

	code, stdout, stderr := run(t, "volume", "backups", "shop")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") {
		t.Fatalf("table:\n%s", stdout)
	}
	for _, col := range []string{"TIME", "VOLUME", "HOST", "SIZE", "SENT", "DURATION", "CONSISTENCY", "TRIGGER", "OUTCOME"} {
		if !strings.Contains(lines[0], col) {
			t.Errorf("the header lacks %s: %s", col, lines[0])
		}
	}
	for i, want := range [][]string{
		{"m-2", "data", "h1", "3.0 GB", "0 B", "4s", "stop", "schedule", "done"},
		{"vt-0", "cache", `h\x1b[2J2`, "hooks", "manual", "failed"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i+1], w) {
				t.Errorf("row %d %q lacks %q", i+1, lines[i+1], w)
			}
		}
	}
	checkDefused(t, "hatch volume backups", stdout, false)

	code, stdout, _ = run(t, "volume", "backups", "shop", "data", "-o", "json")
	var got []api.VolumeTask
	if err := json.Unmarshal([]byte(stdout), &got); code != 0 || err != nil {
		t.Fatalf("exit %d, %v: %s", code, err, stdout)
	}
	if len(got) != 1 || !reflect.DeepEqual(got[0], good) {
		t.Fatalf("json %+v, want the data volume's one backup %+v", got, good)
	}

	f.list = nil
	if code, stdout, _ = run(t, "volume", "backups", "shop", "-o", "json"); code != 0 || strings.TrimSpace(stdout) != "[]" {
		t.Fatalf("no backups as json: exit %d, %q; want []", code, stdout)
	}
}

func restoreFixture(t *testing.T) *backupAPI {
	f := newBackupAPI(t)
	from := backupTask("done", "")
	from.Manifest, from.EndedAt, from.Bytes = "m-7", time.Now().Add(-5*time.Hour), 64<<20
	f.plan = api.RestorePlan{Backup: from, Host: "h-1", HostName: "h1", Target: "hatch-default-shop-data", Replaces: true,
		Warnings: []string{"the backup is 5h old: what was written since is lost"}}
	f.started = api.VolumeTask{ID: "vt-9", Kind: "restore", Volume: "data", HostName: "h1", State: "pending", Backup: "m-7", Target: "hatch-default-shop-data"}
	done := f.started
	done.State, done.Bytes, done.StartedAt, done.EndedAt = "done", 64<<20, taskStart, taskStart.Add(2*time.Second)
	f.steps = []api.VolumeTask{{ID: "vt-9", Kind: "restore", State: "running", Phase: "fetch"}, done}
	return f
}

func TestVolumeRestoreWithoutATerminalShowsThePlanAndAsksForYes(t *testing.T) {
	f := restoreFixture(t)
	code, stdout, stderr := run(t, "volume", "restore", "shop", "data")
	if code != 1 || !strings.Contains(stderr, "--yes") {
		t.Fatalf("exit %d, stderr %q; want a refusal naming --yes", code, stderr)
	}
	for _, want := range []string{"Restore of default/shop volume data", "from backup m-7", "(5h0m", "ago) on host h1, 64.0 MB",
		"into volume hatch-default-shop-data on host h1: its content is replaced", "warning: the backup is 5h old"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the plan lacks %q:\n%s", want, stdout)
		}
	}
	if len(f.restores) != 1 || !f.restores[0].DryRun {
		t.Fatalf("requests %+v, want one dry run and nothing restored", f.restores)
	}
}

func TestVolumeRestoreYesRestoresThePlannedBackupAndFollowsIt(t *testing.T) {
	f := restoreFixture(t)
	code, stdout, stderr := run(t, "volume", "restore", "shop", "data", "--to", "data_old", "--yes")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	want := []api.RestoreRequest{{To: "data_old", DryRun: true}, {From: "m-7", To: "data_old"}}
	if !reflect.DeepEqual(f.restores, want) {
		t.Fatalf("requests %+v, want the plan then the restore of the backup it named, %+v", f.restores, want)
	}
	if !strings.Contains(stderr, "running: fetch") || !strings.Contains(stdout, "restored backup m-7 into volume hatch-default-shop-data: 64.0 MB written, in 2s") {
		t.Fatalf("stdout %q, stderr %q; want the phases and the summary", stdout, stderr)
	}
}

func TestVolumeRestoreOnATerminalRestoresOnlyOnYes(t *testing.T) {
	for _, answer := range []string{"n\n", "", "yes\n"} {
		f := restoreFixture(t)
		c, err := (&apiFlags{}).client()
		if err != nil {
			t.Fatal(err)
		}
		var out, errOut strings.Builder
		r := &restorer{in: strings.NewReader(answer), out: &out, interactive: true, now: time.Now}
		tf := &taskFollower{backups: c.Backups(), ns: "default", project: "shop", out: &out, errOut: &errOut, wait: time.Millisecond}
		err = r.restore(t.Context(), c.Backups(), tf, "default", "shop", "data", api.RestoreRequest{}, false)
		c.Close()
		restored := len(f.restores) == 2 && !f.restores[1].DryRun
		switch {
		case answer == "yes\n" && (err != nil || !restored):
			t.Errorf("answer %q: %v, %+v; want restored", answer, err, f.restores)
		case answer != "yes\n" && (err != errNotConfirmed || len(f.restores) != 1):
			t.Errorf("answer %q: %v, %+v; want not confirmed, only the dry run sent", answer, err, f.restores)
		}
		if !strings.Contains(out.String(), "Restore default/shop volume data? [y/N]") {
			t.Errorf("answer %q: no question asked:\n%s", answer, out.String())
		}
	}
}

func TestVolumeForgetSendsTheIDAndSaysSo(t *testing.T) {
	f := newBackupAPI(t)
	code, stdout, stderr := run(t, "volume", "forget", "-n", "prod", "shop", "m-7")
	if code != 0 || !reflect.DeepEqual(f.forgot, []string{"prod/shop/m-7"}) || !strings.Contains(stdout, "backup m-7 of prod/shop is forgotten") {
		t.Fatalf("exit %d, stdout %q, stderr %q, forgot %v", code, stdout, stderr, f.forgot)
	}
}

func TestValidateShowsABadBackupAtItsLineWithItsPath(t *testing.T) {
	path := writeProject(t, `project: shop
eggs:
  db:
    image: postgres:16
    volumes: ["data:/data"]
volumes:
  data:
    backup:
      schedule: {every: 30s}
      keep: 0
      consistency: snapshot
`)
	code, out, errOut := run(t, "validate", "-f", path)
	if code != 1 || out != "" {
		t.Fatalf("exit %d, stdout %q; want 1 and nothing", code, out)
	}
	for _, want := range []string{
		path + ":10: volumes.data.backup.keep must be between 1",
		path + `:11: volumes.data.backup.consistency: "snapshot" is not hooks`,
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
}
