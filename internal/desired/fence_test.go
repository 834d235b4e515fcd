package desired

import (
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

// TestAnEggMountingAFailoverVolumeIsFenced: the mount's Fenced flag (set by
// the spec for a volume with failover) marks the workload, and nothing
// else does.
func TestAnEggMountingAFailoverVolumeIsFenced(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mounts []inputs.Mount
		fenced bool
	}{
		{"no volume", nil, false},
		{"a plain volume", []inputs.Mount{{Type: inputs.MountVolume, Source: "logs", Target: "/logs"}}, false},
		{"a failover volume beside a plain one", []inputs.Mount{
			{Type: inputs.MountVolume, Source: "logs", Target: "/logs"},
			{Type: inputs.MountVolume, Source: "data", Target: "/data", Fenced: true}}, true},
	} {
		e := Egg{namespace: "default", project: "shop", name: "db", in: inputs.Egg{Replicas: 1, Image: "postgres:16", Volumes: tc.mounts}}
		w, err := e.workload("h1", 1, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if w.Fenced != tc.fenced {
			t.Errorf("%s: Fenced = %v, want %v", tc.name, w.Fenced, tc.fenced)
		}
	}
}

// TestDeriveHandsFenceAfterToEveryHost: every state of the view carries the
// server's setting after derive, the states of hosts without eggs too.
func TestDeriveHandsFenceAfterToEveryHost(t *testing.T) {
	v := &view{states: map[string]*contract.DesiredState{"h1": {HostID: "h1"}, "h2": {HostID: "h2", FenceAfter: time.Hour}},
		fenceAfter: time.Minute}
	v.derive()
	for id, d := range v.states {
		if d.FenceAfter != time.Minute {
			t.Errorf("host %s: FenceAfter %s, want the server's 1m", id, d.FenceAfter)
		}
	}
}
