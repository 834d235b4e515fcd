package converge

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

const host = "h1"

// testOptions are the options of a converge in a test: its logs go to t.
func testOptions(t testing.TB) Options { return Options{Logger: zaptest.NewLogger(t)} }

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// wl returns a workload of project shop with the given egg and replicas.
func wl(egg string, replicas int, edits ...func(*contract.WorkloadSpec)) contract.WorkloadSpec {
	w := contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: egg, Image: "img:" + egg + "-v2", Replicas: replicas}
	for _, e := range edits {
		e(&w)
	}
	return w
}

func stateful(w *contract.WorkloadSpec) {
	w.Volumes = []contract.VolumeMount{{Name: "data", DockerName: "hatch-shop-data-x", Target: "/data"}}
}

func desiredOf(ws ...contract.WorkloadSpec) contract.DesiredState {
	return contract.DesiredState{HostID: host, Workloads: ws}
}

// old is a spec hash that no desired workload has.
const old = "0ld0ld0ld0ld0ld0"

// ctr describes a container of w in slot, labelled with hash (use
// contract.SpecHash(w) for an up-to-date one), started a minute before t0.
type ctrOpt func(*containers.Container)

func ctr(id string, w contract.WorkloadSpec, slot int, hash string, state contract.ContainerState, opts ...ctrOpt) containers.Container {
	c := containers.FromLabels(id, "n-"+id, containers.Labels(host, w, slot, hash))
	c.State = state
	c.Healthy = state == contract.StateRunning
	c.Created = t0.Add(-time.Minute)
	c.StartedAt = t0.Add(-time.Minute)
	if state.Exited() {
		c.FinishedAt = t0.Add(-time.Second)
		if state == contract.StateCrashed {
			c.ExitCode = 1
		}
	}
	if state == contract.StateBuilding {
		c.ID = ""
	}
	for _, o := range opts {
		o(&c)
	}
	return c
}

func unhealthy(streak int) ctrOpt {
	return func(c *containers.Container) { c.Healthy, c.FailingStreak = false, streak }
}

func created(ago time.Duration) ctrOpt {
	return func(c *containers.Container) { c.Created, c.StartedAt = t0.Add(-ago), t0.Add(-ago) }
}

func labels(edit func(map[string]string)) ctrOpt {
	return func(c *containers.Container) {
		l := map[string]string{}
		for k, v := range c.Labels {
			l[k] = v
		}
		edit(l)
		*c = containers.FromLabels(c.ID, c.Name, l)
		c.State, c.Healthy, c.Created, c.StartedAt = contract.StateRunning, true, t0.Add(-time.Minute), t0.Add(-time.Minute)
	}
}

func up(w contract.WorkloadSpec) string { return contract.SpecHash(w) }

// render writes a plan's steps compactly: "start web/0", "roll web/1 c1".
func render(p Plan) []string {
	out := make([]string, 0, len(p.Steps))
	for _, s := range p.Steps {
		line := string(s.Action) + " " + strings.TrimPrefix(s.WorkloadID, "default/shop/") + "/" + strconv.Itoa(s.ReplicaIndex)
		if s.ContainerID != "" {
			line += " " + s.ContainerID
		}
		out = append(out, line)
	}
	return out
}

func equalSteps(t *testing.T, got Plan, want []string) {
	t.Helper()
	g := render(got)
	if len(g) != len(want) {
		t.Fatalf("steps:\n got  %q\n want %q", g, want)
	}
	for i := range g {
		if g[i] != want[i] {
			t.Fatalf("steps:\n got  %q\n want %q", g, want)
		}
	}
}

// healthySince returns a history in which the containers have been healthy
// (in their current incarnation, started a minute before t0) since t0-ago.
func healthySince(ago time.Duration, ids ...string) *History {
	h := NewHistory()
	for _, id := range ids {
		h.Containers[id] = ContainerHistory{HealthySince: t0.Add(-ago), HealthyStart: t0.Add(-time.Minute)}
	}
	return h
}
