package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/seal"
	"github.com/hatchery/hatchery/internal/store"
)

// publish stores a desired state for a host, as the control plane's writers do.
func (h *harness) publish(host string, replicas int, secret string) contract.DesiredState {
	h.t.Helper()
	d := contract.DesiredState{HostID: host, Workloads: []contract.WorkloadSpec{{
		Namespace: "default", Project: "shop", Egg: "web", Image: "web:1", Replicas: replicas,
		Secrets: []contract.SecretFile{{Name: "api_key", Handle: "h-" + secret, Value: contract.SecretValue(secret)}},
	}}}
	return putDesired(h.t, h.store, h.box, d)
}

// putDesired seals d and stores it for its host, as the control plane's
// writers do.
func putDesired(t testing.TB, st store.DesiredStates, box *seal.Box, d contract.DesiredState) contract.DesiredState {
	t.Helper()
	d.Seal()
	stored, err := store.EncodeDesiredState(box, d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutDesiredStates(t.Context(), []store.DesiredState{stored}, nil); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestLongPollAnswersAtOnceWhenTheVersionDiffers(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	want := h.publish("h1", 2, "s3cret")
	start := time.Now()
	got := decode[contract.DesiredState](t, h.do("GET", "/api/v1/hosts/h1/desired-state?version=old&wait=30s", nil), 200)
	if time.Since(start) > 5*time.Second {
		t.Fatalf("a differing version was held for %v", time.Since(start))
	}
	if got.Version != want.Version || got.HostID != "h1" || len(got.Workloads) != 1 || got.Workloads[0].Replicas != 2 {
		t.Fatalf("desired state = %+v, want %+v", got, want)
	}
	if got.Workloads[0].Secrets[0].Value != "s3cret" {
		t.Fatalf("the host did not get its secret value opened: %q", got.Workloads[0].Secrets[0].Value)
	}
}

func TestLongPollOfAHostWithNothingIsAnEmptyStateThenHeld(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	resp := h.do("GET", "/api/v1/hosts/h1/desired-state?version=&wait=50ms", nil)
	if resp.StatusCode != http.StatusNotModified {
		t.Fatalf("status %d, want 304 for a host with no state at version empty", resp.StatusCode)
	}
	got := decode[contract.DesiredState](t, h.do("GET", "/api/v1/hosts/h1/desired-state?version=v0", nil), 200)
	if got.HostID != "h1" || got.Version != "" || len(got.Workloads) != 0 {
		t.Fatalf("empty state = %+v", got)
	}
}

func TestLongPollIsHeldUntilAChangeWakesEveryWaiter(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	v1 := h.publish("h1", 1, "a")
	const waiters = 10
	results := make(chan contract.DesiredState, waiters)
	var wg sync.WaitGroup
	for range waiters {
		wg.Go(func() {
			resp := h.do("GET", "/api/v1/hosts/h1/desired-state?version="+v1.Version+"&wait=60s", nil)
			var d contract.DesiredState
			if resp.StatusCode == 200 {
				_ = json.NewDecoder(resp.Body).Decode(&d)
			}
			results <- d
		})
	}
	eventually(t, "10 waiters", func() bool { return gaugeValue(t, h.srv.metrics.waiters) == waiters })
	h.publish("h2", 5, "b") // another host's change wakes nobody here
	time.Sleep(50 * time.Millisecond)
	if n := len(results); n != 0 {
		t.Fatalf("%d waiters returned on another host's change", n)
	}
	v2 := h.publish("h1", 3, "a")
	start := time.Now()
	wg.Wait()
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("waiters took %v to wake", d)
	}
	close(results)
	for d := range results {
		if d.Version != v2.Version || d.Workloads[0].Replicas != 3 {
			t.Fatalf("a waiter got %+v, want version %s", d, v2.Version)
		}
	}
	if g := gaugeValue(t, h.srv.metrics.waiters); g != 0 {
		t.Fatalf("waiters gauge = %v after all returned", g)
	}
}

func TestLongPollReturnsNotModifiedWhenTheWaitPasses(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	v1 := h.publish("h1", 1, "a")
	start := time.Now()
	resp := h.do("GET", "/api/v1/hosts/h1/desired-state?version="+v1.Version+"&wait=150ms", nil)
	elapsed := time.Since(start)
	if resp.StatusCode != http.StatusNotModified {
		t.Fatalf("status %d, want 304", resp.StatusCode)
	}
	if elapsed < 150*time.Millisecond {
		t.Fatalf("returned after %v, before its wait", elapsed)
	}
}

func TestLongPollWaitIsChecked(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	for _, wait := range []string{"soon", "-1s", "1h"} {
		wantError(t, h.do("GET", "/api/v1/hosts/h1/desired-state?wait="+wait, nil), 400, "bad_request", "wait")
	}
}

func TestDrainReturnsWaitingLongPollsAtOnce(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	v1 := h.publish("h1", 1, "a")
	done := make(chan int, 1)
	go func() {
		done <- h.do("GET", "/api/v1/hosts/h1/desired-state?version="+v1.Version+"&wait=60s", nil).StatusCode
	}()
	eventually(t, "a waiter", func() bool { return gaugeValue(t, h.srv.metrics.waiters) == 1 })
	h.srv.Drain()
	select {
	case code := <-done:
		if code != http.StatusNotModified {
			t.Fatalf("drained long-poll: %d, want 304", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a long-poll outlived the drain")
	}
}

func report(host string, containers ...contract.ContainerStatus) string {
	b, _ := json.Marshal(contract.StatusReport{HostID: host, Time: time.Now(), Containers: containers})
	return string(b)
}

func TestStatusReportIsStoredAndIsTheHeartbeat(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	body := report("h1", contract.ContainerStatus{WorkloadID: "default/shop/web", Slot: 0, State: contract.StateRunning, Healthy: true})
	if resp := h.do("POST", "/api/v1/hosts/h1/status", strings.NewReader(body)); resp.StatusCode != http.StatusNoContent {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST status: %d %s", resp.StatusCode, b)
	}
	hosts := decode[struct{ Hosts []api.Host }](t, h.do("GET", "/api/v1/hosts", nil), 200)
	if len(hosts.Hosts) != 1 || hosts.Hosts[0].ID != "h1" || hosts.Hosts[0].State != "up" || hosts.Hosts[0].LastSeen.IsZero() {
		t.Fatalf("hosts = %+v", hosts.Hosts)
	}
	one := decode[struct {
		api.Host
		Status *contract.StatusReport
	}](t, h.do("GET", "/api/v1/hosts/h1", nil), 200)
	if one.Status == nil || len(one.Status.Containers) != 1 || one.Status.Containers[0].WorkloadID != "default/shop/web" {
		t.Fatalf("host view = %+v", one)
	}
	wantError(t, h.do("GET", "/api/v1/hosts/nope", nil), 404, "not_found", "nope")
}

func TestBadStatusReportsNameTheField(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxBodyBytes = 2000
	h := newHarness(t, cfg, nil)
	tests := []struct {
		name, body, code, field string
		status                  int
	}{
		{"malformed JSON", `{"host_id": "h1",`, "bad_request", "malformed", 400},
		{"not JSON at all", `hello`, "bad_request", "malformed", 400},
		{"an empty body", ``, "bad_request", "empty", 400},
		{"a wrong type", `{"host_id":"h1","containers":[{"workload":"w","slot":"zero","state":"running"}]}`, "bad_request", "containers.slot", 400},
		{"a bad time", `{"host_id":"h1","time":"yesterday"}`, "bad_request", "time", 400},
		{"another host's id", `{"host_id":"h2"}`, "bad_request", "host_id", 400},
		{"an unknown container state", `{"containers":[{"workload":"w","slot":0,"state":"sleepy"}]}`, "bad_request", "containers[0].state", 400},
		{"a negative slot", `{"containers":[{"workload":"w","slot":-1,"state":"running"}]}`, "bad_request", "containers[0].slot", 400},
		{"two JSON values", `{"host_id":"h1"} {}`, "bad_request", "one JSON value", 400},
		{"a body over the limit", `{"errors":["` + strings.Repeat("x", 3000) + `"]}`, "too_large", "2000", 413},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, h.do("POST", "/api/v1/hosts/h1/status", strings.NewReader(tt.body)), tt.status, tt.code, tt.field)
		})
	}
	if _, err := h.store.Host(t.Context(), "h1"); err == nil {
		t.Fatal("a refused report still made the host")
	}
}

// An agent one version ahead of the server sends fields the server does not
// know: the contract promises they are ignored, not refused.
func TestStatusReportWithUnknownFieldsIsAccepted(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	resp := h.do("POST", "/api/v1/hosts/h1/status", strings.NewReader(`{"host_id":"h1","colour":"red","containers":[]}`))
	if resp.StatusCode/100 != 2 {
		t.Fatalf("status %d for a report with an unknown field, want 2xx", resp.StatusCode)
	}
	resp.Body.Close()
	if _, err := h.store.Host(t.Context(), "h1"); err != nil {
		t.Fatalf("the report was not stored: %v", err)
	}
}

func TestDesiredStateOfManyHostsIsIndependent(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	for i := range 3 {
		h.publish(fmt.Sprintf("h%d", i), i+1, "x")
	}
	for i := range 3 {
		got := decode[contract.DesiredState](t, h.do("GET", fmt.Sprintf("/api/v1/hosts/h%d/desired-state", i), nil), 200)
		if got.Workloads[0].Replicas != i+1 {
			t.Fatalf("h%d got %d replicas", i, got.Workloads[0].Replicas)
		}
	}
}

func TestStatusReportsRecordRolloutEvents(t *testing.T) {
	h := newHarness(t, DefaultConfig(), nil)
	d := h.publish("h1", 1, "x")
	hash := contract.SpecHash(d.Workloads[0])
	ready := contract.ContainerStatus{WorkloadID: d.Workloads[0].ID(), Slot: 0, SpecHash: hash, State: contract.StateRunning, Healthy: true}
	if resp := h.do("POST", "/api/v1/hosts/h1/status", strings.NewReader(report("h1", ready))); resp.StatusCode != 204 {
		t.Fatalf("status: %d", resp.StatusCode)
	}
	evs, err := h.store.ListEvents(t.Context(), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(evs, func(e store.Event) bool { return e.Type == store.EventRolloutDone }) {
		t.Fatalf("events %+v lack rollout.done", evs)
	}
}
