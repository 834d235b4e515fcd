package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/fleet"
	"github.com/hatchery/hatchery/internal/placement"
)

// capacityWorld is a started server with real token authentication, two
// hosts joined through it for real, and the apply protocol: what a host
// reports of its capacity meets placement as it does in production.
type capacityWorld struct {
	sh                  *secureHarness
	honest, rogue       string // host IDs
	honestTok, rogueTok string
}

func newCapacityWorld(t *testing.T, caps placement.Resources) *capacityWorld {
	t.Helper()
	log := zaptest.NewLogger(t)
	clk := &clock{now: time.Now().UTC().Truncate(time.Millisecond)}
	ts := newTokenStore(t, log, clk.Now())
	dir, st, admin := ts.dir, ts.st, ts.admin
	fc := fleet.DefaultConfig()
	fc.MaxHostCapacity = caps
	b := BuildTestServer(t, DefaultConfig(), TestWiring{Dir: dir, Store: st, Auth: NewTokenAuth(ts.hash, st, clk.Now),
		Logger: log, Now: clk.Now, Fleet: fc})
	if err := b.Server.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	sh := &secureHarness{t: t, clock: clk, logs: &lockedBuffer{}, hostCA: b.HostCA}
	hs := httptest.NewServer(b.Server.Handler())
	t.Cleanup(hs.Close)
	sh.harness = &harness{t: t, srv: b.Server, http: hs, store: st, blobs: b.Blobs, box: b.Box, fleet: b.Fleet, token: admin, clock: clk}
	join, _ := sh.createJoinToken(time.Hour, 2)
	w := &capacityWorld{sh: sh}
	w.honest, w.honestTok = sh.join(join, "honest")
	w.rogue, w.rogueTok = sh.join(join, "rogue")
	return w
}

// report sends a host's status report with its own token.
func (w *capacityWorld) report(host, token string, c *contract.HostCapacity) {
	w.sh.t.Helper()
	body, _ := json.Marshal(contract.StatusReport{HostID: host, Time: time.Now(), Capacity: c})
	resp := w.sh.doAs(token, "POST", "/api/v1/hosts/"+host+"/status", bytes.NewReader(body))
	if resp.StatusCode != http.StatusNoContent {
		w.sh.t.Fatalf("report of %s: %d %s", host, resp.StatusCode, readAll(w.sh.t, resp.Body))
	}
}

// place applies a project of eggs of one replica each, named after
// prefix, and returns how many each host got. An egg's first replica goes
// to the least loaded host for its capacity, so a host believed larger than
// it is draws them all.
func (w *capacityWorld) place(prefix string, eggs int) map[string]int {
	t := w.sh.t
	t.Helper()
	var yaml strings.Builder
	yaml.WriteString("project: shop\neggs:\n")
	for i := range eggs {
		yaml.WriteString("  " + prefix + jsonInt(i) + ": {image: w:1, resources: {memory: 512Mi, cpus: 0.25}}\n")
	}
	plan := decode[api.Plan](t, w.sh.do("POST", "/api/v1/projects/default/shop/plan", bytes.NewReader(planBody(t, yaml.String(), nil))), http.StatusCreated)
	started := decode[applyStarted](t, w.sh.do("POST", "/api/v1/projects/default/shop/apply", strings.NewReader(`{"plan":"`+plan.ID+`"}`)),
		http.StatusAccepted)
	resp := w.sh.do("GET", started.Events, nil)
	steps := readSteps(t, resp)
	wantSucceeded(t, steps[len(steps)-1])
	got := map[string]int{}
	for _, h := range []string{w.honest, w.rogue} {
		d := decode[contract.DesiredState](t, w.sh.do("GET", "/api/v1/hosts/"+h+"/desired-state", nil), http.StatusOK)
		for _, wl := range d.Workloads {
			if strings.HasPrefix(wl.Egg, prefix) {
				got[h] += wl.Replicas
			}
		}
	}
	return got
}

// hostView reads a host as hatch hosts shows it.
func (w *capacityWorld) hostView(id string) api.Host {
	w.sh.t.Helper()
	for _, h := range decode[api.HostList](w.sh.t, w.sh.do("GET", "/api/v1/hosts", nil), http.StatusOK).Hosts {
		if h.ID == id {
			return h
		}
	}
	w.sh.t.Fatalf("host %s is not listed", id)
	return api.Host{}
}

var (
	eightGi = &contract.HostCapacity{MemoryBytes: 8 << 30, MilliCPU: 4000}
	huge    = &contract.HostCapacity{MemoryBytes: 9e18, MilliCPU: 9e18}
)

func TestAHostsCapacityJumpIsNotBelievedUntilAnAdminPinsIt(t *testing.T) {
	w := newCapacityWorld(t, placement.DefaultMaxHostCapacity)
	w.report(w.honest, w.honestTok, eightGi)
	w.report(w.rogue, w.rogueTok, eightGi) // its baseline
	w.report(w.rogue, w.rogueTok, huge)    // then the lie

	if got := w.place("web", 8); got[w.honest] != 4 || got[w.rogue] != 4 {
		t.Fatalf("replicas %v: the rogue host's claim of 9e18 bytes drew them; want 4 and 4", got)
	}
	v := w.hostView(w.rogue)
	if v.Capacity == nil || v.Capacity.Believed != *eightGi || v.Capacity.Reported == nil || *v.Capacity.Reported != *huge ||
		v.Capacity.Source != string(placement.CapacityLimited) || !strings.Contains(v.Capacity.Problem, "hatch hosts set rogue") {
		t.Fatalf("the rogue host is shown as %+v; want 8 GiB and 4 CPUs believed of 9e18 reported, with the fix", v.Capacity)
	}

	// The admin confirms a real upgrade: 24 GiB and 12 CPUs, three times
	// the honest host's.
	resp := w.sh.do("PUT", "/api/v1/hosts/rogue/capacity", strings.NewReader(`{"memory_bytes": 25769803776, "milli_cpu": 12000}`))
	pinned := decode[api.Host](t, resp, http.StatusOK)
	want := contract.HostCapacity{MemoryBytes: 24 << 30, MilliCPU: 12000}
	if pinned.Capacity == nil || pinned.Capacity.Believed != want || pinned.Capacity.Source != string(placement.CapacityPinned) ||
		pinned.Capacity.Problem != "" {
		t.Fatalf("after hosts set the host is %+v; want 24 GiB and 12 CPUs pinned, no problem", pinned.Capacity)
	}
	// The new eggs are placed beside the old (an apply deletes after it
	// created): 4 each make the honest host a quarter full and the pinned
	// one a twelfth, so the next 8 all go to the pinned one (at 12 of 48
	// it is a quarter full too).
	if got := w.place("api", 8); got[w.rogue] != 8 {
		t.Fatalf("replicas %v after the pin: want all 8 on the pinned host, believed three times larger", got)
	}
}

func TestAFirstReportIsHeldToTheServersCaps(t *testing.T) {
	w := newCapacityWorld(t, placement.Resources{Memory: 8 << 30, MilliCPU: 4000})
	w.report(w.honest, w.honestTok, eightGi)
	w.report(w.rogue, w.rogueTok, huge) // its very first report lies
	if got := w.place("web", 8); got[w.honest] != 4 || got[w.rogue] != 4 {
		t.Fatalf("replicas %v: a first report beyond the caps drew them; want 4 and 4", got)
	}
	if v := w.hostView(w.rogue); v.Capacity == nil || v.Capacity.Baseline == nil || *v.Capacity.Baseline != *eightGi ||
		!strings.Contains(v.Capacity.Problem, "--max-host-memory") {
		t.Fatalf("the rogue host is shown as %+v; want its baseline at the caps and the caps named", v.Capacity)
	}
}

func TestAHostThatNeverSaysItsCapacityIsNotFavoured(t *testing.T) {
	w := newCapacityWorld(t, placement.DefaultMaxHostCapacity)
	w.report(w.honest, w.honestTok, eightGi)
	w.report(w.rogue, w.rogueTok, nil)
	if got := w.place("web", 8); got[w.honest] != 4 || got[w.rogue] != 4 {
		t.Fatalf("replicas %v: a host silent about its capacity drew them; want 4 and 4", got)
	}
	if v := w.hostView(w.rogue); v.Capacity == nil || v.Capacity.Source != string(placement.CapacityAssumed) || v.Capacity.Believed != *eightGi {
		t.Fatalf("the silent host is shown as %+v; want assumed as small as the smallest", v.Capacity)
	}
}

func TestAHostTokenCannotPinCapacity(t *testing.T) {
	w := newCapacityWorld(t, placement.DefaultMaxHostCapacity)
	resp := w.sh.doAs(w.rogueTok, "PUT", "/api/v1/hosts/"+w.rogue+"/capacity", strings.NewReader(`{"memory_bytes": 9000000000000000000, "milli_cpu": 9000000000000000000}`))
	wantError(t, resp, http.StatusForbidden, "forbidden", "")
	resp = w.sh.do("PUT", "/api/v1/hosts/rogue/capacity", strings.NewReader(`{"memory_bytes": -1}`))
	wantError(t, resp, http.StatusBadRequest, "bad_request", "hatch hosts set NAME")
	resp = w.sh.do("PUT", "/api/v1/hosts/nobody/capacity", strings.NewReader(`{"memory_bytes": 1}`))
	wantError(t, resp, http.StatusNotFound, "not_found", "hatch hosts")
}
