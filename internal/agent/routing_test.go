package agent

import (
	"reflect"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/converge"
	"github.com/hatchery/hatchery/internal/ingress"
)

func TestInPoolKeepsAHealthyBackendUntilItsRetriesFail(t *testing.T) {
	started := time.Unix(1000, 0)
	seenHealthy := func(at time.Time) *converge.History {
		h := converge.NewHistory()
		h.Containers["c1"] = converge.ContainerHistory{HealthyStart: at}
		return h
	}
	tests := []struct {
		name    string
		healthy bool
		paused  bool
		streak  int
		history *converge.History
		want    bool
	}{
		{name: "a paused backend is out at once, whatever its last check", healthy: true, paused: true, history: seenHealthy(started), want: false},
		{name: "a passing backend is in", healthy: true, history: converge.NewHistory(), want: true},
		{name: "one failed check after a pass keeps it in", streak: 1, history: seenHealthy(started), want: true},
		{name: "retries-1 failed checks keep it in", streak: 2, history: seenHealthy(started), want: true},
		{name: "retries failed checks take it out", streak: 3, history: seenHealthy(started), want: false},
		{name: "a backend never seen passing waits for a pass", streak: 1, history: converge.NewHistory(), want: false},
		{name: "a pass of an earlier incarnation does not count after a restart", history: seenHealthy(started.Add(-time.Minute)), want: false},
		{name: "without a history only a pass counts", streak: 1, history: nil, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := containers.Container{ID: "c1", State: contract.StateRunning, StartedAt: started, Healthy: tt.healthy, FailingStreak: tt.streak, Paused: tt.paused}
			if got := inPool(c, tt.history, 3); got != tt.want {
				t.Errorf("inPool = %v, want %v", got, tt.want)
			}
		})
	}
}

// The history the converge engine keeps is what carries the pass over to the
// routing table: seen healthy by one converge, a backend that misses a check
// stays in the table's pool until the workload's retries have failed.
func TestRoutingTableKeepsABackendThatMissedOneCheck(t *testing.T) {
	w := web(1)
	w.Routes = []contract.Route{{Host: "shop.localhost"}}
	w.Health = contract.HealthCheck{HTTP: "/healthz", Retries: 2}
	desired := desiredState(w)
	now := time.Unix(2000, 0)
	c := containers.FromLabels("c1", "n-c1", containers.Labels(testHost, w, 0, contract.SpecHash(w)))
	c.State, c.IP, c.StartedAt = contract.StateRunning, "10.0.0.1", now.Add(-time.Minute)
	history := converge.NewHistory()

	pooled := func(c containers.Container) bool {
		history.Observe(desired, []containers.Container{c}, now) // as Converge does before routing
		table := routingTable(desired, []containers.Container{c}, history, "/relays")
		return table.Eggs[0].Backends[0].Healthy
	}
	c.FailingStreak = 1
	if pooled(c) {
		t.Fatal("a backend that never passed joined the pool")
	}
	c.Healthy, c.FailingStreak = true, 0
	if !pooled(c) {
		t.Fatal("a passing backend is not in the pool")
	}
	c.Healthy, c.FailingStreak = false, 1
	if !pooled(c) {
		t.Error("one missed check took the backend out of the pool")
	}
	c.FailingStreak = 2
	if pooled(c) {
		t.Error("the backend stayed in the pool after its retries failed")
	}
}

// runningContainer is a running container of w at ip, seen healthy.
func runningContainer(id string, w contract.WorkloadSpec, ip string) containers.Container {
	c := containers.FromLabels(id, "n-"+id, containers.Labels(testHost, w, 0, contract.SpecHash(w)))
	c.State, c.IP, c.Healthy = contract.StateRunning, ip, true
	return c
}

func TestRoutingTableFromServices(t *testing.T) {
	webW := web(1) // default/shop/web, port 8080
	db := contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: "db", Image: "db:1", Replicas: 1, Port: 5432}
	api := contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: "api", Image: "api:1", Replicas: 1, Port: 9000,
		Routes: []contract.Route{{Host: "api.localhost"}}}
	gone := contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: "old", Image: "old:1", Replicas: 1, Port: 80}
	webSvc := contract.Service{Namespace: "default", Project: "shop", Egg: "web", Port: 8080,
		Hosts: []string{"host-0", testHost, "host-z"}, Routes: []contract.Route{{Host: "shop.localhost", PathPrefix: "/v1", UpstreamTimeout: time.Minute}},
		DrainTimeout: 7 * time.Second}
	dbSvc := contract.Service{Namespace: "default", Project: "shop", Egg: "db", Hosts: []string{"host-z"},
		Ports: []contract.PublishedPort{{HostPort: 15432, ContainerPort: 5432}}}
	kvSvc := contract.Service{Namespace: "default", Project: "shop", Egg: "kv", Port: 6379, Hosts: []string{"host-0"},
		Names: []string{"kv"}, Networks: []string{"hatch-shop-default-1"}}
	actual := []containers.Container{
		runningContainer("w1", webW, "10.0.0.1"),
		runningContainer("a1", api, "10.0.0.2"),
		runningContainer("o1", gone, "10.0.0.3"),
	}
	tests := []struct {
		name    string
		desired contract.DesiredState
		want    ingress.Table
	}{
		{
			name:    "without services, the workloads with routes or ports, local backends only, as before",
			desired: contract.DesiredState{HostID: testHost, Workloads: []contract.WorkloadSpec{webW, api}},
			want: ingress.Table{Eggs: []ingress.Egg{{Name: "default/shop/api", DrainTimeout: api.DrainTimeout(), Port: 9000,
				Routes:   []ingress.Route{{Host: "api.localhost"}},
				Backends: []ingress.Backend{{ContainerID: "a1", Addr: "10.0.0.2:9000", Healthy: true}}}}},
		},
		{
			name: "services: the service's routes, ports and drain timeout, local backends, the other hosts remote",
			desired: contract.DesiredState{HostID: testHost, Workloads: []contract.WorkloadSpec{webW, api},
				Services: []contract.Service{webSvc, dbSvc, kvSvc}},
			want: ingress.Table{Eggs: []ingress.Egg{
				{Name: "default/shop/web", DrainTimeout: 7 * time.Second, Port: 8080, Routes: []ingress.Route{{Host: "shop.localhost", PathPrefix: "/v1", UpstreamTimeout: time.Minute}},
					Remote:   []string{"host-0", "host-z"},
					Backends: []ingress.Backend{{ContainerID: "w1", Addr: "10.0.0.1:8080", Healthy: true}}},
				// Not run here: remote only, its published port's target carried for the mesh.
				{Name: "default/shop/db", Ports: []ingress.Port{{Published: 15432, Target: 5432}}, Remote: []string{"host-z"}},
				// Referenced here: in the table without routes or ports, its relays' socket served.
				{Name: "default/shop/kv", Remote: []string{"host-0"}, Port: 6379,
					Sockets: []ingress.Socket{{Path: relaySocket("/relays", kvSvc), Target: 6379}}},
				// A routed workload no service lists (a control plane before services): as before.
				{Name: "default/shop/api", DrainTimeout: api.DrainTimeout(), Port: 9000, Routes: []ingress.Route{{Host: "api.localhost"}},
					Backends: []ingress.Backend{{ContainerID: "a1", Addr: "10.0.0.2:9000", Healthy: true}}},
			}},
		},
		{
			name: "a service without a port uses the local workload's, and its drain timeout",
			desired: contract.DesiredState{HostID: testHost, Workloads: []contract.WorkloadSpec{db},
				Services: []contract.Service{{Namespace: "default", Project: "shop", Egg: "db", Hosts: []string{testHost}}}},
			want: ingress.Table{Eggs: []ingress.Egg{{Name: "default/shop/db", DrainTimeout: db.DrainTimeout()}}},
		},
		{
			name: "a stateful workload desired here is held through its gaps; a cold one is not",
			desired: contract.DesiredState{HostID: testHost, Workloads: []contract.WorkloadSpec{withVolume(db, 1), withVolume(api, 0)},
				Services: []contract.Service{{Namespace: "default", Project: "shop", Egg: "db", Hosts: []string{testHost}}}},
			want: ingress.Table{Eggs: []ingress.Egg{
				{Name: "default/shop/db", DrainTimeout: db.DrainTimeout(), Stateful: true},
				{Name: "default/shop/api", DrainTimeout: api.DrainTimeout(), Routes: []ingress.Route{{Host: "api.localhost"}}, Port: 9000,
					Backends: []ingress.Backend{{ContainerID: "a1", Addr: "10.0.0.2:9000", Healthy: true}}},
			}},
		},
		{
			name: "the containers of a workload not desired here are no backend of its service",
			desired: contract.DesiredState{HostID: testHost,
				Services: []contract.Service{{Namespace: "default", Project: "shop", Egg: "old", Port: 80, Hosts: []string{"host-0"}}}},
			want: ingress.Table{Eggs: []ingress.Egg{{Name: "default/shop/old", Port: 80, Remote: []string{"host-0"}}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := routingTable(tt.desired, actual, converge.NewHistory(), "/relays")
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("table\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// withVolume returns w with a named volume (stateful) and replicas here.
func withVolume(w contract.WorkloadSpec, replicas int) contract.WorkloadSpec {
	w.Volumes = []contract.VolumeMount{{Name: "data", Target: "/data"}}
	w.Replicas = replicas
	return w
}
