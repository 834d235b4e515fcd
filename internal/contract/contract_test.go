package contract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestComputeVersionDependsOnContentOnly(t *testing.T) {
	web := fullSpec()
	api := fullSpec()
	api.Egg = "api"
	base := DesiredState{HostID: "h1", Workloads: []WorkloadSpec{web, api},
		Volumes: []VolumeSpec{{Namespace: "default", Project: "shop", Name: "a"}, {Namespace: "default", Project: "shop", Name: "b"}},
		Peers: []Peer{{HostID: "h1", Addresses: []string{"10.0.0.1:7702"}},
			{HostID: "h2", Name: "b", Addresses: []string{"10.0.0.2:7702"}, Reaches: []string{"default/shop/web", "default/shop/api"}}},
		Runs: []Run{{ID: "r1", Workload: web}, {ID: "r2", Workload: api, Timeout: time.Minute}}}

	tests := []struct {
		name  string
		edit  func(d *DesiredState)
		equal bool
	}{
		{"the same content", func(d *DesiredState) {}, true},
		{"workloads in another order", func(d *DesiredState) {
			d.Workloads[0], d.Workloads[1] = d.Workloads[1], d.Workloads[0]
		}, true},
		{"volumes in another order", func(d *DesiredState) { d.Volumes[0], d.Volumes[1] = d.Volumes[1], d.Volumes[0] }, true},
		{"peers in another order", func(d *DesiredState) { d.Peers[0], d.Peers[1] = d.Peers[1], d.Peers[0] }, true},
		{"a peer's reaches in another order", func(d *DesiredState) {
			d.Peers[1].Reaches[0], d.Peers[1].Reaches[1] = d.Peers[1].Reaches[1], d.Peers[1].Reaches[0]
		}, true},
		{"a peer removed", func(d *DesiredState) { d.Peers = d.Peers[:1] }, false},
		{"a peer's new address", func(d *DesiredState) { d.Peers[0].Addresses[0] = "10.0.0.9:7702" }, false},
		{"a peer may reach less", func(d *DesiredState) { d.Peers[1].Reaches = d.Peers[1].Reaches[:1] }, false},
		{"a stale Version field", func(d *DesiredState) { d.Version = "old" }, true},
		{"peer fields set by the control plane", func(d *DesiredState) { d.PeersVersion, d.PeersOmitted = "v", true }, true},
		{"a new secret value under the same handle", func(d *DesiredState) { d.Workloads[0].Secrets[0].Value = "other" }, true},
		{"another replica count", func(d *DesiredState) { d.Workloads[0].Replicas++ }, false},
		{"another host", func(d *DesiredState) { d.HostID = "h2" }, false},
		{"a volume marked for deletion", func(d *DesiredState) { d.Volumes[0].Delete = true }, false},
		{"a workload removed", func(d *DesiredState) { d.Workloads = d.Workloads[:1] }, false},
		{"a new secret handle", func(d *DesiredState) { d.Workloads[0].Secrets[0].Handle = "h2" }, false},
		{"runs in another order", func(d *DesiredState) { d.Runs[0], d.Runs[1] = d.Runs[1], d.Runs[0] }, true},
		{"a new secret value in a run", func(d *DesiredState) { d.Runs[0].Workload.Secrets[0].Value = "other" }, true},
		{"a new registry password under the same handle", func(d *DesiredState) { d.Workloads[0].PullAuth.Password = "other" }, true},
		{"a new registry password in a run", func(d *DesiredState) { d.Runs[0].Workload.PullAuth.Password = "other" }, true},
		{"a new registry password handle", func(d *DesiredState) { d.Workloads[0].PullAuth.Handle = "p2" }, false},
		{"a run to stop", func(d *DesiredState) { d.Runs[1].Stop = true }, false},
		{"a run removed", func(d *DesiredState) { d.Runs = d.Runs[:1] }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := roundTrip(t, base)
			tt.edit(&d)
			if got := d.ComputeVersion() == base.ComputeVersion(); got != tt.equal {
				t.Errorf("versions equal = %v, want %v", got, tt.equal)
			}
		})
	}
	if v1, v2 := base.ComputeVersion(), roundTrip(t, base).ComputeVersion(); v1 != v2 || v1 == "" {
		t.Error("ComputeVersion is not a stable non-empty hash")
	}
	// ComputeVersion must not reorder or blank the caller's data.
	if base.Workloads[0].Egg != "web" || base.Workloads[0].Secrets[0].Value != "v1" || base.Workloads[0].PullAuth.Password != "pw" || base.Peers[1].Reaches[0] != "default/shop/web" {
		t.Error("ComputeVersion mutated its receiver's slices")
	}
}

// A state without peers keeps the version it had before peers existed, so
// that agents do not all converge anew on the upgrade that brings them.
func TestComputeVersionWithoutPeersIsUnchanged(t *testing.T) {
	w := fullSpec()
	w.Secrets = nil // their values are blanked in the hash
	w.PullAuth = nil
	d := DesiredState{HostID: "h1", Workloads: []WorkloadSpec{w}}
	withEmpty := d
	withEmpty.Peers = []Peer{}
	if d.ComputeVersion() != withEmpty.ComputeVersion() {
		t.Error("an empty peer list changed the version")
	}
	type before struct { // DesiredState as it was
		HostID    string         `json:"host_id"`
		Version   string         `json:"version,omitempty"`
		Workloads []WorkloadSpec `json:"workloads,omitempty"`
		Volumes   []VolumeSpec   `json:"volumes,omitempty"`
	}
	if got, want := d.ComputeVersion(), hashJSON(before{HostID: d.HostID, Workloads: d.Workloads}); got != want {
		t.Errorf("version %s, before peers it was %s", got, want)
	}
}

// The control plane stores each host's content once and the fleet's peers
// once: the version of a whole state is made of their two versions alone,
// each of which moves with its own part only.
func TestAStatesVersionIsMadeOfItsContentsAndItsPeers(t *testing.T) {
	d := DesiredState{HostID: "h1", Workloads: []WorkloadSpec{fullSpec()},
		Peers: []Peer{{HostID: "h1", Addresses: []string{"10.0.0.1:7702"}}, {HostID: "h2"}}}
	if got, want := d.ComputeVersion(), CombineVersions(d.ContentVersion(), PeersVersion(d.Peers)); got != want {
		t.Fatalf("ComputeVersion %s, combined from its parts %s", got, want)
	}
	other := d
	other.Peers = d.Peers[:1]
	if other.ContentVersion() != d.ContentVersion() {
		t.Error("the content version moved with the peers")
	}
	if other.ComputeVersion() == d.ComputeVersion() || PeersVersion(other.Peers) == PeersVersion(d.Peers) {
		t.Error("the version did not move with the peers")
	}
	other = d
	other.Workloads = nil
	if PeersVersion(other.Peers) != PeersVersion(d.Peers) || other.ComputeVersion() == d.ComputeVersion() {
		t.Error("the version did not move with the content alone")
	}
	if PeersVersion(nil) != "" || CombineVersions("c", "") != "c" {
		t.Error("no peers must leave the content's version as it is")
	}
}

func TestSealSetsVersion(t *testing.T) {
	d := DesiredState{HostID: "h1", Workloads: []WorkloadSpec{fullSpec()}}
	d.Seal()
	if d.Version == "" || d.Version != d.ComputeVersion() {
		t.Errorf("Seal set %q, ComputeVersion says %q", d.Version, d.ComputeVersion())
	}
}

func roundTrip(t *testing.T, d DesiredState) DesiredState {
	t.Helper()
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeDesiredState(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDesiredStateSurvivesJSONAndToleratesUnknownFields(t *testing.T) {
	d := DesiredState{HostID: "h1", Workloads: []WorkloadSpec{fullSpec()}}
	d.Seal()
	got := roundTrip(t, d)
	if got.ComputeVersion() != d.Version || got.Workloads[0].Secrets[0].Value != "v1" {
		t.Fatalf("round trip changed the content: %+v", got)
	}

	// A newer control plane adds fields at every level; an older agent ignores them.
	newer := `{"host_id":"h1","future":1,"workloads":[{"namespace":"default","project":"shop","egg":"web",
		"image":"nginx","replicas":2,"sidecars":[{"x":1}],"health":{"http":"/h","grpc":"svc"}}]}`
	got, err := DecodeDesiredState(strings.NewReader(newer))
	if err != nil {
		t.Fatalf("unknown fields were refused: %v", err)
	}
	if w := got.Workloads[0]; w.ID() != "default/shop/web" || w.Replicas != 2 || w.Health.HTTP != "/h" {
		t.Errorf("known fields lost next to unknown ones: %+v", w)
	}

	// An older control plane omits fields; the agent reads them as defaults.
	older := `{"host_id":"h1","workloads":[{"namespace":"default","project":"shop","egg":"web","image":"nginx","replicas":1}]}`
	got, err = DecodeDesiredState(strings.NewReader(older))
	if err != nil {
		t.Fatal(err)
	}
	if w := got.Workloads[0]; w.RestartPolicy() != RestartAlways || w.HealthRetries() != 3 || w.DrainTimeout() != DefaultDrainTimeout {
		t.Errorf("missing fields did not read as defaults: %+v", w)
	}

	if _, err := DecodeDesiredState(strings.NewReader("{")); err == nil {
		t.Error("truncated JSON was accepted")
	}
}

func TestStatusReportToleratesUnknownFields(t *testing.T) {
	until := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := StatusReport{HostID: "h1", Version: "v", Time: until, Containers: []ContainerStatus{{
		WorkloadID: "default/shop/web", Slot: 1, State: StateCrashed, Restarts: 4, CrashLoopUntil: until,
		RolloutFailure: "not healthy within 5m0s", LogTail: []string{"panic: boom"},
	}}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.Replace(b, []byte(`{"host_id"`), []byte(`{"cpu":0.5,"host_id"`), 1)
	got, err := DecodeStatusReport(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	c := got.Containers[0]
	if !c.CrashLoopUntil.Equal(until) || c.Restarts != 4 || c.LogTail[0] != "panic: boom" || c.State != StateCrashed {
		t.Errorf("status lost fields: %+v", c)
	}
	// A container not crash-looping carries no zero time on the wire.
	b, _ = json.Marshal(ContainerStatus{WorkloadID: "w", State: StateRunning})
	if strings.Contains(string(b), "crash_loop_until") {
		t.Errorf("zero CrashLoopUntil was encoded: %s", b)
	}
}

func TestSecretValueNeverFormats(t *testing.T) {
	w := WorkloadSpec{Secrets: []SecretFile{{Name: "k", Handle: "h", Value: "hunter2"}}}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(format, w); strings.Contains(out, "hunter2") {
			t.Errorf("%s leaks the secret: %s", format, out)
		}
		if out := fmt.Sprintf(format, RegistryAuth{Registry: "ghcr.io", Username: "ci", Password: "hunter2"}); strings.Contains(out, "hunter2") {
			t.Errorf("%s leaks a registry password: %s", format, out)
		}
	}
}

func TestWorkloadDefaults(t *testing.T) {
	tests := []struct {
		name      string
		w         WorkloadSpec
		surge     int
		stateful  bool
		retries   int
		deadline  time.Duration
		policy    RestartPolicy
		stopAfter time.Duration
	}{
		{"one replica", WorkloadSpec{Replicas: 1}, 1, false, 3, 5 * time.Minute, RestartAlways, 10 * time.Second},
		{"cold", WorkloadSpec{Replicas: 0}, 1, false, 3, 5 * time.Minute, RestartAlways, 10 * time.Second},
		{"25% of 10 rounds up to 3", WorkloadSpec{Replicas: 10}, 3, false, 3, 5 * time.Minute, RestartAlways, 10 * time.Second},
		{"25% of 8 is 2", WorkloadSpec{Replicas: 8}, 2, false, 3, 5 * time.Minute, RestartAlways, 10 * time.Second},
		{"explicit settings win", WorkloadSpec{Replicas: 8, Restart: RestartNo, StopTimeout: time.Second,
			Rollout: Rollout{MaxSurge: 5, ProgressDeadline: time.Minute}, Health: HealthCheck{Retries: 1}},
			5, false, 1, time.Minute, RestartNo, time.Second},
		{"a volume makes it stateful", WorkloadSpec{Replicas: 1, Volumes: []VolumeMount{{Name: "d"}}}, 1, true, 3, 5 * time.Minute, RestartAlways, 10 * time.Second},
		{"stop-first makes it stateful", WorkloadSpec{Replicas: 4, Rollout: Rollout{Order: StopFirst}}, 1, true, 3, 5 * time.Minute, RestartAlways, 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := tt.w
			if w.MaxSurge() != tt.surge || w.Stateful() != tt.stateful || w.HealthRetries() != tt.retries ||
				w.ProgressDeadline() != tt.deadline || w.RestartPolicy() != tt.policy || w.EffectiveStopTimeout() != tt.stopAfter {
				t.Errorf("got surge %d stateful %v retries %d deadline %v policy %s stop %v",
					w.MaxSurge(), w.Stateful(), w.HealthRetries(), w.ProgressDeadline(), w.RestartPolicy(), w.EffectiveStopTimeout())
			}
		})
	}
}

// Services are hashed whatever their order, and a change of one (a host
// gained, a route added) is a new version.
func TestComputeVersionCoversServicesInAnyOrder(t *testing.T) {
	web := Service{Namespace: "default", Project: "shop", Egg: "web", Port: 8080, Hosts: []string{"h1", "h2"},
		Routes: []Route{{Host: "shop.example.com"}}}
	kv := Service{Namespace: "default", Project: "shop", Egg: "kv", Port: 7000, Hosts: []string{"h3"},
		Names: []string{"kv"}, Networks: []string{"hatch-shop-default-1"}}
	a := DesiredState{HostID: "h1", Services: []Service{web, kv}}
	b := DesiredState{HostID: "h1", Services: []Service{kv, web}}
	if a.ComputeVersion() != b.ComputeVersion() {
		t.Error("the order of services changed the version")
	}
	moved := web
	moved.Hosts = []string{"h1", "h3"}
	c := DesiredState{HostID: "h1", Services: []Service{moved, kv}}
	if a.ComputeVersion() == c.ComputeVersion() {
		t.Error("a service on other hosts kept the version")
	}
	if s, ok := a.Service("default/shop/kv"); !ok || s.Port != 7000 {
		t.Errorf("Service(kv) = %+v, %v", s, ok)
	}
	empty := DesiredState{HostID: "h1", Services: []Service{}}
	if empty.ComputeVersion() != (DesiredState{HostID: "h1"}).ComputeVersion() {
		t.Error("an empty service list changed the version")
	}
}

func TestImageRegistry(t *testing.T) {
	for image, want := range map[string]string{
		"nginx:1.27":            DockerHub,
		"acme/web":              DockerHub,
		"ghcr.io/acme/web:main": "ghcr.io",
		"127.0.0.1:5000/web@sha256:" + strings.Repeat("a", 64): "127.0.0.1:5000",
		"localhost/web":                     "localhost",
		"registry.example.com:8443/a/b/c:1": "registry.example.com:8443",
		"not a reference!":                  "",
	} {
		if got := ImageRegistry(image); got != want {
			t.Errorf("ImageRegistry(%q) = %q, want %q", image, got, want)
		}
	}
	for host, want := range map[string]bool{
		"ghcr.io": true, "127.0.0.1:5000": true, "localhost": true, "docker.io": true, "registry.example.com:8443": true,
		"": false, "https://ghcr.io": false, "ghcr.io/acme": false, "ghcr.io:port": false, "a b": false,
	} {
		if got := ValidRegistryHost(host); got != want {
			t.Errorf("ValidRegistryHost(%q) = %v, want %v", host, got, want)
		}
	}
}

// TestVersionCoversFencing: the server's fence_after and a workload's Fenced
// flag reach the agent only if they change the version it compares.
func TestVersionCoversFencing(t *testing.T) {
	d := DesiredState{HostID: "h1", Workloads: []WorkloadSpec{{Namespace: "n", Project: "p", Egg: "db", Image: "x"}}}
	base := d.ContentVersion()
	fenced := d
	fenced.FenceAfter = time.Minute
	if fenced.ContentVersion() == base {
		t.Error("FenceAfter does not change ContentVersion")
	}
	marked := d
	marked.Workloads = []WorkloadSpec{d.Workloads[0]}
	marked.Workloads[0].Fenced = true
	if marked.ContentVersion() == base {
		t.Error("WorkloadSpec.Fenced does not change ContentVersion")
	}
	if SpecHash(marked.Workloads[0]) != SpecHash(d.Workloads[0]) {
		t.Error("Fenced changes the spec hash: marking an egg would replace its containers")
	}
}
