package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
)

// wantEgg checks an egg's counts and rollout as the endpoint answers them.
func wantEgg(t *testing.T, e api.EggStatus, ready, desired int, state api.RolloutState, reason string) {
	t.Helper()
	if got := fmt.Sprintf("%d/%d %s %q", e.Ready, e.Desired, e.Rollout.State, e.Rollout.Reason); got != fmt.Sprintf("%d/%d %s %q", ready, desired, state, reason) {
		t.Errorf("%s: %s, want %d/%d %s %q", e.Name, got, ready, desired, state, reason)
	}
}

func TestProjectStatusEndpointFollowsTheReports(t *testing.T) {
	h := newApplyHarness(t, applyOptions{})
	h.report("h1")
	h.report("h2")
	const yaml = "project: shop\neggs:\n  web:\n    image: web:1\n    replicas: 2\n  kv:\n    image: kv:1\n"
	wantSucceeded(t, h.applyAndWait("default/shop", yaml, nil))
	status := func() api.ProjectStatus {
		t.Helper()
		return decode[api.ProjectStatus](t, h.do("GET", "/api/v1/projects/default/shop/status", nil), http.StatusOK)
	}
	egg := func(s api.ProjectStatus, name string) api.EggStatus {
		t.Helper()
		for _, e := range s.Eggs {
			if e.Name == name {
				return e
			}
		}
		t.Fatalf("no egg %s in %+v", name, s)
		return api.EggStatus{}
	}

	s := status()
	if s.HostsUp != 2 || len(s.Eggs) != 2 {
		t.Fatalf("status %+v, want 2 hosts up and 2 eggs", s)
	}
	wantEgg(t, egg(s, "web"), 0, 2, api.RolloutProgressing, "")

	h.healthy("h1")
	h.healthy("h2")
	s = status()
	wantEgg(t, egg(s, "web"), 2, 2, api.RolloutDone, "")
	wantEgg(t, egg(s, "kv"), 1, 1, api.RolloutDone, "")

	// The host running kv reports its rollout failed.
	var kvHost string
	var kvSpec contract.WorkloadSpec
	for _, host := range []string{"h1", "h2"} {
		if w, ok := h.desired(host).Workload("default/shop/kv"); ok {
			kvHost, kvSpec = host, w
		}
	}
	bad := contract.ContainerStatus{WorkloadID: kvSpec.ID(), Slot: 0, SpecHash: contract.SpecHash(kvSpec), State: contract.StateCrashed,
		RolloutFailure: "exited 1 before it was healthy", LogTail: []string{"kv: bad flag"}}
	h.report(kvHost, bad)
	kv := egg(status(), "kv")
	wantEgg(t, kv, 0, 1, api.RolloutFailed, "on "+kvHost+": exited 1 before it was healthy")
	if !slices.Equal(kv.Rollout.LogTail, []string{"kv: bad flag"}) || len(kv.Hosts) != 1 || kv.Hosts[0].ID != kvHost {
		t.Fatalf("kv = %+v, want its log tail and its one host", kv)
	}

	if resp := h.do("GET", "/api/v1/projects/default/nothing/status", nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("an unknown project: %d, want 404", resp.StatusCode)
	}
}

// TestProjectStatusShowsNoSpecButCounts checks the answer's shape: the
// status tells replica counts and container states, never a workload's
// image, environment or secret handle.
func TestProjectStatusShowsNoSpecButCounts(t *testing.T) {
	h := newApplyHarness(t, applyOptions{})
	h.report("h1")
	wantSucceeded(t, h.applyAndWait("default/shop", secretYAML, map[string]string{"api_key": "the-value-0042"}))
	h.healthy("h1")
	resp := h.do("GET", "/api/v1/projects/default/shop/status", nil)
	var body bytes.Buffer
	if _, err := body.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(body.String(), `"name":"web"`) {
		t.Fatalf("status: %d %s", resp.StatusCode, body.String())
	}
	for _, leak := range []string{"the-value-0042", "web:1", "MODE", "api_key", "handle"} {
		if strings.Contains(body.String(), leak) {
			t.Errorf("the status holds %q: %s", leak, body.String())
		}
	}
}

// TestProjectStatusLeavesRemovedHostsOut: a removed host's replicas are
// placed elsewhere; what its old desired state says is no longer the egg's.
func TestProjectStatusLeavesRemovedHostsOut(t *testing.T) {
	sh := newSecureHarness(t, DefaultConfig())
	join, _ := sh.createJoinToken(time.Hour, 10)
	alpha, _ := sh.join(join, "alpha")
	gone, _ := sh.join(join, "gone")
	digest := sh.putBlob("FROM scratch\n")
	sh.setDesired(alpha, digest)
	sh.setDesired(gone, digest)
	decode[api.RemovedHost](t, sh.do("DELETE", "/api/v1/hosts/"+gone, nil), http.StatusOK)

	s := decode[api.ProjectStatus](t, sh.do("GET", "/api/v1/projects/default/shop/status", nil), http.StatusOK)
	if len(s.Eggs) != 1 || len(s.Eggs[0].Hosts) != 1 {
		t.Fatalf("status %+v, want web on one host", s)
	}
	if e := s.Eggs[0]; e.Name != "web" || e.Desired != 1 || e.Hosts[0].ID != alpha || e.Hosts[0].Name != "alpha" {
		t.Fatalf("web = %+v, want 1 replica on alpha, by its name", e)
	}
}

// A host's problems, as its agent reports them, are where the user looks:
// the host list and the status of every project the host runs.
func TestAHostsReportedErrorsAreInTheHostListAndTheProjectStatus(t *testing.T) {
	h := newApplyHarness(t, applyOptions{})
	h.report("h1")
	wantSucceeded(t, h.applyAndWait("default/shop", "project: shop\neggs:\n  web:\n    image: web:1\n", nil))
	const problem = "write desired-state cache: no space left on device (retrying every 5s)"
	body, _ := json.Marshal(contract.StatusReport{HostID: "h1", Time: time.Now(), Errors: []string{problem}})
	if resp := h.do("POST", "/api/v1/hosts/h1/status", bytes.NewReader(body)); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("report: %d", resp.StatusCode)
	}

	list := decode[api.HostList](t, h.do("GET", "/api/v1/hosts", nil), http.StatusOK)
	if len(list.Hosts) != 1 || !slices.Equal(list.Hosts[0].Errors, []string{problem}) {
		t.Errorf("hosts %+v, want h1 with its error", list.Hosts)
	}
	s := decode[api.ProjectStatus](t, h.do("GET", "/api/v1/projects/default/shop/status", nil), http.StatusOK)
	if len(s.Eggs) != 1 || len(s.Eggs[0].Hosts) != 1 || !slices.Equal(s.Eggs[0].Hosts[0].Errors, []string{problem}) {
		t.Errorf("status %+v, want web's host with its error", s)
	}

	// Once the agent reports none, none is shown.
	h.report("h1")
	list = decode[api.HostList](t, h.do("GET", "/api/v1/hosts", nil), http.StatusOK)
	if len(list.Hosts[0].Errors) != 0 {
		t.Errorf("errors %q after a report without", list.Hosts[0].Errors)
	}
}
