//go:build docker

package docker

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// foreignBeside sets foreign objects beside the engine: unlabelled ones under
// the names the engine would give its own in another namespace, and ones
// labelled as another host's agent labels its own.
func (v *env) foreignBeside() *dockertest.Foreign {
	other := map[string]string{
		containers.LabelManaged: "true", containers.LabelHost: "other-" + v.host,
		containers.LabelNamespace: "default", containers.LabelProject: "shop", containers.LabelEgg: "web",
		containers.LabelWorkload: "default/shop/web", containers.LabelSlot: "0", containers.LabelSpec: "x",
	}
	return v.s.CreateForeign(dockertest.ForeignOptions{
		Image:           v.image,
		ContainerName:   contract.ContainerName("staging", "shop", "web", 0, v.host, "f00000"),
		NetworkName:     contract.NetworkName(v.host, "staging", "shop", "default"),
		VolumeName:      contract.VolumeName(v.host, "staging", "shop", "data"),
		OtherHostLabels: other,
	})
}

func TestThreeReplicasStartListAndStop(t *testing.T) {
	v := newEnv(t)
	foreign := v.foreignBeside()
	w := v.spec("web")
	for slot := range 3 {
		v.start(w, slot, "")
	}
	first := v.list()
	if len(first) != 3 {
		t.Fatalf("right after the starts List shows %d containers or placeholders, want 3:\n%s", len(first), dump(first))
	}
	cs := v.waitFor("three healthy replicas", func(cs []containers.Container) bool { return allHealthy(cs, "web", 3) })
	if len(cs) != 3 {
		t.Fatalf("List shows foreign containers:\n%s", dump(cs))
	}
	var slots []int
	for _, c := range cs {
		slots = append(slots, c.Slot)
		if c.SpecHash != contract.SpecHash(w) || c.LabelError != "" || !containers.Owned(c.Labels, v.host) {
			t.Errorf("container %s: spec %q label error %q labels %v", c.Name, c.SpecHash, c.LabelError, c.Labels)
		}
		if !strings.HasPrefix(c.Name, "hatch-shop-web-") || c.Created.IsZero() || c.StartedAt.IsZero() {
			t.Errorf("container %s: created %v started %v", c.Name, c.Created, c.StartedAt)
		}
		if code, body := v.get(c.ID, "/version"); code != 200 || body != "v1" {
			t.Errorf("/version of slot %d: %d %q", c.Slot, code, body)
		}
	}
	slices.Sort(slots)
	if !slices.Equal(slots, []int{0, 1, 2}) {
		t.Errorf("slots %v", slots)
	}
	if v.changes.Load() == 0 {
		t.Error("OnChange was never called while tasks ended and containers turned healthy")
	}

	for _, c := range cs {
		if err := v.e.Stop(t.Context(), containers.StopRequest{ID: c.ID, WorkloadID: c.WorkloadID, Slot: c.Slot, StopTimeout: 2 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	during := v.list()
	for _, c := range during {
		if c.State != contract.StateDraining && c.State != contract.StateStopped && c.State != contract.StateCompleted {
			t.Errorf("a container being stopped shows %s", c.State)
		}
	}
	v.waitFor("no container left", func(cs []containers.Container) bool { return len(cs) == 0 })
	for _, c := range cs {
		v.gone(c.ID)
	}
	// Stopping what is gone is a no-op.
	if err := v.e.Stop(t.Context(), containers.StopRequest{ID: cs[0].ID}); err != nil {
		t.Errorf("stop of a removed container: %v", err)
	}
	foreign.AssertUntouched(t)
}

func TestStartTwiceWhileInProgressMakesOneContainer(t *testing.T) {
	v := newEnv(t)
	w := v.spec("web")
	v.start(w, 0, "")
	v.start(w, 0, "")
	v.waitFor("one healthy container", func(cs []containers.Container) bool { return allHealthy(cs, "web", 1) })
	time.Sleep(500 * time.Millisecond)
	if cs := v.list(); len(cs) != 1 {
		t.Fatalf("two starts of one slot and spec made %d containers:\n%s", len(cs), dump(cs))
	}
}

func TestForeignObjectsAreNeverTouched(t *testing.T) {
	v := newEnv(t)
	foreign := v.foreignBeside()
	ctx := t.Context()
	for _, id := range foreign.ContainerIDs() {
		calls := map[string]error{
			"stop":    v.e.Stop(ctx, containers.StopRequest{ID: id}),
			"drain":   v.e.Drain(ctx, containers.StopRequest{ID: id}),
			"restart": v.e.Restart(ctx, containers.RestartRequest{ID: id}),
		}
		_, calls["logs"] = v.e.Logs(ctx, id, 5)
		calls["start replacing it"] = v.e.Start(ctx, containers.StartRequest{HostID: v.host, Spec: v.spec("web"), SpecHash: "x", Replace: id})
		for op, err := range calls {
			if !errors.Is(err, containers.ErrNotFound) {
				t.Errorf("%s of foreign container %s: %v, want containers.ErrNotFound", op, short(id), err)
			}
		}
	}
	var vols []contract.VolumeSpec
	for _, name := range foreign.VolumeNames() {
		vols = append(vols, contract.VolumeSpec{Namespace: "default", Project: "shop", Name: "data", DockerName: name, Delete: true})
	}
	if err := v.e.RemoveVolumes(ctx, vols); !errors.Is(err, ErrForeign) {
		t.Errorf("removing foreign volumes: %v, want ErrForeign", err)
	}
	if err := v.e.PruneNetworks(ctx, nil); err != nil {
		t.Errorf("prune: %v", err)
	}
	// A workload whose network name is taken by a foreign network does not
	// join it.
	w := v.spec("web")
	w.Networks = []string{contract.NetworkName(v.host, "staging", "shop", "default")}
	v.start(w, 0, "")
	dockertest.Eventually(t, 30*time.Second, 100*time.Millisecond, func() error {
		for _, f := range v.e.Failures() {
			if errors.Is(f.Err, ErrForeign) {
				return nil
			}
		}
		return errors.New("no ErrForeign failure yet")
	})
	if cs := v.list(); len(cs) != 0 {
		t.Errorf("a container was made on a foreign network:\n%s", dump(cs))
	}
	foreign.AssertUntouched(t)
}

func TestListSeesOnlyThisHost(t *testing.T) {
	// Two engines on one Docker Engine, as two agents in a test: each lists
	// only its own containers, and neither may stop the other's.
	a := newEnv(t)
	bEngine, err := New(t.Context(), a.s.Client, func() Config {
		c := testConfig(t, "other-"+a.host)
		c.SecretDir = a.s.ShmDir()
		c.Labels = a.s.Labels(nil)
		return c
	}())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bEngine.Close(t.Context()) })
	a.start(a.spec("web"), 0, "")
	w := a.spec("web")
	w.Networks = []string{contract.NetworkName("other-"+a.host, "default", "shop", "default")}
	if err := bEngine.Start(t.Context(), containers.StartRequest{HostID: "other-" + a.host, Spec: w, SpecHash: "b", Slot: 0}); err != nil {
		t.Fatal(err)
	}
	mine := a.waitFor("a's container healthy", func(cs []containers.Container) bool { return allHealthy(cs, "web", 1) })
	dockertest.Eventually(t, 30*time.Second, 100*time.Millisecond, func() error {
		cs, err := bEngine.List(t.Context())
		if err != nil || len(cs) != 1 || cs[0].ID == "" || cs[0].State != contract.StateRunning {
			return errors.New("b's container not running yet")
		}
		if cs[0].ID == mine[0].ID {
			t.Fatal("both hosts list the same container")
		}
		return nil
	})
	if err := bEngine.Stop(t.Context(), containers.StopRequest{ID: mine[0].ID}); !errors.Is(err, containers.ErrNotFound) {
		t.Fatalf("host b stopping host a's container: %v", err)
	}
	all, _ := a.s.Client.ContainerList(t.Context(), container.ListOptions{Filters: filters.NewArgs(filters.Arg("label", dockertest.ScopeLabel+"="+a.s.ID))})
	if len(all) != 2 {
		t.Fatalf("%d containers run, want one per host", len(all))
	}
}
