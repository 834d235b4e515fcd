//go:build docker

package docker

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

// TestStatefulVolumeSurvivesAStopFirstReplace writes to a volume, replaces
// the container stop-first with a new spec, and reads the data back, while
// checking that never two containers ran on the volume.
func TestStatefulVolumeSurvivesAStopFirstReplace(t *testing.T) {
	v := newEnv(t)
	vol := contract.VolumeName(v.host, "default", "shop", "data")
	w := v.spec("db")
	w.Volumes = []contract.VolumeMount{{Name: "data", DockerName: vol, Target: "/data"}}
	w.Env["APP_COUNT_FILE"] = "/data/count"
	v.start(w, 0, "")
	old := v.waitFor("healthy", func(cs []containers.Container) bool { return allHealthy(cs, "db", 1) })[0]
	for range 3 {
		if code := v.do("POST", old.ID, "/hit", ""); code != 200 {
			t.Fatalf("hit: %d", code)
		}
	}

	// Sample what runs on the volume, straight from Docker, every 20ms.
	var most atomic.Int32
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		f := filters.NewArgs(filters.Arg("volume", vol), filters.Arg("status", "running"))
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			cs, err := v.s.Client.ContainerList(t.Context(), container.ListOptions{Filters: f})
			if err == nil && int32(len(cs)) > most.Load() {
				most.Store(int32(len(cs)))
			}
		}
	}()

	w2 := w
	w2.Env = map[string]string{"APP_VERSION": "v2", "APP_COUNT_FILE": "/data/count"}
	v.start(w2, 0, old.ID)
	cur := v.waitFor("the replacement healthy", func(cs []containers.Container) bool {
		return allHealthy(cs, "db", 1) && cs[0].SpecHash == contract.SpecHash(w2)
	})[0]
	close(stop)
	wg.Wait()
	v.gone(old.ID)
	if most.Load() > 1 {
		t.Errorf("%d containers ran on the volume at once", most.Load())
	}
	if _, body := v.get(cur.ID, "/count"); body != "3" {
		t.Errorf("count after the replace: %q, want 3", body)
	}
	if _, body := v.get(cur.ID, "/version"); body != "v2" {
		t.Errorf("version after the replace: %q", body)
	}

	// Stopping the last container keeps the volume: only the desired
	// state's deletion mark removes it, and not while it is in use.
	marked := []contract.VolumeSpec{{Namespace: "default", Project: "shop", Name: "data", Delete: true}}
	if err := v.e.RemoveVolumes(t.Context(), marked); err == nil {
		t.Error("a volume in use was removed")
	}
	if err := v.e.Stop(t.Context(), containers.StopRequest{ID: cur.ID, StopTimeout: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	v.gone(cur.ID)
	kept := []contract.VolumeSpec{{Namespace: "default", Project: "shop", Name: "data"}}
	if err := v.e.RemoveVolumes(t.Context(), kept); err != nil {
		t.Fatal(err)
	}
	vi, err := v.s.Client.VolumeInspect(t.Context(), vol)
	if err != nil {
		t.Fatalf("the volume went with its container, or unmarked: %v", err)
	}
	if !containers.Owned(vi.Labels, v.host) {
		t.Errorf("volume labels %v", vi.Labels)
	}
	if err := v.e.RemoveVolumes(t.Context(), marked); err != nil {
		t.Fatal(err)
	}
	if _, err := v.s.Client.VolumeInspect(t.Context(), vol); err == nil {
		t.Error("a volume marked for deletion is still there")
	}
	if err := v.e.RemoveVolumes(t.Context(), marked); err != nil {
		t.Errorf("removing a volume already gone: %v", err)
	}
}
