//go:build docker

package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// statefulHost is the route of the stateful egg of these tests.
const statefulHost = "kv.ingress.localhost"

// statefulRouted is a stateful egg (one replica, a named volume, so it
// rolls stop-first) keeping the app's counter on its volume, routed at
// statefulHost. Its drain timeout is long enough for any request in
// flight; its health check tolerates a slow probe round, as routedWorkload's.
func (e *env) statefulRouted(version string) contract.WorkloadSpec {
	w := withEnv(e.workload("kv", 1, version), "APP_COUNT_FILE", "/data/count")
	w.Health.Retries = 5
	w.Volumes = []contract.VolumeMount{{Name: "data", DockerName: dockerVolume(e, "data"), Target: "/data"}}
	w.Routes = []contract.Route{{Host: statefulHost}}
	w.Rollout.DrainTimeout = 5 * time.Second
	return w
}

// counterWriter is a keep-alive client that writes through the ingress:
// POST /hit (with a body, so that the ingress can never replay it behind
// the client's back) one after the other, each answered with the count on
// the volume.
type counterWriter struct {
	client *http.Client
	addr   string

	mu        sync.Mutex // guards the fields below
	ok        int
	failures  []string // every failed write, with its time
	backwards []string // every answer lower than the one before it
	last      int
	latencies []time.Duration
}

func newCounterWriter(addr string) *counterWriter {
	c := newLoadClient()
	c.Timeout = 20 * time.Second // past the ingress's hold bound: a held write ends in its answer, not ours
	return &counterWriter{client: c, addr: addr}
}

// run writes until stop is closed (or loadLimit passes).
func (w *counterWriter) run(stop <-chan struct{}) {
	defer w.client.CloseIdleConnections()
	end := time.Now().Add(loadLimit)
	for time.Now().Before(end) {
		select {
		case <-stop:
			return
		default:
		}
		start := time.Now()
		body, err := send(w.client, http.MethodPost, "http://"+w.addr+"/hit", statefulHost, "hit")
		took := time.Since(start)
		n, convErr := strconv.Atoi(body)
		w.mu.Lock()
		w.latencies = append(w.latencies, took)
		switch {
		case err != nil:
			w.failures = append(w.failures, fmt.Sprintf("%s: %v", start.Format("15:04:05.000"), err))
		case convErr != nil:
			w.failures = append(w.failures, fmt.Sprintf("%s: answer %q is no count", start.Format("15:04:05.000"), body))
		default:
			w.ok++
			if n <= w.last {
				w.backwards = append(w.backwards, fmt.Sprintf("%s: count %d after %d", start.Format("15:04:05.000"), n, w.last))
			}
			w.last = n
		}
		w.mu.Unlock()
		time.Sleep(loadPause)
	}
}

// TestAStatefulRollFailsNoRequestAndLosesNoWrite rolls a stateful egg ten
// times while two keep-alive clients write its counter through the
// ingress. Stop-first, the old replica is drained (its writes in flight
// finish) before it stops, and the ingress holds the writes that come
// while no replica runs until the new one is healthy: not one write fails,
// no client ever sees the count go back, and the count on the volume is
// exactly the number of writes answered.
func TestAStatefulRollFailsNoRequestAndLosesNoWrite(t *testing.T) {
	e := newEnv(t, envOptions{})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log, info and above (last 80 lines):\n%s", e.agent.logTailAbove("debug", 80))
		}
	})
	// The gap of a stop-first roll is the engine's remove, create and start:
	// half a second on an idle host, but up to 5 s seen on a CI machine of 2
	// cores shared by several test runs, and past 10 s (the default bound)
	// once. The bound is not what this test is about: give it room.
	e.agent.args = append(e.agent.args, "--hold-timeout", "30s")
	e.startJoined()
	addr := e.ingressAddr()
	w := e.statefulRouted("v1")
	e.set(w)
	e.waitServing(w, "v1", time.Minute)
	probe := newLoadClient()
	defer probe.CloseIdleConnections()
	waitIngressVersion := func(version string) {
		t.Helper()
		dockertest.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
			v, err := send(probe, http.MethodGet, "http://"+addr+"/version", statefulHost, "")
			if err == nil && v != version {
				err = fmt.Errorf("the ingress answers version %q, want %q", v, version)
			}
			return err
		})
	}
	waitIngressVersion("v1")

	writers := []*counterWriter{newCounterWriter(addr), newCounterWriter(addr)}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, wr := range writers {
		wg.Add(1)
		go func() { defer wg.Done(); wr.run(stop) }()
	}
	stopped := false
	halt := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer halt()

	const rolls = 10
	began := time.Now()
	for i := 2; i <= rolls+1; i++ {
		version := fmt.Sprintf("v%d", i)
		w = withEnv(w, "APP_VERSION", version)
		e.set(w)
		e.waitServing(w, version, 2*time.Minute)
		waitIngressVersion(version)
	}
	halt()
	elapsed := time.Since(began)

	var ok, failed int
	var latencies []time.Duration
	for i, wr := range writers {
		ok += wr.ok
		failed += len(wr.failures)
		latencies = append(latencies, wr.latencies...)
		for _, f := range wr.failures {
			t.Errorf("writer %d: write failed at %s", i, f)
		}
		for _, b := range wr.backwards {
			t.Errorf("writer %d: the count went back at %s", i, b)
		}
		if wr.ok == 0 {
			t.Errorf("writer %d wrote nothing", i)
		}
	}
	slices.Sort(latencies)
	p := func(q float64) time.Duration { return latencies[int(q*float64(len(latencies)-1))] }
	t.Logf("%d rolls in %s: %d writes answered, %d failed; latency p50 %s, p99 %s, max %s",
		rolls, elapsed.Round(time.Millisecond), ok, failed, p(0.5), p(0.99), latencies[len(latencies)-1])

	cs := e.waitServing(w, fmt.Sprintf("v%d", rolls+1), time.Minute)
	_, count, err := get(t.Context(), cs[0].IP, "/count")
	if err != nil {
		t.Fatalf("read the count: %v", err)
	}
	if count != strconv.Itoa(ok) {
		t.Errorf("the count on the volume is %s after %d writes answered (and %d failed), want %d", count, ok, failed, ok)
	}
}
