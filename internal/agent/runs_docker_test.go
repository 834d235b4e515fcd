//go:build docker

package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/containers/docker"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

func TestMain(m *testing.M) { os.Exit(dockertest.Main(m)) }

// dockerHost is an agent on the real Docker Engine with its own host ID,
// fed by an in-memory control plane.
type dockerHost struct {
	t     *testing.T
	s     *dockertest.Scope
	host  string
	image string
	cp    *fakeControlPlane
	dir   string
	a     *Agent
	e     *docker.Engine
	// stop closes the running agent and its adapter (a restart's first half).
	stop func()
}

func newDockerHost(t *testing.T) *dockerHost {
	s := dockertest.NewScope(t)
	h := &dockerHost{t: t, s: s, host: "h" + s.ID, image: dockertest.Image(t, dockertest.ImageSpec{}),
		cp: newFakeControlPlane(), dir: t.TempDir()}
	return h
}

// start starts an agent (and its Docker adapter) on the host's data
// directory, closed when the test ends or by stop.
func (h *dockerHost) start() {
	t := h.t
	changes := NewSignal()
	ecfg := docker.DefaultConfig(h.host)
	ecfg.SecretDir, ecfg.Labels = h.s.ShmDir(), h.s.Labels(nil)
	ecfg.Logger = zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
	ecfg.Blobs, ecfg.Ingress, ecfg.OnChange = noBlobs{}, idleIngress{}, changes.Fire
	e, err := docker.New(t.Context(), h.s.Client, ecfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, e, h.cp, h.dir)
	cfg.HostID, cfg.Events, cfg.Changes = h.host, h.s.Client, changes
	cfg.ConvergeInterval = time.Second
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	h.a, h.e = a, e
	var once sync.Once
	h.stop = func() { once.Do(func() { h.close(a, e) }) }
	t.Cleanup(h.stop)
}

func (h *dockerHost) close(a *Agent, e *docker.Engine) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		h.t.Error(err)
	}
	if err := e.Close(ctx); err != nil {
		h.t.Error(err)
	}
}

// set hands out the desired state: workloads and runs.
func (h *dockerHost) set(ws []contract.WorkloadSpec, runs ...contract.Run) contract.DesiredState {
	d := contract.DesiredState{HostID: h.host, Workloads: ws, Runs: runs}
	d.Seal()
	h.cp.set(d)
	return d
}

// workload is the test app as an egg of project shop.
func (h *dockerHost) workload(egg string, env map[string]string, cmd ...string) contract.WorkloadSpec {
	return contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: egg, Image: h.image, Replicas: 1,
		Env: env, Command: cmd, StopTimeout: 2 * time.Second,
		Networks: []string{contract.NetworkName(h.host, "default", "shop", "default")}}
}

// runStatus waits (up to 60s) until the agent reports run id in state s.
func (h *dockerHost) runStatus(id string, s contract.RunState) contract.RunStatus {
	h.t.Helper()
	var got contract.RunStatus
	dockertest.Eventually(h.t, 60*time.Second, 50*time.Millisecond, func() error {
		r, _ := h.a.Status()
		for _, st := range r.Runs {
			if st.ID == id {
				got = st
				if st.State == s {
					return nil
				}
			}
		}
		return fmt.Errorf("run %s: last %+v; report errors %q", id, got, r.Errors)
	})
	return got
}

// runContainers returns Docker's containers of run id, by its label.
func (h *dockerHost) runContainers(id string) []container.Summary {
	h.t.Helper()
	cs, err := h.s.Client.ContainerList(h.t.Context(), container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", containers.LabelRun+"="+id), filters.Arg("label", containers.LabelHost+"="+h.host))})
	if err != nil {
		h.t.Fatal(err)
	}
	return cs
}

type noBlobs struct{}

func (noBlobs) OpenBlob(_ context.Context, digest string) (io.ReadCloser, error) {
	return nil, errors.New("no blob " + digest + " in this test")
}

type idleIngress struct{}

func (idleIngress) Drain(context.Context, string) error { return nil }
func (idleIngress) Gone(string)                         {}

func TestDockerARunExitsThreeIsReportedAndRemovedOnceItLeaves(t *testing.T) {
	h := newDockerHost(t)
	h.start()
	job := contract.Run{ID: "r1", Workload: h.workload("migrate", map[string]string{"APP_JOB": "1", "APP_JOB_EXIT": "3"})}
	h.set(nil, job)
	st := h.runStatus("r1", contract.RunExited)
	if st.ExitCode != 3 || st.StartedAt.IsZero() || st.EndedAt.Before(st.StartedAt) || st.ContainerID == "" {
		t.Errorf("status %+v, want exited 3 with its times", st)
	}
	lines, err := h.e.Logs(t.Context(), st.ContainerID, 5)
	if err != nil || !strings.Contains(strings.Join(lines, "\n"), "job done, exit 3") {
		t.Errorf("its output %q (%v), want the job's last line", lines, err)
	}
	if r, _ := h.a.Status(); len(r.Containers) != 0 {
		t.Errorf("report's containers %+v: a run's is no replica", r.Containers)
	}
	h.set(nil)
	dockertest.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		if n := len(h.runContainers("r1")); n != 0 {
			return fmt.Errorf("%d containers of r1 left", n)
		}
		return nil
	})
}

func TestDockerARunStartsAtMostOnceAcrossAnAgentRestart(t *testing.T) {
	h := newDockerHost(t)
	h.start()
	run := contract.Run{ID: "r2", Workload: h.workload("worker", nil)} // the app serves until stopped
	h.set(nil, run)
	first := h.runStatus("r2", contract.RunRunning)
	h.stop()
	h.start()
	again := h.runStatus("r2", contract.RunRunning)
	time.Sleep(2 * time.Second) // a few converges of the new agent
	cs := h.runContainers("r2")
	if len(cs) != 1 || again.ContainerID != first.ContainerID || !again.StartedAt.Equal(first.StartedAt) {
		t.Fatalf("%d containers; before the restart %+v, after %+v: want the one, started once", len(cs), first, again)
	}
}

func TestDockerARunPastItsTimeoutIsKilled(t *testing.T) {
	h := newDockerHost(t)
	h.start()
	w := h.workload("sleeper", nil, "-sleep") // deaf to its stop signal
	w.StopTimeout = time.Second
	h.set(nil, contract.Run{ID: "r3", Workload: w, Timeout: 2 * time.Second})
	st := h.runStatus("r3", contract.RunTimedOut)
	if took := st.EndedAt.Sub(st.StartedAt); took < 2*time.Second || took > 6*time.Second || st.ExitCode != 137 {
		t.Errorf("status %+v: ended after %v with %d; want about its 2s timeout and its 1s stop, killed (137)", st, took, st.ExitCode)
	}
}

func TestDockerAStoppedRunStopsWithinTwoSeconds(t *testing.T) {
	h := newDockerHost(t)
	h.start()
	run := contract.Run{ID: "r4", Workload: h.workload("worker", nil)}
	h.set(nil, run)
	h.runStatus("r4", contract.RunRunning)
	run.Stop = true
	asked := time.Now()
	h.set(nil, run)
	st := h.runStatus("r4", contract.RunStopped)
	if took := time.Since(asked); took > 2500*time.Millisecond {
		t.Errorf("stopped after %v, want within about 2s", took)
	}
	if len(h.runContainers("r4")) != 1 || st.ContainerID == "" {
		t.Errorf("status %+v: want its container kept", st)
	}
}

func TestDockerARunOnAStatefulEggsVolumeWaitsForTheReplicaToBeGone(t *testing.T) {
	h := newDockerHost(t)
	h.start()
	// Deaf to its stop signal: the replica runs its whole 2s stop timeout
	// after the converge began to stop it, which a run must wait out.
	db := h.workload("db", map[string]string{"APP_COUNT_FILE": "/data/count", "APP_IGNORE_STOP": "1"})
	db.Volumes = []contract.VolumeMount{{Name: "data", DockerName: contract.VolumeName(h.host, "default", "shop", "data"), Target: "/data"}}
	h.set([]contract.WorkloadSpec{db})
	var replica string
	dockertest.Eventually(t, 60*time.Second, 50*time.Millisecond, func() error {
		r, _ := h.a.Status()
		for _, c := range r.Containers {
			if c.State == contract.StateRunning {
				replica = c.ContainerID
				return nil
			}
		}
		return fmt.Errorf("no replica running: %+v", r.Containers)
	})
	// `hatch run --stop`: the replica leaves the desired state as the run
	// on its volume comes in. Docker is watched until the run runs: the
	// two never run together.
	job := db
	job.Env = map[string]string{"APP_JOB": "1", "APP_COUNT_FILE": "/data/count"}
	h.set(nil, contract.Run{ID: "r5", Workload: job})
	var replicaLastSeen time.Time
	dockertest.Eventually(t, 60*time.Second, 20*time.Millisecond, func() error {
		c, err := h.s.Client.ContainerInspect(t.Context(), replica)
		if err == nil && c.State.Running {
			replicaLastSeen = time.Now()
		}
		switch {
		case err == nil:
			return errors.New("the replica is still there")
		case len(h.runContainers("r5")) == 0:
			return errors.New("the run has no container yet")
		}
		return nil
	})
	st := h.runStatus("r5", contract.RunExited)
	if st.ExitCode != 0 || !st.StartedAt.After(replicaLastSeen) {
		t.Errorf("run %+v started before the replica was last seen running (%v), or failed", st, replicaLastSeen)
	}
}

func TestDockerAStatefulEggsReplicaWaitsForARunOnItsVolume(t *testing.T) {
	h := newDockerHost(t)
	h.start()
	db := h.workload("db", map[string]string{"APP_COUNT_FILE": "/data/count"})
	db.Volumes = []contract.VolumeMount{{Name: "data", DockerName: contract.VolumeName(h.host, "default", "shop", "data"), Target: "/data"}}
	run := contract.Run{ID: "r6", Workload: db} // serves until stopped
	h.set(nil, run)
	h.runStatus("r6", contract.RunRunning)
	// The replica comes back while the run runs: it waits for its end.
	h.set([]contract.WorkloadSpec{db}, run)
	time.Sleep(3 * time.Second) // several converges
	if r, _ := h.a.Status(); len(r.Containers) != 0 {
		t.Fatalf("replica %+v started beside the run on the volume", r.Containers)
	}
	run.Stop = true
	h.set([]contract.WorkloadSpec{db}, run)
	ended := h.runStatus("r6", contract.RunStopped).EndedAt
	dockertest.Eventually(t, 60*time.Second, 50*time.Millisecond, func() error {
		r, _ := h.a.Status()
		if len(r.Containers) != 1 || r.Containers[0].State != contract.StateRunning {
			return fmt.Errorf("replicas %+v", r.Containers)
		}
		c, err := h.s.Client.ContainerInspect(t.Context(), r.Containers[0].ContainerID)
		if err != nil {
			return err
		}
		if started, _ := time.Parse(time.RFC3339Nano, c.State.StartedAt); started.Before(ended) {
			t.Errorf("replica started at %v, before the run ended at %v", started, ended)
		}
		return nil
	})
}
