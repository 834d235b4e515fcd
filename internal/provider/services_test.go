package provider

import (
	"context"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/desired"
	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

// A report stored with mesh addresses no peer may dial (before the fleet
// checked them at intake: issue 24, finding 8) gives its host no address in
// the peer list; a good one is handed on as it came.
func TestStoredMeshAddressesNoPeerMayDialAreNotHandedOn(t *testing.T) {
	e := newEnv(t, "h1", "h2", "h3")
	e.report("h1", "10.0.0.1:7702", "169.254.169.254:80")
	e.report("h2", "127.0.0.1:2375")
	e.report("h3", "10.0.0.3:7702", "[fd00::3]:7702")
	e.apply("default/site", siteYAML, nil)
	for _, p := range e.state("h1").Peers {
		want := map[string][]string{"h3": {"10.0.0.3:7702", "[fd00::3]:7702"}}[p.HostID]
		if !slices.Equal(p.Addresses, want) {
			t.Errorf("peer %s is handed %v, want %v", p.HostID, p.Addresses, want)
		}
	}
}

// report makes a host report, with the mesh addresses given.
func (e *env) report(host string, mesh ...string) {
	e.t.Helper()
	rep, _ := json.Marshal(contract.StatusReport{HostID: host, Time: e.clock.Now(), MeshAddresses: mesh})
	if _, err := e.st.PutStatus(e.t.Context(), host, rep, e.clock.Now()); err != nil {
		e.t.Fatal(err)
	}
}

const siteYAML = `
project: site
eggs:
  web:
    image: web:1
    port: 80
    routes: [site.localhost]
    placement: {hosts: [h2]}
`

// Every host serves every routed egg of the cluster and the eggs its own
// workloads use or share a network with, and lists the valid host set, each peer reaching what its
// own state serves.
func TestEveryHostServesTheClustersRoutesAndWhatItsWorkloadsUse(t *testing.T) {
	e := newEnv(t, "h1", "h2", "h3")
	e.report("h2", "10.0.0.2:7702", "[fd00::2]:7702")
	e.apply("default/data", statefulYAML, nil) // app x2 uses db
	e.apply("default/site", siteYAML, nil)
	dbHost := e.record("default/data", "volume/pgdata").Outputs["host"].(string)
	appHosts := desired.HostsOf(e.record("default/data", "egg/app").Outputs)
	reaches := map[string][]string{}
	streams := map[string][]contract.Reach{}
	for _, h := range []string{"h1", "h2", "h3"} {
		d := e.state(h)
		site := contract.Service{Namespace: "default", Project: "site", Egg: "web", Port: 80, Hosts: []string{"h2"},
			Routes: []contract.Route{{Host: "site.localhost"}}, DrainTimeout: 10 * time.Second}
		if h == "h2" { // web's own replica reaches it by name
			site.Names, site.Networks = []string{"web"}, []string{contract.NetworkName(h, "default", "site", "default")}
		}
		want := []contract.Service{site}
		if slices.Contains(appHosts, h) || h == dbHost {
			db := contract.Service{Namespace: "default", Project: "data", Egg: "db", Port: 5432, Hosts: []string{dbHost},
				DrainTimeout: 10 * time.Second, Names: []string{"db"},
				Networks: []string{contract.NetworkName(h, "default", "data", "default")}}
			want = []contract.Service{db, site}
		}
		if !reflect.DeepEqual(d.Services, want) {
			t.Fatalf("services of %s\n got %+v\nwant %+v", h, d.Services, want)
		}
		// Each host streams to site's routes (HTTP), and to db's port
		// where its relay stands for db; web's own host's relay for web
		// adds web's port there.
		for _, s := range want {
			reaches[h] = append(reaches[h], s.ID())
			ports := []int{5432}
			if s.Egg == "web" {
				ports = []int{0}
				if h == "h2" {
					ports = []int{0, 80}
				}
			}
			streams[h] = append(streams[h], contract.Reach{Workload: s.ID(), Ports: ports})
		}
	}
	wantPeers := []contract.Peer{
		{HostID: "h1", Name: "h1", Reaches: reaches["h1"], Streams: streams["h1"]},
		{HostID: "h2", Name: "h2", Addresses: []string{"10.0.0.2:7702", "[fd00::2]:7702"}, Reaches: reaches["h2"], Streams: streams["h2"]},
		{HostID: "h3", Name: "h3", Reaches: reaches["h3"], Streams: streams["h3"]},
	}
	for _, h := range []string{"h1", "h2", "h3"} {
		if got := e.state(h).Peers; !reflect.DeepEqual(got, wantPeers) {
			t.Fatalf("peers of %s\n got %+v\nwant %+v", h, got, wantPeers)
		}
	}
	// Services change no container: the replicas' workloads are as before
	// (routes on the routed egg's workload).
	w, _ := e.state("h2").Workload("default/site/web")
	if !slices.Equal(w.Routes, []contract.Route{{Host: "site.localhost"}}) {
		t.Fatalf("site's workload routes %v", w.Routes)
	}
}

// removingFleet is the store's fleet with some hosts removed, as
// `hatch hosts remove` would mark them.
type removingFleet struct {
	desired.Fleet
	removed map[string]bool
}

func (f removingFleet) Hosts(ctx context.Context) ([]desired.FleetHost, error) {
	hosts, err := f.Fleet.Hosts(ctx)
	for i := range hosts {
		hosts[i].Removed = f.removed[hosts[i].ID]
	}
	return hosts, err
}

// SyncPeers writes what changed in the host set without a workload moving,
// and nothing when nothing changed.
func TestSyncPeersFollowsTheHostSetAndWritesNothingUnchanged(t *testing.T) {
	e := newEnv(t, "h1", "h2")
	removed := map[string]bool{}
	e.setWith(func(d *desired.Deps) { d.Fleet = removingFleet{d.Fleet, removed} })
	e.apply("default/site", strings.Replace(siteYAML, "placement: {hosts: [h2]}", "replicas: 2", 1), nil)
	versions := func() map[string]string {
		out := map[string]string{}
		for _, h := range []string{"h1", "h2", "h3"} {
			out[h] = e.version(h)
		}
		return out
	}
	peerIDs := func(host string) []string {
		var ids []string
		for _, p := range e.state(host).Peers {
			ids = append(ids, p.HostID+"="+strings.Join(p.Addresses, ","))
		}
		return ids
	}
	if err := e.set.SyncPeers(t.Context()); err != nil {
		t.Fatal(err)
	}
	before := versions()
	if err := e.set.SyncPeers(t.Context()); err != nil || !maps.Equal(versions(), before) {
		t.Fatalf("SyncPeers with nothing changed: %v, versions %v then %v", err, before, versions())
	}

	e.report("h3", "10.0.0.3:7702") // joins
	if err := e.set.SyncPeers(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"h1", "h2", "h3"} {
		if got := peerIDs(h); !slices.Equal(got, []string{"h1=", "h2=", "h3=10.0.0.3:7702"}) {
			t.Fatalf("peers of %s after h3 joined: %v", h, got)
		}
	}
	if s, ok := e.state("h3").Service("default/site/web"); !ok || len(s.Routes) != 1 {
		t.Fatalf("the new host serves %+v, want site's routed web", e.state("h3").Services)
	}

	e.report("h1", "10.0.0.1:7702") // new addresses
	removed["h2"] = true
	if err := e.set.SyncPeers(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"h1", "h3"} {
		if got := peerIDs(h); !slices.Equal(got, []string{"h1=10.0.0.1:7702", "h3=10.0.0.3:7702"}) {
			t.Fatalf("peers of %s after h2's removal: %v", h, got)
		}
	}
	// SyncPeers moves nothing: replicas leave a removed host by Reschedule.
	if got := e.slots("default/site/web", "h1", "h2", "h3"); !maps.Equal(got, map[string]int{"h1": 1, "h2": 1}) {
		t.Fatalf("slots after SyncPeers %v", got)
	}
}

// An egg deployed before eggs reached each other across hosts has
// placement.beside in its record and no uses; an apply of the same file
// updates it and rolls no container anywhere.
func TestAnUpgradeFromBesideRollsNoContainer(t *testing.T) {
	e := newEnv(t, "h1", "h2")
	e.apply("default/data", statefulYAML, nil)
	host := e.record("default/data", "volume/pgdata").Outputs["host"].(string)
	// Make the record and the states what the version before wrote.
	rec := e.record("default/data", "egg/app")
	delete(rec.Inputs, "uses")
	rec.Inputs["placement"].(map[string]any)["beside"] = []any{map[string]any{"egg": "db", "hosts": []any{host}}}
	if err := e.st.PutResource(t.Context(), "default/data", rec); err != nil {
		t.Fatal(err)
	}
	hashes := map[string]string{}
	for _, h := range []string{"h1", "h2"} {
		d := e.state(h)
		d.Services, d.Peers = nil, nil
		for i, w := range d.Workloads {
			d.Workloads[i].Uses = nil
			hashes[h+" "+w.ID()] = contract.SpecHash(w)
		}
		d.Seal()
		enc, err := store.EncodeDesiredState(e.box, d)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.st.PutDesiredStates(t.Context(), []store.DesiredState{enc}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// The old record still reads: readiness and the plan decode it.
	if _, _, err := (eggProvider{e.set}).Ready(t.Context(), "default/data", rec, resource.ConditionHealthy); err != nil {
		t.Fatalf("readiness of the old record: %v", err)
	}
	res := e.apply("default/data", statefulYAML, nil)
	for _, r := range res.Resources {
		if r.Key == "egg/app" && r.Action != reconciler.ActionUpdate {
			t.Fatalf("egg/app: %s, want an update (its inputs changed shape)", r.Action)
		}
	}
	after := map[string]string{}
	for _, h := range []string{"h1", "h2"} {
		for _, w := range e.state(h).Workloads {
			after[h+" "+w.ID()] = contract.SpecHash(w)
		}
	}
	if !maps.Equal(after, hashes) {
		t.Fatalf("spec hashes after the upgrade %v, want %v: no container rolls", after, hashes)
	}
	rec = e.record("default/data", "egg/app")
	if _, ok := rec.Inputs["placement"].(map[string]any)["beside"]; ok || rec.Inputs["uses"] == nil {
		t.Fatalf("record after apply: %v", rec.Inputs)
	}
	for _, h := range desired.HostsOf(rec.Outputs) {
		if app, _ := e.state(h).Workload("default/data/app"); !slices.Equal(app.Uses, []string{"db"}) {
			t.Fatalf("app on %s uses %v after apply", h, app.Uses)
		}
		if _, ok := e.state(h).Service("default/data/db"); !ok {
			t.Fatalf("%s does not serve db after apply", h)
		}
	}
}

const namesYAML = `
project: names
eggs:
  api:
    image: api:1
    port: 8080
    aliases: [backend]
  worker:
    image: worker:1
    aliases: [jobs]
`

// The replicas of an egg with a port carry no name: relays carry its name
// and aliases. An egg without a port has no relay, so its replicas carry
// them, and consumers on their own host reach it directly.
func TestOnlyTheReplicasOfAnEggWithoutAPortCarryItsNames(t *testing.T) {
	e := newEnv(t, "h1")
	e.apply("default/names", namesYAML, nil)
	d := e.state("h1")
	api, _ := d.Workload("default/names/api")
	worker, _ := d.Workload("default/names/worker")
	if len(api.NetworkAliases) != 0 || !slices.Equal(worker.NetworkAliases, []string{"worker", "jobs"}) {
		t.Fatalf("network aliases: api %v, want none; worker %v, want [worker jobs]", api.NetworkAliases, worker.NetworkAliases)
	}
	if s, ok := d.Service("default/names/api"); !ok || !slices.Equal(s.Names, []string{"api", "backend"}) || len(s.Networks) != 1 {
		t.Fatalf("api is served as %+v, want by its names on its network", d.Services)
	}
	if _, ok := d.Service("default/names/worker"); ok {
		t.Fatalf("worker, which has no port, is served: %+v", d.Services)
	}
}
