//go:build docker

package agent

import (
	"fmt"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// TestAFencedWorkloadStopsWhileReportsGoUnansweredAndNeverStartsFromTheCache:
// with the control plane down for FenceAfter, the fenced egg is stopped
// and the unfenced one keeps running; both run again once reports are
// answered; and an agent restarted while the control plane is down starts
// the unfenced egg from its cache but not the fenced one, until the
// control plane answers.
func TestAFencedWorkloadStopsWhileReportsGoUnansweredAndNeverStartsFromTheCache(t *testing.T) {
	const fenceAfter = 3 * time.Second
	h := newDockerHost(t)
	db := h.workload("db", nil)
	db.Fenced = true
	web := h.workload("web", nil)
	d := contract.DesiredState{HostID: h.host, Workloads: []contract.WorkloadSpec{db, web}, FenceAfter: fenceAfter}
	d.Seal()
	h.cp.set(d)
	h.start()

	counts := func() (int, int) {
		cs, err := h.e.List(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return running(cs, db), running(cs, web)
	}
	want := func(what string, wantDB, wantWeb int, within time.Duration) {
		t.Helper()
		dockertest.Eventually(t, within, 100*time.Millisecond, func() error {
			if gotDB, gotWeb := counts(); gotDB != wantDB || gotWeb != wantWeb {
				return fmt.Errorf("%s: db runs %d, web %d; want %d and %d", what, gotDB, gotWeb, wantDB, wantWeb)
			}
			return nil
		})
	}
	want("first converge", 1, 1, 60*time.Second)

	down := time.Now()
	h.cp.setDown(true)
	want("fenced", 0, 1, 30*time.Second)
	if since := time.Since(down); since < fenceAfter {
		t.Errorf("db stopped %s after the control plane went down, before fence_after (%s)", since, fenceAfter)
	}
	h.cp.setDown(false)
	want("reports answered again", 1, 1, 60*time.Second)

	// Restart while the control plane is down, the fenced egg stopped.
	h.cp.setDown(true)
	want("fenced before the restart", 0, 1, 30*time.Second)
	// Not running is not gone: a drain or a stop may be under way, which
	// the restart would cut short, leaving the container running.
	dockertest.Eventually(t, 30*time.Second, 100*time.Millisecond, func() error {
		cs, err := h.e.List(t.Context())
		if err != nil {
			return err
		}
		for _, c := range cs {
			if c.WorkloadID == db.ID() {
				return fmt.Errorf("db's container %s is still there (%s)", c.ID, c.State)
			}
		}
		return nil
	})
	h.stop()
	h.start()
	held := time.Now().Add(2 * fenceAfter)
	for time.Now().Before(held) {
		if gotDB, gotWeb := counts(); gotDB != 0 || gotWeb != 1 {
			t.Fatalf("restarted from the cache: db runs %d, web %d; want 0 and 1", gotDB, gotWeb)
		}
		time.Sleep(200 * time.Millisecond)
	}
	h.cp.setDown(false)
	want("confirmed after the restart", 1, 1, 60*time.Second)
}
