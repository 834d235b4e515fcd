//go:build docker

package dataplane

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

func TestMain(m *testing.M) { os.Exit(dockertest.Main(m)) }

// TestALapsedFenceLeaseStopsTheFencedContainersOnly: with the agent gone
// (no renewal), the data plane stops the running containers of the
// lease's workloads on its host once the lease lapses, and no other: not
// another workload's, not another host's of the same workload. A renewed
// lease stops nothing.
func TestALapsedFenceLeaseStopsTheFencedContainersOnly(t *testing.T) {
	s := dockertest.NewScope(t)
	img := dockertest.Image(t, dockertest.ImageSpec{})
	cfg := testConfig(t)
	serveDataPlane(t, cfg, "v1", false)
	c := NewClient(cfg.DataDir, zaptest.NewLogger(t))
	defer c.Close()
	c.DockerHost = s.Client.DaemonHost()

	run := func(name, host, workload string) string {
		t.Helper()
		labels := s.Labels(map[string]string{containers.LabelManaged: "true", containers.LabelHost: host, containers.LabelWorkload: workload})
		cr, err := s.Client.ContainerCreate(t.Context(), &container.Config{Image: img, Labels: labels}, nil, nil, nil, s.Name(name))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Client.ContainerStart(t.Context(), cr.ID, container.StartOptions{}); err != nil {
			t.Fatal(err)
		}
		return cr.ID
	}
	const db, web = "default/shop/db", "default/shop/web"
	fenced := run("db", cfg.HostID, db)
	other := run("web", cfg.HostID, web)
	elsewhere := run("db-elsewhere", "h2", db)
	running := func(id string) bool {
		t.Helper()
		inspect, err := s.Client.ContainerInspect(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		return inspect.State.Running
	}

	// Renewed in time: nothing stops.
	for range 4 {
		if err := c.SetFenceLease(time.Now().Add(time.Second), []string{db}, time.Second); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !running(fenced) {
		t.Fatal("db was stopped while its lease was renewed")
	}

	// The agent is gone: the lease lapses.
	until := time.Now().Add(time.Second)
	if err := c.SetFenceLease(until, []string{db}, time.Second); err != nil {
		t.Fatal(err)
	}
	dockertest.Eventually(t, 15*time.Second, 100*time.Millisecond, func() error {
		if running(fenced) {
			return fmt.Errorf("db still runs %s after its lease lapsed", time.Since(until).Round(time.Millisecond))
		}
		return nil
	})
	if lag := time.Since(until); lag < 0 {
		t.Fatalf("db stopped before its lease lapsed")
	} else {
		t.Logf("db stopped within %s of its lease's end (stop timeout 1s)", lag.Round(time.Millisecond))
	}
	if !running(other) || !running(elsewhere) {
		t.Fatalf("the lapsed lease stopped more than its workload's containers on its host: web running %v, h2's db running %v",
			running(other), running(elsewhere))
	}

	// A container of the workload started while the lease is lapsed (by
	// hand, say) is stopped too; no workloads ends the lease.
	if err := s.Client.ContainerStart(t.Context(), fenced, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	dockertest.Eventually(t, 15*time.Second, 100*time.Millisecond, func() error {
		if running(fenced) {
			return fmt.Errorf("db started again under a lapsed lease still runs")
		}
		return nil
	})
	if err := c.SetFenceLease(time.Time{}, nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Client.ContainerStart(t.Context(), fenced, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * deadmanEvery)
	if !running(fenced) {
		t.Fatal("db was stopped after the lease ended")
	}
}
