package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/fleet"
)

// FuzzReportAPI posts any status report as a joined host (the rogue's),
// whose desired state places web of default/shop only, beside an honest
// host running db's slot 1 (a rogue's slot 0 of db would win an exec if
// reports were believed). Whatever it reports, nothing outside its desired state
// is ever acted on: an exec of any egg never goes to it unless that egg is
// web, logs ask it for web only, and the project's status shows it under
// web only. Any 5xx fails it too.
func FuzzReportAPI(f *testing.F) {
	rf := newReportFuzz(f)
	f.Add(byte(0), "default/shop/db", 0, "running", []byte(`{}`))
	f.Add(byte(1), "default/shop/db", 0, "running", []byte(`{"host_id":"x"}`))
	f.Add(byte(1), "default/shop/web", 3, "starting", []byte(``))
	f.Add(byte(0), "", 0, "", []byte(`{"containers":[{"workload":"default/shop/db","slot":0,"state":"running","healthy":true}]}`))
	f.Add(byte(1), "default/other/api", 0, "running", []byte(`x`))
	f.Fuzz(func(t *testing.T, route byte, workload string, slot int, state string, body []byte) {
		if route%2 == 1 { // a well-formed report, so the fuzzer reaches the checks often
			body = rf.report(workload, slot, state, body)
		}
		path := "/api/v1/hosts/" + url.PathEscape(rf.rogue) + "/status"
		check(t, rf.serve(rf.host, "POST", path, body), "POST", path, body)
		rf.unchanged(t)
		rf.checkNothingUnplacedIsActedOn(t, workload)
	})
}

// reportFuzz is the fuzz server with the rogue host placed with web and an
// honest one with db.
type reportFuzz struct {
	*fuzzServer
	fleet         *fleet.Service
	rogue, honest string // host IDs
	version       string // the rogue's desired state's version
}

func newReportFuzz(f *testing.F) *reportFuzz {
	f.Helper()
	fs, b, st := startFuzzServer(f)
	rf := &reportFuzz{fuzzServer: fs, fleet: b.Fleet}
	var jt api.JoinToken
	rf.setup(f, fs.admin, "POST", "/api/v1/join-tokens", `{"uses":10,"ttl":"24h"}`, &jt)
	var rogue, honest api.JoinResponse
	rf.setup(f, jt.Token, "POST", "/api/v1/join", `{"name":"rogue"}`, &rogue)
	rf.setup(f, jt.Token, "POST", "/api/v1/join", `{"name":"honest"}`, &honest)
	rf.host, rf.id, rf.rogue, rf.honest = rogue.Token, rogue.HostID, rogue.HostID, honest.HostID
	putDesired(f, st, b.Box, contract.DesiredState{HostID: rf.rogue, Workloads: []contract.WorkloadSpec{webOf("web", 1)}})
	putDesired(f, st, b.Box, contract.DesiredState{HostID: rf.honest, Workloads: []contract.WorkloadSpec{webOf("db", 2)}})
	var d contract.DesiredState
	rf.setup(f, rf.host, "GET", "/api/v1/hosts/"+url.PathEscape(rf.rogue)+"/desired-state", "", &d)
	rf.version = d.Version
	honestReport, _ := json.Marshal(contract.StatusReport{HostID: rf.honest, Containers: []contract.ContainerStatus{running(shopDB, 1)}})
	if rec := rf.serve(honest.Token, "POST", "/api/v1/hosts/"+url.PathEscape(rf.honest)+"/status", honestReport); rec.Code != 204 {
		f.Fatalf("the honest host's report: %d %s", rec.Code, rec.Body)
	}
	return rf
}

// report is a well-formed report of the rogue's, at its desired state's
// version: its web, and a container of workload, fuzzed.
func (rf *reportFuzz) report(workload string, slot int, state string, errLine []byte) []byte {
	r := contract.StatusReport{HostID: rf.rogue, Version: rf.version, Time: time.Now(), Errors: []string{string(errLine)},
		Containers: []contract.ContainerStatus{running("default/shop/web", 0),
			{WorkloadID: workload, Slot: slot, ContainerID: "c", State: contract.ContainerState(state), Healthy: true}}}
	b, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("marshal a report: %v", err))
	}
	return b
}

// checkNothingUnplacedIsActedOn checks the invariant for db, the honest
// host's, and for the workload the fuzzer named.
func (rf *reportFuzz) checkNothingUnplacedIsActedOn(t *testing.T, workload string) {
	t.Helper()
	ctx := t.Context()
	eggs := []string{"db", "web", "api"}
	if ns, project, egg, ok := splitWorkload(workload); ok && ns == "default" && project == "shop" {
		eggs = append(eggs, egg)
	}
	for _, egg := range eggs {
		target, err := rf.fleet.ExecHost(ctx, "default", "shop", egg, -1, "")
		var apiErr *api.Error
		switch {
		case errors.As(err, &apiErr):
		case err != nil:
			t.Fatalf("exec host of %s: %v", egg, err)
		case target.Host == rf.rogue && egg != "web":
			t.Fatalf("an exec of %s would go to the rogue host, placed with web only", egg)
		}
	}
	scope, err := rf.fleet.LogTargets(ctx, "default", "shop", "", "", "")
	if err != nil {
		t.Fatalf("log targets: %v", err)
	}
	for _, tg := range scope.Targets {
		if tg.Host == rf.rogue && !slices.Equal(tg.Eggs, []string{"web"}) {
			t.Fatalf("logs would take the rogue's records of %v, want web's only", tg.Eggs)
		}
	}
	st, err := rf.fleet.ProjectStatus(ctx, "default", "shop")
	if err != nil {
		t.Fatalf("project status: %v", err)
	}
	for _, e := range st.Eggs {
		for _, h := range e.Hosts {
			if h.ID == rf.rogue && e.Name != "web" {
				t.Fatalf("the project's status shows the rogue under %s", e.Name)
			}
		}
	}
}

// splitWorkload splits a workload ID "namespace/project/egg".
func splitWorkload(id string) (ns, project, egg string, ok bool) {
	parts := strings.Split(id, "/")
	if len(parts) != 3 {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}
