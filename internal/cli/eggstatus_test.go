package cli

import (
	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"

	"slices"
	"strings"
	"testing"
	"time"
)

// eggAt is an egg's status as the server gives it: ready of desired, in a
// rollout state, with a replica on each named host.
func eggAt(name string, ready, desired int, state string, hosts ...string) api.EggStatus {
	e := api.EggStatus{Name: name, Ready: ready, Desired: desired, Rollout: api.Rollout{State: api.RolloutState(state)}, Hosts: []api.EggHost{}}
	for _, h := range hosts {
		e.Hosts = append(e.Hosts, api.EggHost{ID: "h-" + h, Name: h, Desired: 1})
	}
	return e
}

// demoStatus is the status of default/demo with the eggs, hostsUp hosts up.
func demoStatus(hostsUp int, eggs ...api.EggStatus) api.ProjectStatus {
	return api.ProjectStatus{Namespace: "default", Project: "demo", HostsUp: hostsUp, Eggs: eggs}
}

func TestEggStatusesShowTheServersView(t *testing.T) {
	failed := eggAt("web", 1, 3, "failed", "b", "a")
	failed.Rollout.Reason, failed.Rollout.LogTail = "on a: not healthy", []string{"panic: no config"}
	failed.Previous, failed.Restarts, failed.CrashLooping = 2, 5, 1
	unnamed := eggAt("kv", 0, 1, "progressing")
	unnamed.Hosts = []api.EggHost{{ID: "h-9", Desired: 1}, {ID: "h-1", Name: "idle", Desired: 0}}

	tests := []struct {
		name string
		egg  api.EggStatus
		want eggStatus
	}{
		{"a done egg", eggAt("web", 2, 2, "done", "a"),
			eggStatus{Ready: 2, Desired: 2, State: rolloutDone, Hosts: []string{"a"}}},
		{"progressing reads as rolling", eggAt("web", 1, 2, "progressing", "a"),
			eggStatus{Ready: 1, Desired: 2, State: rolloutProgressing, Hosts: []string{"a"}}},
		{"waiting keeps its reason", func() api.EggStatus {
			e := eggAt("web", 0, 2, "waiting")
			e.Rollout.Reason = "2 not placed: no host has 512 MiB free"
			return e
		}(), eggStatus{Desired: 2, State: rolloutWaiting, Detail: "2 not placed: no host has 512 MiB free"}},
		{"a failure keeps its reason, log lines and counts, hosts sorted", failed,
			eggStatus{Ready: 1, Desired: 3, State: rolloutFailed, Hosts: []string{"a", "b"}, Detail: "on a: not healthy",
				LogTail: []string{"panic: no config"}, Previous: 2, Restarts: 5, CrashLooping: 1}},
		{"a host without a name shows its ID; one with no replica is left out", unnamed,
			eggStatus{Desired: 1, State: rolloutProgressing, Hosts: []string{"h-9"}}},
		{"a state the CLI does not know is shown as it is", eggAt("web", 0, 1, "paused"),
			eggStatus{Desired: 1, State: "paused"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := eggStatuses(demoStatus(1, tt.egg))
			want := tt.want
			want.Namespace, want.Project, want.Egg = "default", "demo", tt.egg.Name
			if len(got) != 1 || !sameEgg(got[0], want) {
				t.Fatalf("eggStatuses = %+v\nwant %+v", got, want)
			}
		})
	}
}

func sameEgg(a, b eggStatus) bool {
	return a.Namespace == b.Namespace && a.Project == b.Project && a.Egg == b.Egg && a.Ready == b.Ready && a.Desired == b.Desired &&
		a.State == b.State && slices.Equal(a.Hosts, b.Hosts) && a.Detail == b.Detail && slices.Equal(a.LogTail, b.LogTail) &&
		a.Previous == b.Previous && a.Restarts == b.Restarts && a.CrashLooping == b.CrashLooping
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

// A host's reported problems reach hatch status: below the table of each
// project whose eggs it runs, once each.
func TestStatusShowsTheProblemsItsHostsReport(t *testing.T) {
	web := eggAt("web", 2, 2, "done", "a", "b")
	web.Hosts[0].Errors = []string{"write desired-state cache: no space left on device"}
	kv := eggAt("kv", 1, 1, "done", "a")
	kv.Hosts[0].Errors = web.Hosts[0].Errors
	other := api.ProjectStatus{Namespace: "default", Project: "shop", Eggs: []api.EggStatus{eggAt("api", 1, 1, "done", "b")}}
	eggs := append(eggStatuses(demoStatus(2, kv, web)), eggStatuses(other)...)

	var b strings.Builder
	if err := printStatus(&b, eggs); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	const line = "    a: write desired-state cache: no space left on device\n"
	if strings.Count(out, line) != 1 {
		t.Errorf("want the problem once, under default/demo:\n%s", out)
	}
	demo, shop, _ := strings.Cut(out, "default/shop")
	if !strings.Contains(demo, "problems reported by its hosts:\n"+line) || strings.Contains(shop, "problems") {
		t.Errorf("the problem is not (only) under default/demo:\n%s", out)
	}
}

func TestHostsShowsWhatTheAgentsReportWrong(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	hosts := []api.Host{
		{ID: "h1", Name: "a", State: "up", LastSeen: now.Add(-time.Second), Errors: []string{"write desired-state cache: read-only file system", "pull web:2: not found"}},
		{ID: "h2", Name: "b", State: "up", LastSeen: now.Add(-time.Second)},
	}
	var b strings.Builder
	if err := printHosts(&b, hosts, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"PROBLEMS", "a: write desired-state cache: read-only file system\n", "a: pull web:2: not found\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "b: ") {
		t.Errorf("host b has no problem:\n%s", out)
	}
}

func TestHostsShowsAnEngineThatDoesNotAnswer(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	hosts := []api.Host{{ID: "h1", Name: "a", State: "up", LastSeen: now.Add(-time.Second),
		Engine: &contract.EngineProblem{Since: now.Add(-8 * time.Second), Reason: "ping the Docker Engine: context deadline exceeded"}}}
	var b strings.Builder
	if err := printHosts(&b, hosts, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"up, engine unresponsive", "a: the Docker Engine has not answered since", "context deadline exceeded"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}

func TestHostsShowsTheBelievedCapacityAndAJumpNotBelieved(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	eight := contract.HostCapacity{MemoryBytes: 8 << 30, MilliCPU: 4000}
	hosts := []api.Host{
		{ID: "h1", Name: "a", State: "up", LastSeen: now, Capacity: &api.HostCapacity{Reported: &eight, Believed: eight, Source: "reported"}},
		{ID: "h2", Name: "b", State: "up", LastSeen: now, Capacity: &api.HostCapacity{Reported: &contract.HostCapacity{MemoryBytes: 1 << 40, MilliCPU: 64000},
			Believed: eight, Source: "limited", Problem: "reports 1 TiB and 64 CPUs of capacity, but placement believes 8 GiB and 4 CPUs"}},
		{ID: "h3", Name: "c", State: "up", LastSeen: now, Capacity: &api.HostCapacity{Believed: contract.HostCapacity{MemoryBytes: 16 << 30, MilliCPU: 8000}, Source: "pinned"}},
	}
	var b strings.Builder
	if err := printHosts(&b, hosts, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"CAPACITY", "8 GiB and 4 CPUs  ", "8 GiB and 4 CPUs (limited)", "16 GiB and 8 CPUs (pinned)",
		"b: reports 1 TiB and 64 CPUs of capacity, but placement believes 8 GiB and 4 CPUs\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "a: ") || strings.Contains(out, "c: ") {
		t.Errorf("hosts a and c have no problem:\n%s", out)
	}
}

func TestHostsSetReadsItsFlags(t *testing.T) {
	req, err := setCapacityRequest(true, "64Gi", true, 16)
	if err != nil || req != (api.SetHostCapacity{MemoryBytes: 64 << 30, MilliCPU: 16000}) {
		t.Fatalf("--memory 64Gi --cpus 16 = %+v, %v", req, err)
	}
	if req, err = setCapacityRequest(false, "", true, 0.5); err != nil || req != (api.SetHostCapacity{MilliCPU: 500}) {
		t.Fatalf("--cpus 0.5 = %+v, %v", req, err)
	}
	for _, bad := range []struct {
		memSet  bool
		mem     string
		cpusSet bool
		cpus    float64
		want    string
	}{{false, "", false, 0, "give --memory, --cpus or both"}, {true, "lots", false, 0, "--memory: \"lots\""},
		{true, "0", false, 0, "above zero"}, {false, "", true, -1, "--cpus: -1"}} {
		if _, err := setCapacityRequest(bad.memSet, bad.mem, bad.cpusSet, bad.cpus); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("setCapacityRequest(%+v) = %v, want an error containing %q", bad, err, bad.want)
		}
	}
	if _, err := hostCapacityCaps("1Ti", 0); err == nil || !strings.Contains(err.Error(), "--max-host-cpus") {
		t.Errorf("--max-host-cpus 0 = %v", err)
	}
}
