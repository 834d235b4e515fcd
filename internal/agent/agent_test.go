package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/containers/fake"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/converge"
)

func TestConvergesToANewDesiredStateAndCachesIt(t *testing.T) {
	f, cp, dir := newFake(t), newFakeControlPlane(), t.TempDir()
	w := web(3)
	w.Secrets = []contract.SecretFile{{Name: "api_key", Handle: "h1", Value: "s3cr3t-value"}}
	cp.set(desiredState(w))
	cfg := testConfig(t, f, cp, dir)
	cfg.Capacity = &contract.HostCapacity{MemoryBytes: 8 << 30, MilliCPU: 4000}
	a := startAgent(t, cfg)

	eventually(t, "three replicas run", func() error {
		if n := running(f.All(), w); n != 3 {
			return fmt.Errorf("%d running", n)
		}
		return nil
	})
	want := desiredState(w).Version
	eventually(t, "a report of the three", func() error {
		r, _ := cp.lastReport()
		if r.Version != want || len(r.Containers) != 3 || r.HostID != testHost {
			return fmt.Errorf("last report: version %q, %d containers", r.Version, len(r.Containers))
		}
		if r.Capacity == nil || *r.Capacity != *cfg.Capacity {
			return fmt.Errorf("last report's capacity %+v, want %+v", r.Capacity, cfg.Capacity)
		}
		return nil
	})

	info, err := os.Stat(filepath.Join(dir, cacheFile))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("cache mode %v, want 0600", info.Mode().Perm())
	}
	raw, err := os.ReadFile(filepath.Join(dir, cacheFile))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "s3cr3t-value") {
		t.Error("the cache holds the secret value in clear")
	}
	if d, ok := a.Desired(); !ok || d.Version != want {
		t.Errorf("agent holds version %q, want %q", d.Version, want)
	}
}

func TestConvergesFromTheCacheAfterARestartWhileTheControlPlaneIsDown(t *testing.T) {
	f, cp, dir := newFake(t), newFakeControlPlane(), t.TempDir()
	w := web(2)
	cp.set(desiredState(w))
	first, err := New(testConfig(t, f, cp, dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "two replicas run", func() error {
		if n := running(f.All(), w); n != 2 {
			return fmt.Errorf("%d running", n)
		}
		return nil
	})
	if err := first.Close(t.Context()); err != nil {
		t.Fatal(err)
	}

	// While no agent runs, the control plane goes away and a replica dies.
	cp.setDown(true)
	victim := f.All()[0].ID
	if err := f.Crash(victim, 137); err != nil {
		t.Fatal(err)
	}
	before := len(f.Events())

	startAgent(t, testConfig(t, f, cp, dir))
	eventually(t, "the crashed replica is restarted from the cached state", func() error {
		if n := running(f.All(), w); n != 2 {
			return fmt.Errorf("%d running", n)
		}
		return nil
	})
	for _, e := range f.Events()[before:] {
		if e.Kind == fake.EventStop || e.Kind == fake.EventDrain || e.Kind == fake.EventRemove {
			t.Errorf("with the control plane down the agent removed something: %+v", e)
		}
	}
}

func TestAnAgentWithoutDesiredStateChangesNothing(t *testing.T) {
	f, cp, dir := newFake(t), newFakeControlPlane(), t.TempDir()
	// A container of this host's that no desired state mentions: with a
	// desired state it would be removed; without one it must stay.
	id := f.Add(containers.Container{
		Name:   "hatch-shop-old-0",
		Labels: containers.Labels(testHost, web(1), 0, "oldhash"),
		State:  contract.StateRunning, Healthy: true,
	})
	cfg := testConfig(t, f, cp, dir)
	a := startAgent(t, cfg)

	eventually(t, "the container is reported", func() error {
		r, ok := a.Status()
		if !ok || len(r.Containers) != 1 || r.Containers[0].ContainerID != id {
			return fmt.Errorf("status %+v", r)
		}
		return nil
	})
	a.Notify()
	time.Sleep(50 * time.Millisecond)
	if ev := f.Events(); len(ev) != 0 {
		t.Errorf("an agent that never had a desired state acted: %+v", ev)
	}
	// Nor does it give the ingress an empty table: the data plane an earlier
	// agent fed serves its last table on (a new one answers 503 until told).
	if n := cfg.Router.(*fakeRouter).updated(); n != 0 {
		t.Errorf("an agent that never had a desired state gave the ingress %d tables", n)
	}
}

func TestTriggersDuringAConvergeCoalesceIntoOneMore(t *testing.T) {
	gate := make(chan struct{})
	d := &countingDocker{Client: newFake(t), gate: gate}
	a := startAgent(t, testConfig(t, d, newFakeControlPlane(), t.TempDir()))

	eventually(t, "the first converge is under way", func() error {
		if n := d.listCount(); n != 1 {
			return fmt.Errorf("%d lists", n)
		}
		return nil
	})
	for range 10 {
		a.Notify()
	}
	close(gate)
	eventually(t, "one more converge", func() error {
		if n := d.listCount(); n != 2 {
			return fmt.Errorf("%d lists", n)
		}
		return nil
	})
	time.Sleep(100 * time.Millisecond)
	if n := d.listCount(); n != 2 {
		t.Errorf("10 triggers during one converge gave %d more converges, want 1", n-1)
	}
}

func TestAPanicInAConvergeIsRecoveredAndTheLoopGoesOn(t *testing.T) {
	f, cp := newFake(t), newFakeControlPlane()
	d := &countingDocker{Client: f, panicOn: 1}
	w := web(2)
	a := startAgent(t, testConfig(t, d, cp, t.TempDir()))

	eventually(t, "the panic is in the status", func() error {
		r, _ := a.Status()
		if !slices.ContainsFunc(r.Errors, func(e string) bool { return strings.Contains(e, "converge panicked") }) {
			return fmt.Errorf("errors %q", r.Errors)
		}
		return nil
	})
	cp.set(desiredState(w))
	eventually(t, "later converges work", func() error {
		if n := running(f.All(), w); n != 2 {
			return fmt.Errorf("%d running", n)
		}
		return nil
	})
}

func TestTheHeartbeatGoesOnDuringALongConverge(t *testing.T) {
	gate := make(chan struct{})
	defer close(gate)
	d := &countingDocker{Client: newFake(t), gate: gate, blockFrom: 2}
	cp := newFakeControlPlane()
	a := startAgent(t, testConfig(t, d, cp, t.TempDir()))

	eventually(t, "a first converge", func() error {
		if _, ok := a.Status(); !ok {
			return fmt.Errorf("no status yet")
		}
		return nil
	})
	a.Notify()
	eventually(t, "the second converge is stuck", func() error {
		if d.listCount() != 2 {
			return fmt.Errorf("%d lists", d.listCount())
		}
		return nil
	})
	_, before := cp.lastReport()
	eventually(t, "heartbeats while the converge is stuck", func() error {
		if _, n := cp.lastReport(); n < before+3 {
			return fmt.Errorf("%d heartbeats", n-before)
		}
		return nil
	})
	r, _ := cp.lastReport()
	if r.HostID != testHost || r.Time.IsZero() {
		t.Errorf("heartbeat %+v: want the host ID and a time", r)
	}
}

func TestNoReportBeforeTheFirstConvergeHasSeenTheHost(t *testing.T) {
	gate := make(chan struct{})
	defer close(gate)
	d := &countingDocker{Client: newFake(t), gate: gate}
	cp := newFakeControlPlane()
	startAgent(t, testConfig(t, d, cp, t.TempDir()))
	time.Sleep(10 * testConfig(t, d, cp, "").HeartbeatInterval)
	if _, n := cp.lastReport(); n != 0 {
		t.Errorf("%d reports before the agent saw any container: they would say nothing runs", n)
	}
}

func TestADesiredStateForAnotherHostIsRefused(t *testing.T) {
	f, cp := newFake(t), newFakeControlPlane()
	other := desiredState(web(1))
	other.HostID = "host-b"
	other.Seal()
	cp.set(other)
	a := startAgent(t, testConfig(t, f, cp, t.TempDir()))

	time.Sleep(100 * time.Millisecond)
	if _, ok := a.Desired(); ok {
		t.Error("the agent took another host's desired state")
	}
	if n := len(f.All()); n != 0 {
		t.Errorf("%d containers started from another host's state", n)
	}
}

// TestAFailedRolloutIsNotRetriedAfterARestart drives the fake's simulated
// clock: a replacement that never turns healthy fails the rollout after its
// progress deadline, the old container keeps serving, the status says why
// with the replacement's last log lines, and a restarted agent (converging
// from its cache and its memory) does not try that spec again.
func TestAFailedRolloutIsNotRetriedAfterARestart(t *testing.T) {
	f := fake.New(testHost, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), fake.DefaultTiming())
	cp, dir := newFakeControlPlane(), t.TempDir()
	v1 := web(1)
	v1.Rollout.ProgressDeadline = 10 * time.Second
	cp.set(desiredState(v1))
	cfg := testConfig(t, f, cp, dir)
	cfg.Now = f.Now
	first, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	tick := func(a *Agent) { tickAndConverge(t, f, a) }
	healthyV1 := func() string {
		for _, c := range f.All() {
			if c.SpecHash == contract.SpecHash(v1) && c.State == contract.StateRunning && c.Healthy {
				return c.ID
			}
		}
		return ""
	}
	for i := 0; i < 20 && healthyV1() == ""; i++ {
		tick(first)
	}
	old := healthyV1()
	if old == "" {
		t.Fatal("v1 never turned healthy")
	}

	v2 := v1
	v2.Env = map[string]string{"VERSION": "2"}
	f.SetBehaviour(contract.SpecHash(v2), fake.Behaviour{NeverHealthy: true})
	cp.set(desiredState(v2))
	eventually(t, "v2 is desired", func() error {
		if d, _ := first.Desired(); d.Version != desiredState(v2).Version {
			return fmt.Errorf("version %s", d.Version)
		}
		return nil
	})
	logLines := []string{"panic: cannot open config", "exit status 2"}
	failure := func(a *Agent) (contract.ContainerStatus, bool) {
		r, _ := a.Status()
		for _, c := range r.Containers {
			if c.RolloutFailure != "" {
				return c, true
			}
		}
		return contract.ContainerStatus{}, false
	}
	for i := 0; i < 30; i++ {
		for _, c := range f.All() {
			if c.SpecHash == contract.SpecHash(v2) {
				f.SetLogs(c.ID, logLines)
			}
		}
		if _, failed := failure(first); failed {
			break
		}
		tick(first)
	}
	c, failed := failure(first)
	if !failed {
		t.Fatal("the rollout never failed")
	}
	if !strings.Contains(c.RolloutFailure, "progress deadline") || !slices.Equal(c.LogTail, logLines) {
		t.Errorf("failure %q with log %q; want the deadline and %q", c.RolloutFailure, c.LogTail, logLines)
	}
	for range 5 {
		tick(first)
	}
	if err := first.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	starts := func() int {
		n := 0
		for _, e := range f.Events() {
			if e.Kind == fake.EventCreate && e.SpecHash == contract.SpecHash(v2) {
				n++
			}
		}
		return n
	}
	before := starts()

	cp.setDown(true)
	cfg2 := testConfig(t, f, cp, dir)
	cfg2.Now = f.Now
	second := startAgent(t, cfg2)
	for range 15 {
		tick(second)
	}
	if n := starts(); n != before {
		t.Errorf("the restarted agent started v2 again (%d containers, was %d)", n, before)
	}
	if healthyV1() != old {
		t.Error("the old container does not serve any more")
	}
	c, failed = failure(second)
	if !failed || !slices.Equal(c.LogTail, logLines) {
		t.Errorf("after a restart the status says %+v; want the failure and its log", c)
	}
}

func TestTheServersEmptyStateMeansNothingToANewAgentAndEverythingGoneToAnOldOne(t *testing.T) {
	// The control plane answers a host it has given nothing with
	// {"host_id": ...} and version "": an agent holding nothing stays
	// hands-off (a container of its own that no state mentions stays).
	f, cp := newFake(t), newFakeControlPlane()
	id := f.Add(containers.Container{Name: "hatch-shop-old-0", Labels: containers.Labels(testHost, web(1), 0, "oldhash"),
		State: contract.StateRunning, Healthy: true})
	cp.setRaw(contract.DesiredState{HostID: testHost})
	a := startAgent(t, testConfig(t, f, cp, t.TempDir()))
	time.Sleep(100 * time.Millisecond)
	if _, ok := a.Desired(); ok {
		t.Error("the empty state of a host never given anything was taken as a desired state")
	}
	if len(f.Events()) != 0 {
		t.Errorf("the agent acted on %s: %+v", id, f.Events())
	}

	// Once it has been given workloads, the empty state (everything
	// destroyed) removes them.
	cp.set(desiredState(web(2)))
	eventually(t, "two replicas run", func() error {
		if n := running(f.All(), web(2)); n != 2 {
			return fmt.Errorf("%d running", n)
		}
		return nil
	})
	cp.setRaw(contract.DesiredState{HostID: testHost})
	eventually(t, "everything is removed", func() error {
		if cs := f.All(); len(cs) != 0 {
			return fmt.Errorf("%d containers left", len(cs))
		}
		return nil
	})
}

func TestBuildReport(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	w := web(1)
	hash := contract.SpecHash(w)
	d := desiredState(w)
	serving := containers.FromLabels("c1", "n1", containers.Labels(testHost, w, 0, "oldhash"))
	serving.State, serving.Healthy = contract.StateRunning, true
	tampered := containers.FromLabels("c2", "n2", map[string]string{containers.LabelManaged: "true", containers.LabelHost: testHost})
	tampered.State = contract.StateRunning
	mem := newMemory()
	mem.History.RecordFailure(converge.Failure{WorkloadID: w.ID(), SpecHash: hash, Reason: "not healthy within the progress deadline (5m0s)"}, now)
	mem.FailureLogs[w.ID()] = failureLog{SpecHash: hash, ContainerID: "c0", Lines: []string{"boom"}}

	r := buildReport(d, []containers.Container{serving, tampered}, mem, []string{"converge: list: timeout"}, now)
	if r.HostID != testHost || r.Version != d.Version || !r.Time.Equal(now) {
		t.Errorf("header %+v", r)
	}
	if len(r.Containers) != 1 || r.Containers[0].ContainerID != "c1" {
		t.Fatalf("containers %+v, want c1 only (c2 has no workload label)", r.Containers)
	}
	if c := r.Containers[0]; c.RolloutFailure == "" || !slices.Equal(c.LogTail, []string{"boom"}) || !c.Healthy {
		t.Errorf("c1 %+v: want healthy, with the failed rollout and its log", c)
	}
	if len(r.Errors) != 2 || r.Errors[0] != "converge: list: timeout" || !strings.Contains(r.Errors[1], "c2 has no io.hatchery.workload label") {
		t.Errorf("errors %q", r.Errors)
	}
}

func TestACrashedContainersLastLinesAreReported(t *testing.T) {
	f, cp := newFake(t), newFakeControlPlane()
	job := web(1)
	job.Egg, job.Restart = "job", contract.RestartNo // left crashed: no restart
	id := f.Add(containers.Container{Name: "hatch-shop-job-0", Labels: containers.Labels(testHost, job, 0, contract.SpecHash(job)),
		State: contract.StateCrashed, ExitCode: 3})
	f.SetLogs(id, []string{"line 1", "fatal: no database"})
	cp.set(desiredState(job))
	startAgent(t, testConfig(t, f, cp, t.TempDir()))

	eventually(t, "the crash is reported with its log", func() error {
		r, _ := cp.lastReport()
		for _, c := range r.Containers {
			if c.ContainerID == id && c.State == contract.StateCrashed && slices.Equal(c.LogTail, []string{"line 1", "fatal: no database"}) {
				return nil
			}
		}
		return fmt.Errorf("report %+v", r.Containers)
	})
}

// The mesh gets the valid host set of the desired state, and the status
// report carries where peers reach this host's mesh.
func TestTheMeshGetsThePeersAndTheReportItsAddresses(t *testing.T) {
	f, cp := newFake(t), newFakeControlPlane()
	d := desiredState(web(1))
	d.Peers = []contract.Peer{
		{HostID: testHost, Addresses: []string{"10.0.0.1:7702"}},
		{HostID: "host-b", Addresses: []string{"10.0.0.2:7702"}, Reaches: []string{"default/shop/web"}},
	}
	d.Seal()
	cp.set(d)
	cfg := testConfig(t, f, cp, t.TempDir())
	mesh := &fakeMesh{}
	cfg.Mesh, cfg.MeshAddresses = mesh, []string{"10.0.0.1:7702", "[fd00::1]:7702"}
	startAgent(t, cfg)
	eventually(t, "the report with the mesh addresses", func() error {
		r, _ := cp.lastReport()
		if r.Version != d.Version || !slices.Equal(r.MeshAddresses, cfg.MeshAddresses) {
			return fmt.Errorf("last report: version %q, mesh addresses %v", r.Version, r.MeshAddresses)
		}
		return nil
	})
	if got := mesh.last(); !reflect.DeepEqual(got, d.Peers) {
		t.Errorf("the mesh's peers: %+v, want %+v", got, d.Peers)
	}
}

func TestNewRefusesAConfigMissingADependency(t *testing.T) {
	if _, err := New(testConfig(t, newFake(t), newFakeControlPlane(), t.TempDir())); err != nil {
		t.Fatalf("a complete config: %v", err)
	}
	for name, tt := range map[string]struct {
		drop func(*Config)
		want string
	}{
		"docker":        {func(c *Config) { c.Docker = nil }, "no Docker client"},
		"control plane": {func(c *Config) { c.ControlPlane = nil }, "no control plane client"},
		"events":        {func(c *Config) { c.Events = nil }, "no Docker event source"},
		"router":        {func(c *Config) { c.Router = nil }, "no router"},
		"mesh":          {func(c *Config) { c.Mesh = nil }, "no mesh"},
		"changes":       {func(c *Config) { c.Changes = nil }, "no change signal"},
		"logger":        {func(c *Config) { c.Logger = nil }, "no logger"},
		"clock":         {func(c *Config) { c.Now = nil }, "no clock"},
	} {
		dir := t.TempDir()
		cfg := testConfig(t, newFake(t), newFakeControlPlane(), dir)
		tt.drop(&cfg)
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("without %s: %v, want an error saying %q", name, err, tt.want)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("without %s: New wrote %d files before refusing", name, len(entries))
		}
	}
}

// TestACrashLoopRestartsWhenItsBackOffEnds: the agent converges again when
// a restart's back-off ends, not on its next periodic tick (an hour here;
// 30 s in production, where the second and third restarts of a crashing
// replica once waited for it).
func TestACrashLoopRestartsWhenItsBackOffEnds(t *testing.T) {
	f, cp := newFake(t), newFakeControlPlane()
	w := web(1)
	cp.set(desiredState(w))
	cfg := testConfig(t, f, cp, t.TempDir())
	cfg.ConvergeInterval = time.Hour
	cfg.Now = f.Now
	a := startAgent(t, cfg)
	eventually(t, "the replica runs", func() error {
		if n := running(f.All(), w); n != 1 {
			return fmt.Errorf("%d running", n)
		}
		return nil
	})
	// Back-offs before the 1st, 2nd and 3rd restart: 0, 1 s, 2 s.
	for i, backoff := range []time.Duration{0, time.Second, 2 * time.Second} {
		id := ""
		for _, c := range f.Snapshot() {
			id = c.ID
		}
		crashed := time.Now()
		if err := f.Crash(id, 1); err != nil {
			t.Fatal(err)
		}
		a.Notify() // what Docker's die event does
		eventually(t, fmt.Sprintf("restart %d", i+1), func() error {
			if n := running(f.All(), w); n != 1 {
				return fmt.Errorf("%d running", n)
			}
			return nil
		})
		// The fake's clock follows the real one in 2 ms steps, so its exit
		// time may be a step behind the test's.
		if took := time.Since(crashed); took < backoff-10*time.Millisecond || took > backoff+time.Second {
			t.Fatalf("restart %d came after %v; want its back-off %v and well under a second more", i+1, took, backoff)
		}
	}
}

// TestAPollWaitingOutItsBackOffPollsAsSoonAsTheControlPlaneAnswers: after an
// outage the heartbeat got through within its interval, but the poll slept
// out its back-off (up to 30 s), so an apply made right after the control
// plane came back reached the host 13 to 37 s later.
func TestAPollWaitingOutItsBackOffPollsAsSoonAsTheControlPlaneAnswers(t *testing.T) {
	f, cp := newFake(t), newFakeControlPlane()
	w := web(1)
	cp.set(desiredState(w))
	cfg := testConfig(t, f, cp, t.TempDir())
	cfg.PollRetryMin, cfg.PollRetryMax = 20*time.Second, 30*time.Second
	a := startAgent(t, cfg)
	eventually(t, "the replica runs", func() error {
		if n := running(f.All(), w); n != 1 {
			return fmt.Errorf("%d running", n)
		}
		return nil
	})
	cp.setDown(true)
	_, reports := cp.lastReport()
	time.Sleep(100 * time.Millisecond) // the poll fails and backs off for 10 s or more
	cp.setDown(false)
	back := time.Now()
	w.Replicas = 2
	cp.set(desiredState(w))
	eventually(t, "the new desired state arrives", func() error {
		if d, ok := a.Desired(); !ok || d.Version != desiredState(w).Version {
			return errors.New("not yet")
		}
		return nil
	})
	if took := time.Since(back); took > 2*time.Second {
		t.Fatalf("the new desired state arrived %v after the control plane came back; want at once", took)
	}
	if _, n := cp.lastReport(); n <= reports {
		t.Fatal("no status report went through after the outage")
	}
}

// TestAWorkloadWithAnUnsafeNameIsRefused: names go into container names and
// from there into paths (secret files); a workload whose name is not a safe
// path element is left out and reported, the others converge.
func TestAWorkloadWithAnUnsafeNameIsRefused(t *testing.T) {
	f, cp := newFake(t), newFakeControlPlane()
	bad := web(1)
	bad.Egg = "x/../../../../../../tmp/escaped/"
	bad.Secrets = []contract.SecretFile{{Name: "k", Handle: "h", Value: "v"}}
	dotdot := web(1)
	dotdot.Project = ".."
	good := web(1)
	good.Egg = "api"
	cp.set(desiredState(bad, dotdot, good))
	startAgent(t, testConfig(t, f, cp, t.TempDir()))

	eventually(t, "a report refusing both bad workloads", func() error {
		r, _ := cp.lastReport()
		refused := 0
		for _, e := range r.Errors {
			if strings.Contains(e, "refused") && (strings.Contains(e, bad.ID()) || strings.Contains(e, dotdot.ID())) {
				refused++
			}
		}
		if refused != 2 || running(f.All(), good) != 1 {
			return fmt.Errorf("errors %q, %d of api running", r.Errors, running(f.All(), good))
		}
		return nil
	})
	for _, c := range f.All() {
		if c.WorkloadID != good.ID() {
			t.Errorf("container %s of %s started", c.Name, c.WorkloadID)
		}
	}
}

// TestANewReplicaIsRoutedBeforeTheOneItReplacesDrains rolls a replica on
// the fake, a second of its clock per converge: each time the old
// container's drain begins, the ingress's table already has its
// replacement as a healthy backend. Updating the table only after the pass
// that drains left the egg without a backend on the host for a moment, and
// a restart of an egg on two hosts answered 503 when both rolled at once.
func TestANewReplicaIsRoutedBeforeTheOneItReplacesDrains(t *testing.T) {
	f := fake.New(testHost, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), fake.DefaultTiming())
	cp := newFakeControlPlane()
	v1 := web(1)
	v1.Routes = []contract.Route{{Host: "shop.localhost"}}
	cp.set(desiredState(v1))
	cfg := testConfig(t, f, cp, t.TempDir())
	spy := &drainSpy{Fake: f, router: cfg.Router.(*fakeRouter)}
	cfg.Docker, cfg.Now = spy, f.Now
	a := startAgent(t, cfg)
	runs := func(w contract.WorkloadSpec) bool {
		for _, c := range f.All() {
			if c.SpecHash == contract.SpecHash(w) && c.State == contract.StateRunning && c.Healthy {
				return true
			}
		}
		return false
	}
	for i := 0; i < 20 && !runs(v1); i++ {
		tickAndConverge(t, f, a)
	}
	v2 := v1
	v2.Image = "web:2"
	cp.set(desiredState(v2))
	for i := 0; i < 30 && (runs(v1) || !runs(v2)); i++ {
		tickAndConverge(t, f, a)
	}
	if runs(v1) || !runs(v2) {
		t.Fatal("the roll to web:2 did not finish")
	}
	drains, unrouted := spy.seen()
	if drains == 0 {
		t.Fatal("the roll drained nothing")
	}
	if len(unrouted) > 0 {
		t.Errorf("drains began with no other healthy backend in the ingress: %v", unrouted)
	}
}

// drainSpy is the fake Docker host, looking at the ingress's table as each
// drain begins.
type drainSpy struct {
	*fake.Fake
	router *fakeRouter

	mu       sync.Mutex
	drains   int
	unrouted []string // the drains that began with no other healthy backend
}

func (s *drainSpy) Drain(ctx context.Context, req containers.StopRequest) error {
	table, _ := s.router.snapshot()
	other := false
	for _, e := range table.Eggs {
		if e.Name != req.WorkloadID {
			continue
		}
		for _, b := range e.Backends {
			other = other || (b.Healthy && b.ContainerID != req.ID)
		}
	}
	s.mu.Lock()
	s.drains++
	if !other {
		s.unrouted = append(s.unrouted, req.ID)
	}
	s.mu.Unlock()
	return s.Fake.Drain(ctx, req)
}

func (s *drainSpy) seen() (int, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.drains, slices.Clone(s.unrouted)
}
