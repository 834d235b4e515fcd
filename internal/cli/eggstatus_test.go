package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func workload(egg string, replicas int) contract.WorkloadSpec {
	return contract.WorkloadSpec{Namespace: "default", Project: "demo", Egg: egg, Image: egg + ":1", Replicas: replicas}
}

// running returns a running container of w's slot at w's spec.
func running(w contract.WorkloadSpec, slot int, healthy bool) contract.ContainerStatus {
	return contract.ContainerStatus{WorkloadID: w.ID(), Slot: slot, ContainerID: "c" + string(rune('0'+slot)),
		SpecHash: contract.SpecHash(w), State: contract.StateRunning, Healthy: healthy}
}

func host(name, state string, ws []contract.WorkloadSpec, cs ...contract.ContainerStatus) hostState {
	return hostState{ID: "h-" + name, Name: name, State: state, Desired: contract.DesiredState{HostID: "h-" + name, Workloads: ws},
		Report: &contract.StatusReport{HostID: "h-" + name, Containers: cs}}
}

func TestEggStatuses(t *testing.T) {
	web, kv := workload("web", 2), workload("kv", 1)
	oldWeb := web
	oldWeb.Image = "web:0"
	stale := running(oldWeb, 0, true)
	stale.WorkloadID = web.ID()
	job := workload("migrate", 1)
	job.Restart = contract.RestartNo
	failed := running(web, 1, false)
	failed.RolloutFailure, failed.LogTail = "not healthy within the progress deadline (5m0s)", []string{"panic: no config"}
	looping := running(kv, 0, false)
	looping.State, looping.Restarts, looping.CrashLoopUntil = contract.StateCrashed, 4, now.Add(8*time.Second)
	completed := running(job, 0, false)
	completed.State = contract.StateCompleted

	tests := []struct {
		name  string
		hosts []hostState
		egg   string
		check func(t *testing.T, e eggStatus)
	}{
		{"every replica healthy at the spec is done", []hostState{host("a", "up", []contract.WorkloadSpec{web}, running(web, 0, true), running(web, 1, true))}, "web",
			func(t *testing.T, e eggStatus) { want(t, e, 2, 2, rolloutDone) }},
		{"an unhealthy replica keeps it rolling", []hostState{host("a", "up", []contract.WorkloadSpec{web}, running(web, 0, true), running(web, 1, false))}, "web",
			func(t *testing.T, e eggStatus) { want(t, e, 1, 2, rolloutProgressing) }},
		{"an older spec still running keeps it rolling and is counted", []hostState{host("a", "up", []contract.WorkloadSpec{web}, running(web, 0, true), running(web, 1, true), stale)}, "web",
			func(t *testing.T, e eggStatus) {
				want(t, e, 2, 2, rolloutProgressing)
				if e.Previous != 1 {
					t.Errorf("previous = %d, want 1", e.Previous)
				}
			}},
		{"a failed rollout says why, where, and the last log lines", []hostState{host("a", "up", []contract.WorkloadSpec{web}, running(web, 0, true), failed)}, "web",
			func(t *testing.T, e eggStatus) {
				want(t, e, 1, 2, rolloutFailed)
				if !strings.Contains(e.Detail, "on a: not healthy") || len(e.LogTail) != 1 {
					t.Errorf("detail %q, log tail %q", e.Detail, e.LogTail)
				}
			}},
		{"replicas over hosts add up", []hostState{
			host("b", "up", []contract.WorkloadSpec{workload("web", 1)}, running(workload("web", 1), 0, true)),
			host("a", "up", []contract.WorkloadSpec{workload("web", 1)}, running(workload("web", 1), 0, true)),
		}, "web", func(t *testing.T, e eggStatus) {
			want(t, e, 2, 2, rolloutDone)
			if strings.Join(e.Hosts, ",") != "a,b" {
				t.Errorf("hosts = %v, want a,b", e.Hosts)
			}
		}},
		{"a host down counts nothing ready and is named", []hostState{
			host("a", "up", []contract.WorkloadSpec{workload("web", 1)}, running(workload("web", 1), 0, true)),
			host("b", "down", []contract.WorkloadSpec{workload("web", 1)}, running(workload("web", 1), 0, true)),
		}, "web", func(t *testing.T, e eggStatus) {
			want(t, e, 1, 2, rolloutProgressing)
			if e.Detail != "host b is down" {
				t.Errorf("detail = %q", e.Detail)
			}
		}},
		{"a completed job is ready", []hostState{host("a", "up", []contract.WorkloadSpec{job}, completed)}, "migrate",
			func(t *testing.T, e eggStatus) { want(t, e, 1, 1, rolloutDone) }},
		{"crash loops and restarts are counted", []hostState{host("a", "up", []contract.WorkloadSpec{kv}, looping)}, "kv",
			func(t *testing.T, e eggStatus) {
				want(t, e, 0, 1, rolloutProgressing)
				if e.CrashLooping != 1 || e.Restarts != 4 {
					t.Errorf("crash-looping %d, restarts %d; want 1 and 4", e.CrashLooping, e.Restarts)
				}
			}},
		{"no report yet is not ready", []hostState{{ID: "h-a", Name: "a", State: "unknown", Desired: contract.DesiredState{Workloads: []contract.WorkloadSpec{kv}}}}, "kv",
			func(t *testing.T, e eggStatus) { want(t, e, 0, 1, rolloutProgressing) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, e := range eggStatuses(tt.hosts, now) {
				if e.Egg == tt.egg {
					tt.check(t, e)
					return
				}
			}
			t.Fatalf("no status for %s", tt.egg)
		})
	}
}

func want(t *testing.T, e eggStatus, ready, desired int, state rolloutState) {
	t.Helper()
	if e.Ready != ready || e.Desired != desired || e.State != state {
		t.Errorf("%s: %d/%d %s, want %d/%d %s", e.Egg, e.Ready, e.Desired, e.State, ready, desired, state)
	}
}

func TestAddUnplacedListsColdEggsAndWaitsForUnplacedReplicas(t *testing.T) {
	web := workload("web", 1)
	eggs := eggStatuses([]hostState{host("a", "up", []contract.WorkloadSpec{web}, running(web, 0, true))}, now)
	p := deployedProject{Namespace: "default", Name: "demo", Resources: []deployedResource{
		{Type: "egg", Name: "web", Outputs: map[string]any{"unplaced": float64(2), "waiting": "no host has 512 MiB free"}},
		{Type: "egg", Name: "cold"},
		{Type: "volume", Name: "data"},
	}}
	got := addUnplaced(eggs, "default", p)
	if len(got) != 2 || got[0].Egg != "cold" || got[1].Egg != "web" {
		t.Fatalf("eggs = %+v, want cold and web", got)
	}
	want(t, got[0], 0, 0, rolloutDone)
	want(t, got[1], 1, 3, rolloutWaiting)
	if got[1].Detail != "2 not placed: no host has 512 MiB free" {
		t.Errorf("detail = %q", got[1].Detail)
	}
}

func TestPrintStatusShowsOneTablePerProject(t *testing.T) {
	var b strings.Builder
	eggs := []eggStatus{
		{Namespace: "default", Project: "demo", Egg: "kv", Ready: 1, Desired: 1, State: rolloutDone, Hosts: []string{"a"}},
		{Namespace: "default", Project: "demo", Egg: "web", Ready: 1, Desired: 3, State: rolloutFailed, Hosts: []string{"a", "b"},
			Previous: 2, Detail: "on a: boom", LogTail: []string{"x", "last"}, CrashLooping: 1},
		{Namespace: "staging", Project: "demo", Egg: "cold", State: rolloutDone},
	}
	if err := printStatus(&b, eggs); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, s := range []string{"default/demo\n", "staging/demo\n", "web  1/3    failed   a,b", "2 of an older spec running; 1 crash-looping; on a: boom; last log line: last", "cold (0 replicas)"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
}
