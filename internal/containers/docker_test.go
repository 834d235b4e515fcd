package containers

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/contract"
)

func spec() contract.WorkloadSpec {
	return contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: "web", BlobID: "sha256:b",
		Replicas: 2, Labels: map[string]string{"team": "pay", LabelHost: "forged", LabelSlot: "9"}}
}

func TestLabelsRoundTripThroughFromLabels(t *testing.T) {
	labels := Labels("h1", spec(), 3, "abc")
	c := FromLabels("id1", "n", labels)
	if c.WorkloadID != "default/shop/web" || c.Slot != 3 || c.SpecHash != "abc" || c.BlobID != "sha256:b" || c.LabelError != "" {
		t.Errorf("identity lost: %+v", c)
	}
	if labels["team"] != "pay" {
		t.Error("the workload's own label was dropped")
	}
	if labels[LabelHost] != "h1" || labels[LabelSlot] != "3" {
		t.Errorf("a user label overrode Hatchery's: %v", labels)
	}
	if !Owned(labels, "h1") || Owned(labels, "h2") || Owned(labels, "") {
		t.Error("Owned does not match on the host ID")
	}
}

func TestOwnedRefusesForeignContainers(t *testing.T) {
	tests := []struct {
		name   string
		labels map[string]string
	}{
		{"no labels", nil},
		{"not managed", map[string]string{LabelHost: "h1"}},
		{"managed=false", map[string]string{LabelManaged: "false", LabelHost: "h1"}},
		{"another host", map[string]string{LabelManaged: "true", LabelHost: "h2"}},
		{"no host", map[string]string{LabelManaged: "true"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if Owned(tt.labels, "h1") {
				t.Error("a foreign container counts as this host's")
			}
		})
	}
}

func TestFromLabelsNeverRefusesAndNamesTheProblem(t *testing.T) {
	full := Labels("h1", spec(), 2, "abc")
	without := func(k string) map[string]string {
		m := map[string]string{}
		for kk, v := range full {
			if kk != k {
				m[kk] = v
			}
		}
		return m
	}
	with := func(k, v string) map[string]string {
		m := without(k)
		m[k] = v
		return m
	}
	tests := []struct {
		name     string
		labels   map[string]string
		wantSlot int
		wantErr  string
	}{
		{"all labels", full, 2, ""},
		{"no slot", without(LabelSlot), 0, "no io.hatchery.slot"},
		{"slot not a number", with(LabelSlot, "two"), 0, `malformed io.hatchery.slot "two"`},
		{"negative slot", with(LabelSlot, "-1"), 0, `malformed io.hatchery.slot "-1"`},
		{"slot with a leading zero", with(LabelSlot, "02"), 0, `malformed io.hatchery.slot "02"`},
		{"no spec", without(LabelSpec), 2, "no io.hatchery.spec"},
		{"no workload", without(LabelWorkload), 2, "no io.hatchery.workload"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := FromLabels("id", "n", tt.labels)
			if c.Slot != tt.wantSlot || c.LabelError != tt.wantErr {
				t.Errorf("slot %d error %q, want %d %q", c.Slot, c.LabelError, tt.wantSlot, tt.wantErr)
			}
		})
	}
}

func TestStateFromDocker(t *testing.T) {
	tests := []struct {
		state string
		code  int
		want  contract.ContainerState
	}{
		{"created", 0, contract.StateStopped},
		{"running", 0, contract.StateRunning},
		{"restarting", 0, contract.StateStarting},
		{"removing", 0, contract.StateDraining},
		{"exited", 0, contract.StateCompleted},
		{"exited", 2, contract.StateCrashed},
		{"dead", 0, contract.StateCrashed},
		{"paused", 0, contract.StateRunning}, // frozen, not gone: Container.Paused says so
	}
	for _, tt := range tests {
		if got := StateFromDocker(tt.state, tt.code); got != tt.want {
			t.Errorf("%s/%d: got %s, want %s", tt.state, tt.code, got, tt.want)
		}
	}
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func startReq(slot int, hash string) StartRequest {
	return StartRequest{HostID: "h1", Spec: spec(), SpecHash: hash, Slot: slot}
}

func TestTasksRefuseWorkAlreadyInProgress(t *testing.T) {
	ts := NewTasks(zaptest.NewLogger(t), func() time.Time { return t0 })
	start := StartTask(startReq(0, "v2"), "n1", t0)
	if !ts.Begin(start) {
		t.Fatal("first start refused")
	}
	if ts.Begin(StartTask(startReq(0, "v2"), "n2", t0)) {
		t.Error("a second start of the same slot and spec began")
	}
	if !ts.Begin(StartTask(startReq(0, "v3"), "n3", t0)) {
		t.Error("a start of another spec in the same slot was refused")
	}
	if !ts.Begin(StartTask(startReq(1, "v2"), "n4", t0)) {
		t.Error("a start of another slot was refused")
	}
	drain := Task{Kind: TaskDrain, Container: "c1"}
	if !ts.Begin(drain) {
		t.Fatal("drain refused")
	}
	if ts.Begin(Task{Kind: TaskStop, Container: "c1"}) || ts.Begin(Task{Kind: TaskRestart, Container: "c1"}) {
		t.Error("a second operation on a container being drained began")
	}
	replace := StartTask(StartRequest{HostID: "h1", Spec: spec(), SpecHash: "v9", Slot: 5, Replace: "c1"}, "n5", t0)
	if ts.Begin(replace) {
		t.Error("a stop-first start began on a container being drained")
	}
	if len(ts.InFlight()) != 4 {
		t.Errorf("in flight: %v", ts.InFlight())
	}
	ts.End(drain, nil)
	if !ts.Begin(Task{Kind: TaskStop, Container: "c1"}) {
		t.Error("an operation on a container whose drain ended was refused")
	}
	ts.End(start, nil)
	if !ts.Begin(StartTask(startReq(0, "v2"), "n6", t0)) {
		t.Error("a start after the same start ended was refused")
	}
}

func TestTasksRecordFailuresUntilSuccess(t *testing.T) {
	ts := NewTasks(zaptest.NewLogger(t), func() time.Time { return t0 })
	start := StartTask(startReq(0, "v2"), "n1", t0)
	ts.Begin(start)
	ts.End(start, errors.New("pull: no such image"))
	f := ts.Failures()
	if len(f) != 1 || f[0].Err.Error() != "pull: no such image" || f[0].Task.Placeholder.Slot != 0 {
		t.Fatalf("failures: %+v", f)
	}
	retry := StartTask(startReq(0, "v2"), "n1", t0.Add(time.Second))
	if !ts.Begin(retry) {
		t.Fatal("the retry after the back-off was refused")
	}
	ts.End(retry, nil)
	if len(ts.Failures()) != 0 {
		t.Errorf("a success did not clear the failure: %+v", ts.Failures())
	}
}

// A start that keeps failing (a pull, a build) backs off: 1 s, 2 s, 4 s...
// at most 5 minutes, so a broken spec is not rebuilt on every converge. A
// new spec for the slot is another start, tried at once.
func TestAFailingStartBacksOff(t *testing.T) {
	now := t0
	ts := NewTasks(zaptest.NewLogger(t), func() time.Time { return now })
	fail := func() {
		t.Helper()
		task := StartTask(startReq(0, "v2"), "n", now)
		if !ts.Begin(task) {
			t.Fatalf("start at %v refused", now.Sub(t0))
		}
		ts.End(task, errors.New("build failed"))
	}
	refused := func(after time.Duration) bool {
		return !ts.Begin(StartTask(startReq(0, "v2"), "n", now.Add(after)))
	}
	fail()
	for _, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		if !refused(wait - time.Millisecond) {
			t.Fatalf("a retry %v after a failure was let through, want a wait of %v", wait-time.Millisecond, wait)
		}
		now = now.Add(wait)
		fail()
	}
	if f := ts.Failures(); len(f) != 1 || f[0].Count != 4 {
		t.Fatalf("failures %+v, want one with Count 4", f)
	}
	if !ts.Begin(StartTask(startReq(0, "v3"), "n", now)) {
		t.Error("a start of a new spec waited for the old spec's back-off")
	}
	if got := (TaskFailure{At: t0, Count: 40}).RetryAt(); !got.Equal(t0.Add(5 * time.Minute)) {
		t.Errorf("RetryAt after 40 failures = %v, want capped at 5 minutes", got.Sub(t0))
	}
}

func TestOverlayShowsWorkInProgress(t *testing.T) {
	ts := NewTasks(zaptest.NewLogger(t), func() time.Time { return t0 })
	running := func(id, name string) Container {
		c := FromLabels(id, name, Labels("h1", spec(), 0, "v1"))
		c.State, c.Healthy = contract.StateRunning, true
		return c
	}
	listed := []Container{running("c1", "a"), running("c2", "b"), running("c3", "c")}
	ts.Begin(Task{Kind: TaskDrain, Container: "c1"})
	ts.Begin(Task{Kind: TaskRestart, Container: "c2"})
	ts.Begin(StartTask(startReq(1, "v2"), "new", t0.Add(time.Second)))

	got := ts.Overlay(listed)
	if len(got) != 4 {
		t.Fatalf("overlay: %+v", got)
	}
	if got[0].State != contract.StateDraining || got[0].Healthy {
		t.Errorf("drained container shows %s healthy=%v", got[0].State, got[0].Healthy)
	}
	if got[1].State != contract.StateStarting || got[1].Healthy {
		t.Errorf("restarted container shows %s healthy=%v", got[1].State, got[1].Healthy)
	}
	if got[2].State != contract.StateRunning || !got[2].Healthy {
		t.Errorf("untouched container changed: %+v", got[2])
	}
	p := got[3]
	if !p.Placeholder() || p.State != contract.StateBuilding || p.Slot != 1 || p.SpecHash != "v2" ||
		p.WorkloadID != "default/shop/web" || !p.Created.Equal(t0.Add(time.Second)) || !Owned(p.Labels, "h1") {
		t.Errorf("placeholder: %+v", p)
	}
	if listed[0].State != contract.StateRunning {
		t.Error("Overlay modified its input")
	}

	// Once the start created its container, the real one replaces the
	// placeholder, shown as starting even while Docker says "created".
	created := FromLabels("c4", "new", Labels("h1", spec(), 1, "v2"))
	created.State = contract.StateStopped
	got = ts.Overlay(append(listed, created))
	if len(got) != 4 || got[3].ID != "c4" || got[3].State != contract.StateStarting {
		t.Errorf("created container during its start: %+v", got[3])
	}
}

// A List reads Docker, then overlays the tasks. A stop that ends in between
// must not leave its container shown as running: the next Diff would plan
// for a container that no longer exists.
func TestOverlayLeavesOutWhatAFinishedTaskRemoved(t *testing.T) {
	ts := NewTasks(zaptest.NewLogger(t), func() time.Time { return t0 })
	c := FromLabels("c1", "a", Labels("h1", spec(), 0, "v1"))
	c.State, c.Healthy = contract.StateRunning, true
	restarted := FromLabels("c2", "b", Labels("h1", spec(), 1, "v1"))
	restarted.State = contract.StateRunning
	listed := []Container{c, restarted}

	for _, kind := range []TaskKind{TaskStop, TaskRestart} {
		task := Task{Kind: kind, Container: map[TaskKind]string{TaskStop: "c1", TaskRestart: "c2"}[kind]}
		ts.Begin(task)
		ts.End(task, nil)
	}
	got := ts.Overlay(listed)
	if len(got) != 1 || got[0].ID != "c2" {
		t.Fatalf("overlay %+v, want only c2: a restart keeps its container", got)
	}
	failed := Task{Kind: TaskDrain, Container: "c2"}
	ts.Begin(failed)
	ts.End(failed, errors.New("stop timed out"))
	if got := ts.Overlay(listed); len(got) != 1 || got[0].ID != "c2" {
		t.Fatalf("a failed drain removed nothing, yet the overlay is %+v", got)
	}
	// The memory is bounded: after removedMemory more removals, c1 (whose ID
	// Docker never lists again anyway) is forgotten.
	for i := range removedMemory {
		task := Task{Kind: TaskStop, Container: fmt.Sprintf("old-%d", i)}
		ts.Begin(task)
		ts.End(task, nil)
	}
	if got := ts.Overlay(listed); len(got) != 2 || len(ts.removed) != removedMemory {
		t.Fatalf("overlay %+v with %d remembered, want c1 back and %d remembered", got, len(ts.removed), removedMemory)
	}
}

func TestGoRunsTasksAndCloseWaitsForThem(t *testing.T) {
	ts := NewTasks(zaptest.NewLogger(t), time.Now)
	release := make(chan struct{})
	var ran atomic.Int32
	task := Task{Kind: TaskStop, Container: "c1"}
	fn := func(ctx context.Context) error {
		ran.Add(1)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := ts.Go(task, fn); err != nil {
		t.Fatal(err)
	}
	if err := ts.Go(task, fn); err != nil {
		t.Fatal(err)
	}
	if len(ts.InFlight()) != 1 {
		t.Fatalf("in flight: %v", ts.InFlight())
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for len(ts.InFlight()) > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if ran.Load() != 1 {
		t.Errorf("the same task ran %d times", ran.Load())
	}

	// A task blocked on its context is cancelled by Close, which waits for it.
	blocked := Task{Kind: TaskDrain, Container: "c2"}
	_ = ts.Go(blocked, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ts.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if len(ts.InFlight()) != 0 {
		t.Error("Close returned before its tasks ended")
	}
	if err := ts.Go(task, fn); !errors.Is(err, ErrClosed) {
		t.Errorf("Go after Close: %v", err)
	}
}

// OnEnd is how a Client tells the agent that work finished: it must come
// after the end is recorded, so that a converge it triggers sees the result.
func TestOnEndComesAfterTheEndIsRecorded(t *testing.T) {
	ts := NewTasks(zaptest.NewLogger(t), time.Now)
	ended := make(chan []TaskFailure, 1)
	ts.OnEnd(func() { ended <- ts.Failures() })
	task := Task{Kind: TaskStop, Container: "c1"}
	if err := ts.Go(task, func(context.Context) error { return errors.New("stop timed out") }); err != nil {
		t.Fatal(err)
	}
	if f := <-ended; len(f) != 1 || f[0].Task.Container != "c1" {
		t.Fatalf("at OnEnd the failures were %+v, want the stop's", f)
	}
	if len(ts.InFlight()) != 0 {
		t.Error("the task is still in flight after OnEnd")
	}
	if err := ts.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestNewTasksRefusesANilLoggerOrClock(t *testing.T) {
	for name, build := range map[string]func(){
		"nil logger": func() { NewTasks(nil, time.Now) },
		"nil clock":  func() { NewTasks(zaptest.NewLogger(t), nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: NewTasks accepted it", name)
				}
			}()
			build()
		}()
	}
}
