package agent

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/backup"
	"github.com/hatchery/hatchery/internal/backup/backuptest"
	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/containers/docker"
	"github.com/hatchery/hatchery/internal/contract"
)

// The real adapter and client are what volume tasks use.
var (
	_ volumeDocker = (*docker.Engine)(nil)
	_ taskStores   = (*HTTPClient)(nil)
)

var taskNow = time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)

func pureTask(id string) contract.VolumeTask {
	return contract.VolumeTask{ID: id, Kind: contract.TaskBackup, Key: contract.SecretValue(strings.Repeat("ab", 32)),
		Volume: contract.VolumeSpec{Namespace: "default", Project: "shop", Name: "data", DockerName: "h1-default-shop-data"}}
}

func statusOf(t *testing.T, p taskPlan, id string) contract.VolumeTaskStatus {
	t.Helper()
	for _, st := range p.statuses {
		if st.ID == id {
			return st
		}
	}
	t.Fatalf("no status for task %s in %+v", id, p.statuses)
	return contract.VolumeTaskStatus{}
}

func TestANewTaskIsBegunOnceAndRecordedAsBegun(t *testing.T) {
	p := planVolumeTasks(taskInput{tasks: []contract.VolumeTask{pureTask("t1"), pureTask("t1")}, now: taskNow})
	if len(p.begins) != 1 || p.begins[0].ID != "t1" {
		t.Fatalf("begins %+v: want t1 once", p.begins)
	}
	if _, ok := p.records["t1"]; !ok {
		t.Fatal("a task begun is not recorded: a restart would begin it again")
	}
	// The next converge sees it live: not begun again.
	again := planVolumeTasks(taskInput{tasks: []contract.VolumeTask{pureTask("t1")}, records: p.records,
		live: map[string]contract.VolumeTaskStatus{"t1": {ID: "t1", State: contract.TaskRunning, Phase: "copy"}}, now: taskNow})
	if len(again.begins) != 0 || statusOf(t, again, "t1").Phase != "copy" {
		t.Errorf("a live task: begins %+v, status %+v", again.begins, statusOf(t, again, "t1"))
	}
	// Gone from the desired state (and so from the memory), then back.
	back := planVolumeTasks(taskInput{tasks: []contract.VolumeTask{pureTask("t1")}, begun: map[string]bool{"t1": true}, now: taskNow})
	if st := statusOf(t, back, "t1"); len(back.begins) != 0 || st.State != contract.TaskFailed {
		t.Errorf("a task this process began before, back in the desired state: begins %d, status %+v: want failed", len(back.begins), st)
	}
}

func TestATaskRunningWhenTheAgentRestartedIsReportedFailedNeverBegunAgain(t *testing.T) {
	for _, state := range []contract.TaskState{contract.TaskRunning, contract.TaskPending} {
		records := map[string]contract.VolumeTaskStatus{"t1": {ID: "t1", State: state, Phase: "copy", StartedAt: taskNow.Add(-time.Minute), Bytes: 100}}
		p := planVolumeTasks(taskInput{tasks: []contract.VolumeTask{pureTask("t1")}, records: records, now: taskNow})
		st := statusOf(t, p, "t1")
		if len(p.begins) != 0 || st.State != contract.TaskFailed || st.Error != restartedDuring || st.Manifest != "" {
			t.Errorf("a task %s before a restart: begins %d, status %+v: want failed, not begun", state, len(p.begins), st)
		}
		if p.records["t1"].State != contract.TaskFailed {
			t.Errorf("its record %+v: want failed from now on", p.records["t1"])
		}
	}
}

func TestAnEndedTaskIsReportedUntilItLeavesTheDesiredState(t *testing.T) {
	done := contract.VolumeTaskStatus{ID: "t1", State: contract.TaskDone, Manifest: strings.Repeat("c", 64)}
	records := map[string]contract.VolumeTaskStatus{"t1": done}
	p := planVolumeTasks(taskInput{tasks: []contract.VolumeTask{pureTask("t1")}, records: records, now: taskNow})
	if st := statusOf(t, p, "t1"); st != done || len(p.begins) != 0 {
		t.Errorf("a done task: %+v, begins %d", st, len(p.begins))
	}
	gone := planVolumeTasks(taskInput{records: records, now: taskNow})
	if len(gone.statuses) != 0 || len(gone.records) != 0 {
		t.Errorf("a task gone from the desired state: statuses %+v, records %+v", gone.statuses, gone.records)
	}
}

func TestATaskGoneFromTheDesiredStateIsAbandonedUnlessTheStateIsTheCaches(t *testing.T) {
	live := map[string]contract.VolumeTaskStatus{"t1": {ID: "t1", State: contract.TaskRunning}, "t2": {ID: "t2", State: contract.TaskDone}}
	records := map[string]contract.VolumeTaskStatus{"t1": live["t1"], "t2": live["t2"]}
	p := planVolumeTasks(taskInput{live: live, records: records, now: taskNow})
	if len(p.abandons) != 1 || p.abandons[0] != "t1" {
		t.Errorf("abandons %v: want t1 (t2 has ended)", p.abandons)
	}
	held := planVolumeTasks(taskInput{live: live, records: records, hold: true, tasks: []contract.VolumeTask{pureTask("t3")}, now: taskNow})
	if len(held.abandons) != 0 || len(held.begins) != 0 || len(held.records) != 2 {
		t.Errorf("from the cache: abandons %v, begins %d, records %d: want none, none, both kept", held.abandons, len(held.begins), len(held.records))
	}
	if st := statusOf(t, held, "t3"); st.State != contract.TaskPending {
		t.Errorf("a new task from the cache: %+v, want pending", st)
	}
}

func TestABadTaskIsRefusedNamingItsProblem(t *testing.T) {
	cases := map[string]func(*contract.VolumeTask){
		"its ID":                 func(t *contract.VolumeTask) { t.ID = "../x" },
		"volume key":             func(t *contract.VolumeTask) { t.Key = "short" },
		"Docker name":            func(t *contract.VolumeTask) { t.Volume.DockerName = "a/b" },
		"kind":                   func(t *contract.VolumeTask) { t.Kind = "copy" },
		"names no egg":           func(t *contract.VolumeTask) { t.Before = []string{"x"} },
		"consistency":            func(t *contract.VolumeTask) { t.Consistency = "pause" },
		"not a backup ID":        func(t *contract.VolumeTask) { t.Kind, t.Target = contract.TaskRestore, "v" },
		"not a valid Docker vol": func(t *contract.VolumeTask) { t.Kind, t.Backup = contract.TaskRestore, strings.Repeat("c", 64) },
	}
	for want, breakIt := range cases {
		task := pureTask("t1")
		breakIt(&task)
		p := planVolumeTasks(taskInput{tasks: []contract.VolumeTask{task}, now: taskNow})
		st := statusOf(t, p, task.ID)
		if len(p.begins) != 0 || st.State != contract.TaskFailed || !strings.Contains(st.Error, want) {
			t.Errorf("%s broken: begins %d, status %+v: want failed saying %q", want, len(p.begins), st, want)
		}
	}
	hooks := pureTask("t1")
	hooks.Egg, hooks.Before = "kv", []string{"kv", "-checkpoint"}
	p := planVolumeTasks(taskInput{tasks: []contract.VolumeTask{hooks}, noExec: true, now: taskNow})
	if st := statusOf(t, p, "t1"); st.State != contract.TaskFailed || !strings.Contains(st.Error, "--no-exec") {
		t.Errorf("hooks on a --no-exec host: %+v", st)
	}
}

// volumeFake is the fake Docker host with volumes whose reads block until
// released: the agent's volume tasks, without Docker.
type volumeFake struct {
	containers.Client
	mu      sync.Mutex
	reads   int
	release chan struct{}
	// cancelled gets each read whose context ended first.
	cancelled chan string
}

func (f *volumeFake) ReadVolume(ctx context.Context, image, name string, read func(io.Reader) error) error {
	f.mu.Lock()
	f.reads++
	f.mu.Unlock()
	select {
	case <-ctx.Done():
		f.cancelled <- name
		return ctx.Err()
	case <-f.release:
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "hatch-volume/a", Mode: 0o644, Size: 5})
	tw.Write([]byte("hello"))
	tw.Close()
	return read(&buf)
}

func (f *volumeFake) readCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

func (f *volumeFake) WriteVolume(context.Context, string, string, io.Reader) error { return nil }
func (f *volumeFake) VolumeUsers(context.Context, string, bool) ([]string, error)  { return nil, nil }
func (f *volumeFake) RecreateVolume(context.Context, string, string, string, map[string]string) error {
	return nil
}
func (f *volumeFake) RemoveVolumeHelpers(context.Context) error { return nil }
func (f *volumeFake) EggContainer(context.Context, string, string, string) (string, error) {
	return "", nil
}
func (f *volumeFake) Exec(context.Context, string, []string, io.Writer) (int, error) { return 0, nil }

// storeControlPlane is the fake control plane with one in-memory backup
// store for every task.
type storeControlPlane struct {
	*fakeControlPlane
	store *backuptest.Mem
}

func (cp storeControlPlane) TaskStore(string) backup.Store { return cp.store }

func taskStatus(a *Agent, id string) (contract.VolumeTaskStatus, bool) {
	r, _ := a.Status()
	for _, st := range r.VolumeTasks {
		if st.ID == id {
			return st, true
		}
	}
	return contract.VolumeTaskStatus{}, false
}

func waitTask(t *testing.T, a *Agent, id string, ok func(contract.VolumeTaskStatus) bool) contract.VolumeTaskStatus {
	t.Helper()
	var last contract.VolumeTaskStatus
	eventually(t, "task "+id, func() error {
		a.Notify()
		st, found := taskStatus(a, id)
		last = st
		if found && ok(st) {
			return nil
		}
		return fmt.Errorf("task %s: %+v (found %v)", id, st, found)
	})
	return last
}

func TestAnAgentDoesATaskOnceReportsItUntilItLeavesAndAbandonsOneThatLeftEarly(t *testing.T) {
	d := &volumeFake{Client: newFake(t), release: make(chan struct{}), cancelled: make(chan string, 4)}
	cp := storeControlPlane{fakeControlPlane: newFakeControlPlane(), store: backuptest.NewMem()}
	a := startAgent(t, testConfig(t, d, cp, t.TempDir()))
	withTasks := func(ts ...contract.VolumeTask) {
		ds := desiredState()
		ds.VolumeTasks = ts
		cp.set(ds)
	}
	withTasks(pureTask("t1"))
	waitTask(t, a, "t1", func(st contract.VolumeTaskStatus) bool { return st.State == contract.TaskRunning && st.Phase == "copy" })
	close(d.release)
	done := waitTask(t, a, "t1", func(st contract.VolumeTaskStatus) bool { return st.State.Ended() })
	if done.State != contract.TaskDone || done.Manifest == "" || done.Bytes == 0 {
		t.Fatalf("task t1 ended %+v: want done with a manifest", done)
	}
	if _, err := cp.store.GetManifest(t.Context(), done.Manifest); err != nil {
		t.Errorf("the reported manifest is not in the store: %v", err)
	}
	for range 3 {
		a.Notify()
		time.Sleep(20 * time.Millisecond)
	}
	if st, _ := taskStatus(a, "t1"); st.State != contract.TaskDone || d.readCount() != 1 {
		t.Errorf("after more converges: %+v, %d reads: want done, read once", st, d.readCount())
	}
	withTasks()
	eventually(t, "t1 leaves the report", func() error {
		a.Notify()
		if _, found := taskStatus(a, "t1"); found {
			return fmt.Errorf("still reported")
		}
		return nil
	})

	// Back in the desired state: failed, not begun again.
	withTasks(pureTask("t1"))
	if st := waitTask(t, a, "t1", func(st contract.VolumeTaskStatus) bool { return st.State.Ended() }); st.State != contract.TaskFailed || d.readCount() != 1 {
		t.Errorf("t1 back in the desired state: %+v, %d reads: want failed, read once", st, d.readCount())
	}

	// A task that leaves while it runs is abandoned: its copy is cancelled.
	d.release = make(chan struct{})
	withTasks(pureTask("t2"))
	waitTask(t, a, "t2", func(st contract.VolumeTaskStatus) bool { return st.Phase == "copy" })
	withTasks()
	select {
	case <-d.cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("a task gone from the desired state was not cancelled")
	}
}

func TestATaskCutShortByARestartIsReportedFailedAndNotBegunAgain(t *testing.T) {
	dir := t.TempDir()
	cp := storeControlPlane{fakeControlPlane: newFakeControlPlane(), store: backuptest.NewMem()}
	ds := desiredState()
	ds.VolumeTasks = []contract.VolumeTask{pureTask("t1")}
	cp.set(ds)
	first := &volumeFake{Client: newFake(t), release: make(chan struct{}), cancelled: make(chan string, 4)}
	a, err := New(testConfig(t, first, cp, dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	waitTask(t, a, "t1", func(st contract.VolumeTaskStatus) bool { return st.Phase == "copy" })
	// What a kill -9 now leaves: the task is on disk as begun.
	onDisk, err := (&memoryFile{path: filepath.Join(dir, stateFile)}).load()
	if err != nil {
		t.Fatal(err)
	}
	if rec, ok := onDisk.VolumeTasks["t1"]; !ok || rec.State.Ended() {
		t.Fatalf("the memory on disk while t1 runs holds %+v (%v): want it begun", rec, ok)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}

	second := &volumeFake{Client: newFake(t), release: make(chan struct{}), cancelled: make(chan string, 4)}
	close(second.release)
	b := startAgent(t, testConfig(t, second, cp, dir))
	st := waitTask(t, b, "t1", func(st contract.VolumeTaskStatus) bool { return st.State.Ended() })
	if st.State != contract.TaskFailed || st.Error != restartedDuring || st.Manifest != "" {
		t.Errorf("after a restart: %+v, want failed (%q)", st, restartedDuring)
	}
	time.Sleep(100 * time.Millisecond)
	if second.readCount() != 0 {
		t.Errorf("the restarted agent read the volume %d times: the task was begun again", second.readCount())
	}
	if ms, _ := cp.store.ListManifests(t.Context()); len(ms) != 0 {
		t.Errorf("a backup cut short left manifests %v", ms)
	}
}
