package fleet

import (
	"slices"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

var statusNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func statusWorkload(egg string, replicas int) contract.WorkloadSpec {
	return contract.WorkloadSpec{Namespace: "default", Project: "demo", Egg: egg, Image: egg + ":1", Replicas: replicas}
}

// runningAt is a running container of w's slot at w's spec.
func runningAt(w contract.WorkloadSpec, slot int, healthy bool) contract.ContainerStatus {
	return contract.ContainerStatus{WorkloadID: w.ID(), Slot: slot, SpecHash: contract.SpecHash(w),
		State: contract.StateRunning, Healthy: healthy}
}

func statusHostOf(name string, state store.HostState, ws []contract.WorkloadSpec, cs ...contract.ContainerStatus) statusHost {
	return statusHost{ID: "h-" + name, Name: name, State: state, Workloads: ws, Containers: cs}
}

func TestProjectStatusSumsEachEggOverItsHosts(t *testing.T) {
	web, kv := statusWorkload("web", 2), statusWorkload("kv", 1)
	oldWeb := web
	oldWeb.Image = "web:0"
	stale := runningAt(oldWeb, 0, true)
	job := statusWorkload("migrate", 1)
	job.Restart = contract.RestartNo
	completed := runningAt(job, 0, false)
	completed.State = contract.StateCompleted
	failed := runningAt(web, 1, false)
	failed.RolloutFailure, failed.LogTail = "not healthy within the progress deadline (5m0s)", []string{"panic: no config"}
	looping := runningAt(kv, 0, false)
	looping.State, looping.Restarts, looping.CrashLoopUntil = contract.StateCrashed, 4, statusNow.Add(8*time.Second)
	backedOff := looping
	backedOff.CrashLoopUntil = statusNow.Add(-time.Second) // its back-off is over
	beyond := runningAt(statusWorkload("web", 3), 2, true) // slot 2 of a scale-down from 3
	beyond.SpecHash = contract.SpecHash(web)
	web1 := statusWorkload("web", 1)
	otherProject := runningAt(contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: "web", Replicas: 1}, 0, true)

	tests := []struct {
		name    string
		hosts   []statusHost
		records []*resource.Deployed
		egg     string
		check   func(t *testing.T, e api.EggStatus)
	}{
		{"every replica healthy at the spec is done", []statusHost{statusHostOf("a", store.HostUp, []contract.WorkloadSpec{web}, runningAt(web, 0, true), runningAt(web, 1, true))}, nil, "web",
			func(t *testing.T, e api.EggStatus) { wantEgg(t, e, 2, 2, phaseDone, "") }},
		{"an unhealthy replica keeps it progressing", []statusHost{statusHostOf("a", store.HostUp, []contract.WorkloadSpec{web}, runningAt(web, 0, true), runningAt(web, 1, false))}, nil, "web",
			func(t *testing.T, e api.EggStatus) { wantEgg(t, e, 1, 2, phaseProgressing, "") }},
		{"an older spec still running keeps it progressing and is counted as previous", []statusHost{statusHostOf("a", store.HostUp, []contract.WorkloadSpec{web}, runningAt(web, 0, true), runningAt(web, 1, true), stale)}, nil, "web",
			func(t *testing.T, e api.EggStatus) {
				wantEgg(t, e, 2, 2, phaseProgressing, "")
				if e.Previous != 1 {
					t.Errorf("previous = %d, want 1", e.Previous)
				}
				cs := e.Hosts[0].Containers
				if len(cs) != 3 || !cs[0].Current || !cs[1].Current || cs[2].Current {
					t.Errorf("containers %+v, want two current and the stale one not", cs)
				}
			}},
		{"a slot beyond the replica count at the spec is not current", []statusHost{statusHostOf("a", store.HostUp, []contract.WorkloadSpec{web}, runningAt(web, 0, true), runningAt(web, 1, true), beyond)}, nil, "web",
			func(t *testing.T, e api.EggStatus) {
				wantEgg(t, e, 2, 2, phaseProgressing, "")
				if e.Previous != 1 || e.Hosts[0].Containers[2].Current {
					t.Errorf("previous %d, containers %+v: want slot 2 on its way out", e.Previous, e.Hosts[0].Containers)
				}
			}},
		{"a failed rollout says where, why, and the last log lines", []statusHost{statusHostOf("a", store.HostUp, []contract.WorkloadSpec{web}, runningAt(web, 0, true), failed)}, nil, "web",
			func(t *testing.T, e api.EggStatus) {
				wantEgg(t, e, 1, 2, phaseFailed, "on a: not healthy within the progress deadline (5m0s)")
				if !slices.Equal(e.Rollout.LogTail, []string{"panic: no config"}) {
					t.Errorf("log tail %q", e.Rollout.LogTail)
				}
				h := e.Hosts[0]
				if h.Rollout != phaseFailed || h.Containers[1].RolloutFailure == "" || len(h.Containers[1].LogTail) != 1 {
					t.Errorf("host %+v, want its rollout failed and the failing container's reason and lines", h)
				}
			}},
		{"a failure wins over a host down and over unplaced replicas", []statusHost{
			statusHostOf("a", store.HostUp, []contract.WorkloadSpec{web}, runningAt(web, 0, true), failed),
			statusHostOf("b", store.HostDown, []contract.WorkloadSpec{web}),
		}, []*resource.Deployed{{Type: "egg", Name: "web", Outputs: map[string]any{"unplaced": 1}}}, "web",
			func(t *testing.T, e api.EggStatus) {
				wantEgg(t, e, 1, 5, phaseFailed, "on a: not healthy within the progress deadline (5m0s)")
			}},
		{"replicas over hosts add up, hosts by name", []statusHost{
			statusHostOf("b", store.HostUp, []contract.WorkloadSpec{web1}, runningAt(web1, 0, true)),
			statusHostOf("a", store.HostUp, []contract.WorkloadSpec{web1}, runningAt(web1, 0, true)),
		}, nil, "web", func(t *testing.T, e api.EggStatus) {
			wantEgg(t, e, 2, 2, phaseDone, "")
			if len(e.Hosts) != 2 || e.Hosts[0].Name != "a" || e.Hosts[1].Name != "b" || e.Hosts[0].Desired != 1 || e.Hosts[0].Ready != 1 {
				t.Errorf("hosts = %+v, want a then b, one ready of one each", e.Hosts)
			}
		}},
		// Issue 26: nothing rolls on a host that is down; its replicas wait
		// for it (hatch status said "rolling").
		{"an egg whose only host is down waits for it, and does not roll", []statusHost{
			statusHostOf("a", store.HostDown, []contract.WorkloadSpec{web1}, runningAt(web1, 0, true)),
		}, nil, "web", func(t *testing.T, e api.EggStatus) {
			wantEgg(t, e, 0, 1, phaseWaiting, "host a is down")
		}},
		{"a host down counts nothing ready and is named", []statusHost{
			statusHostOf("a", store.HostUp, []contract.WorkloadSpec{web1}, runningAt(web1, 0, true)),
			statusHostOf("b", store.HostDown, []contract.WorkloadSpec{web1}, runningAt(web1, 0, true), stale),
		}, nil, "web", func(t *testing.T, e api.EggStatus) {
			wantEgg(t, e, 1, 2, phaseWaiting, "host b is down")
			if e.Previous != 0 {
				t.Errorf("previous = %d: a host down's containers are old news", e.Previous)
			}
			if e.Hosts[1].Ready != 1 || e.Hosts[1].State != string(store.HostDown) {
				t.Errorf("host b = %+v, want its last report's figures and its state", e.Hosts[1])
			}
		}},
		{"a host whose Docker Engine does not answer counts nothing ready and is named", []statusHost{
			statusHostOf("a", store.HostUp, []contract.WorkloadSpec{web1}, runningAt(web1, 0, true)),
			func() statusHost {
				h := statusHostOf("b", store.HostUp, []contract.WorkloadSpec{web1}, runningAt(web1, 0, true))
				h.Engine = &contract.EngineProblem{Since: statusNow.Add(-10 * time.Second), Reason: "context deadline exceeded"}
				return h
			}(),
		}, nil, "web", func(t *testing.T, e api.EggStatus) {
			wantEgg(t, e, 1, 2, phaseProgressing, "host b's Docker Engine has not answered since 11:59:50")
		}},
		{"a host without a name is shown by its ID", []statusHost{{ID: "h-9", State: store.HostUnknown, Workloads: []contract.WorkloadSpec{kv}}}, nil, "kv",
			func(t *testing.T, e api.EggStatus) {
				wantEgg(t, e, 0, 1, phaseProgressing, "waiting for host h-9's first report")
			}},
		// Right after a server restart every host is unknown until it
		// reports: its last report stands, and no rollout is made up.
		{"a host not heard from since the server started shows its last report and waits for the next", []statusHost{
			statusHostOf("a", store.HostUnknown, []contract.WorkloadSpec{web}, runningAt(web, 0, true), runningAt(web, 1, true)),
		}, nil, "web", func(t *testing.T, e api.EggStatus) {
			wantEgg(t, e, 2, 2, phaseDone, "waiting for host a's first report")
		}},
		{"a host's reported problems are shown with it", []statusHost{
			{ID: "h-a", Name: "a", State: store.HostUp, Workloads: []contract.WorkloadSpec{web1}, Containers: []contract.ContainerStatus{runningAt(web1, 0, true)},
				Errors: []string{"write desired-state cache: no space left on device (retrying every 5s)"}},
		}, nil, "web", func(t *testing.T, e api.EggStatus) {
			wantEgg(t, e, 1, 1, phaseDone, "")
			if got := e.Hosts[0].Errors; len(got) != 1 || got[0] != "write desired-state cache: no space left on device (retrying every 5s)" {
				t.Errorf("host errors %q", got)
			}
		}},
		{"a completed job is ready", []statusHost{statusHostOf("a", store.HostUp, []contract.WorkloadSpec{job}, completed)}, nil, "migrate",
			func(t *testing.T, e api.EggStatus) { wantEgg(t, e, 1, 1, phaseDone, "") }},
		{"crash loops count while backed off, restarts always", []statusHost{statusHostOf("a", store.HostUp, []contract.WorkloadSpec{kv}, looping),
			statusHostOf("b", store.HostUp, []contract.WorkloadSpec{kv}, backedOff)}, nil, "kv",
			func(t *testing.T, e api.EggStatus) {
				wantEgg(t, e, 0, 2, phaseProgressing, "")
				if e.CrashLooping != 1 || e.Restarts != 8 {
					t.Errorf("crash-looping %d, restarts %d; want 1 and 8", e.CrashLooping, e.Restarts)
				}
				if !e.Hosts[0].Containers[0].CrashLoopUntil.Equal(statusNow.Add(8 * time.Second)) {
					t.Errorf("container %+v lacks its back-off", e.Hosts[0].Containers[0])
				}
			}},
		{"no report yet is not ready", []statusHost{statusHostOf("a", store.HostUp, []contract.WorkloadSpec{kv})}, nil, "kv",
			func(t *testing.T, e api.EggStatus) { wantEgg(t, e, 0, 1, phaseProgressing, "") }},
		{"replicas not placed are desired and keep it waiting, with the reason", []statusHost{statusHostOf("a", store.HostUp, []contract.WorkloadSpec{web1}, runningAt(web1, 0, true))},
			[]*resource.Deployed{{Type: "egg", Name: "web", Outputs: map[string]any{"unplaced": float64(2), "waiting": "no host has 512 MiB free"}}}, "web",
			func(t *testing.T, e api.EggStatus) {
				wantEgg(t, e, 1, 3, phaseWaiting, "2 not placed: no host has 512 MiB free")
				if e.Unplaced != 2 {
					t.Errorf("unplaced = %d", e.Unplaced)
				}
			}},
		{"unplaced replicas win over a host down", []statusHost{statusHostOf("a", store.HostDown, []contract.WorkloadSpec{web1})},
			[]*resource.Deployed{{Type: "egg", Name: "web", Outputs: map[string]any{"unplaced": 1}}}, "web",
			func(t *testing.T, e api.EggStatus) { wantEgg(t, e, 0, 2, phaseWaiting, "1 not placed") }},
		{"a cold egg no host runs is done at 0/0", nil, []*resource.Deployed{{Type: "egg", Name: "cold"}, {Type: "volume", Name: "data"}}, "cold",
			func(t *testing.T, e api.EggStatus) {
				wantEgg(t, e, 0, 0, phaseDone, "")
				if e.Hosts == nil {
					t.Error("hosts is null, want []")
				}
			}},
		{"another project's containers count nothing", []statusHost{statusHostOf("a", store.HostUp, []contract.WorkloadSpec{web1}, otherProject)}, nil, "web",
			func(t *testing.T, e api.EggStatus) {
				wantEgg(t, e, 0, 1, phaseProgressing, "")
				if len(e.Hosts[0].Containers) != 0 {
					t.Errorf("containers %+v, want none", e.Hosts[0].Containers)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := projectStatus("default", "demo", tt.hosts, tt.records, statusNow)
			for _, e := range got.Eggs {
				if e.Name == tt.egg {
					tt.check(t, e)
					return
				}
			}
			t.Fatalf("no status for %s in %+v", tt.egg, got)
		})
	}
}

func wantEgg(t *testing.T, e api.EggStatus, ready, desired int, state rolloutPhase, reason string) {
	t.Helper()
	if e.Ready != ready || e.Desired != desired || e.Rollout.State != state || e.Rollout.Reason != reason {
		t.Errorf("%s: %d/%d %s %q, want %d/%d %s %q", e.Name, e.Ready, e.Desired, e.Rollout.State, e.Rollout.Reason, ready, desired, state, reason)
	}
}

func TestProjectStatusKeepsToItsProjectAndCountsHostsUp(t *testing.T) {
	web := statusWorkload("web", 1)
	shop := web
	shop.Project = "shop"
	staging := web
	staging.Namespace = "staging"
	hosts := []statusHost{
		statusHostOf("a", store.HostUp, []contract.WorkloadSpec{web, shop, staging}),
		statusHostOf("b", store.HostUp, nil),
		statusHostOf("c", store.HostDown, nil),
	}
	got := projectStatus("default", "demo", hosts, nil, statusNow)
	if got.HostsUp != 2 || got.Namespace != "default" || got.Project != "demo" {
		t.Fatalf("status %+v, want 2 hosts up of default/demo", got)
	}
	if len(got.Eggs) != 1 || got.Eggs[0].Name != "web" || got.Eggs[0].Desired != 1 {
		t.Fatalf("eggs %+v, want only default/demo's web", got.Eggs)
	}
	if empty := projectStatus("default", "none", nil, nil, statusNow); empty.Eggs == nil {
		t.Fatal("eggs is null, want []")
	}
}

// TestProjectStatusEndpointFollowsTheReports applies a project with two
// eggs onto two hosts and reads its status as the hosts report: nothing,
// then every replica healthy, then one rollout failed, then a host down.
