//go:build docker

package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/dataplane"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// The host's data plane (ingress, published ports, mesh) lives apart from
// the agent (issue 26 point 3): an agent killed, restarted or upgraded
// under load fails no request.

// askDataPlane asks the agent's data plane one question.
func askDataPlane[T any](e *env, ask func(*dataplane.Client, context.Context) (T, error)) (T, error) {
	c := dataplane.NewClient(e.agent.dataDir, zap.NewNop())
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return ask(c, ctx)
}

// dataPlaneOf answers who serves the agent's data plane.
func (e *env) dataPlaneOf() (dataplane.Version, error) {
	return askDataPlane(e, (*dataplane.Client).Version)
}

// restartAgent kills the agent (sig), starts it again and waits until it has
// reported to the control plane since: it has converged once, and fed the
// data plane its table.
func (e *env) restartAgent(sig syscall.Signal) {
	e.t.Helper()
	e.agent.signal(sig)
	since := time.Now()
	e.agent.start()
	dockertest.Eventually(e.t, 30*time.Second, 50*time.Millisecond, func() error {
		if r, ok := e.cp.lastReport(e.hostID); !ok || !r.Time.After(since) {
			return fmt.Errorf("no status report from the restarted agent yet")
		}
		return nil
	})
}

// otherBinary copies bin and appends bytes: the same program with another
// hash, as an upgrade in place is to the agent.
func otherBinary(t testing.TB, bin string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "hatch")
	src, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.WriteString("\nanother build\n"); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// requireNoFailure fails the test for any failed request of the report.
func requireNoFailure(t *testing.T, phase string, r loadReport) {
	t.Helper()
	r.log(t, phase)
	r.requireTraffic(t, phase)
	for kind, c := range map[string]counts{"GET": r.gets, "POST": r.posts, "TCP": r.echoes} {
		if c.failed != 0 {
			t.Errorf("%s: %d of %d %s requests failed, want none", phase, c.failed, c.total, kind)
		}
	}
}

// TestAgentCrashesAndAnUpgradeFailNoRequest kills the agent with SIGKILL and
// starts it again ten times under the load of 8 HTTP and 8 TCP clients,
// then restarts it on another binary (an upgrade in place, the data plane's
// listeners handed over): not one request or TCP exchange fails. The data
// plane survives the kills (same process) and is replaced by the upgrade
// (a process of the new binary). A data plane killed in turn is started
// again by the agent, and routes again.
func TestAgentCrashesAndAnUpgradeFailNoRequest(t *testing.T) {
	e, _, target := loadEnv(t)
	before, err := e.dataPlaneOf()
	if err != nil {
		t.Fatal(err)
	}
	kills := underLoad(target, 0, func() {
		for range 10 {
			e.restartAgent(syscall.SIGKILL)
		}
	})
	requireNoFailure(t, "10 agent kills", kills)
	if v, err := e.dataPlaneOf(); err != nil || v.PID != before.PID {
		t.Fatalf("after the kills the data plane is %+v (%v), want the same process %d", v, err, before.PID)
	}

	e.agent.bin = otherBinary(t, e.agent.bin)
	want, err := dataplane.BinaryHash(e.agent.bin)
	if err != nil {
		t.Fatal(err)
	}
	upgrade := underLoad(target, 3*time.Second, func() {
		time.Sleep(time.Second) // the load is steady before the upgrade
		e.restartAgent(syscall.SIGTERM)
	})
	requireNoFailure(t, "agent upgrade", upgrade)
	after, err := e.dataPlaneOf()
	if err != nil || after.Binary != want || after.PID == before.PID {
		t.Fatalf("after the upgrade the data plane is %+v (%v), want a new process of binary %s", after, err, want[:12])
	}
	// It drains, then exits (reaped by init: its agent is long gone).
	dockertest.Eventually(t, 45*time.Second, 100*time.Millisecond, func() error {
		if syscall.Kill(before.PID, 0) == nil {
			return fmt.Errorf("the data plane of the old binary (%d) still runs after the handover", before.PID)
		}
		return nil
	})

	// The data plane itself killed: the agent starts it again and feeds it.
	if err := syscall.Kill(after.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	client := newLoadClient()
	defer client.CloseIdleConnections()
	dockertest.Eventually(t, 30*time.Second, 100*time.Millisecond, func() error {
		v, err := e.dataPlaneOf()
		if err != nil || v.PID == after.PID {
			return fmt.Errorf("no new data plane yet: %+v %v", v, err)
		}
		// The harness's agents listen on port 0: the new data plane
		// listens elsewhere.
		st, err := askDataPlane(e, (*dataplane.Client).Status)
		if err != nil {
			return err
		}
		if _, err := getThroughIngress(client, st.HTTP, "/version"); err != nil {
			return fmt.Errorf("the new data plane does not route yet: %w", err)
		}
		return nil
	})
}
