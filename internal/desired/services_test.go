package desired

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
)

// net is a network's Docker name on a host, in project default/shop.
func net(host, name string) string { return contract.NetworkName(host, "default", "shop", name) }

// wl is a workload of default/shop on host with replicas, edited by opts.
func wl(host, egg string, replicas int, opts ...func(*contract.WorkloadSpec)) contract.WorkloadSpec {
	w := contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: egg, Replicas: replicas, Port: 8080,
		Networks: []string{net(host, "default")}, Rollout: contract.Rollout{DrainTimeout: 10 * time.Second}}
	for _, o := range opts {
		o(&w)
	}
	return w
}

func TestServicesByHost(t *testing.T) {
	routes := func(w *contract.WorkloadSpec) { w.Routes = []contract.Route{{Host: "shop.localhost"}} }
	ports := func(w *contract.WorkloadSpec) {
		w.Ports = []contract.PublishedPort{{HostPort: 8088, ContainerPort: 8080}}
	}
	uses := func(eggs ...string) func(*contract.WorkloadSpec) {
		return func(w *contract.WorkloadSpec) { w.Uses = eggs }
	}
	on := func(host string, names ...string) func(*contract.WorkloadSpec) {
		return func(w *contract.WorkloadSpec) {
			w.Networks = nil
			for _, n := range names {
				w.Networks = append(w.Networks, net(host, n))
			}
		}
	}
	web := contract.Service{Namespace: "default", Project: "shop", Egg: "web", Port: 8080,
		Routes: []contract.Route{{Host: "shop.localhost"}}, DrainTimeout: 10 * time.Second}
	db := contract.Service{Namespace: "default", Project: "shop", Egg: "db", Port: 8080, DrainTimeout: 10 * time.Second}
	with := func(s contract.Service, edit func(*contract.Service)) contract.Service { edit(&s); return s }
	noPort := func(w *contract.WorkloadSpec) { w.Port = 0 }
	tests := []struct {
		name      string
		workloads map[string][]contract.WorkloadSpec
		want      map[string][]contract.Service
	}{
		{
			name: "a routed egg is served on every host, naming the hosts running it",
			workloads: map[string][]contract.WorkloadSpec{
				"h1": {wl("h1", "web", 2, routes, on("h1")), wl("h1", "worker", 1, on("h1"))},
				"h2": nil,
				"h3": {wl("h3", "web", 1, routes, on("h3"))},
			},
			want: map[string][]contract.Service{
				"h1": {with(web, func(s *contract.Service) { s.Hosts = []string{"h1", "h3"} })},
				"h2": {with(web, func(s *contract.Service) { s.Hosts = []string{"h1", "h3"} })},
				"h3": {with(web, func(s *contract.Service) { s.Hosts = []string{"h1", "h3"} })},
			},
		},
		{
			name:      "a published port alone makes an egg served everywhere",
			workloads: map[string][]contract.WorkloadSpec{"h1": nil, "h2": {wl("h2", "tcp", 1, ports, on("h2"))}},
			want: map[string][]contract.Service{
				"h1": {{Namespace: "default", Project: "shop", Egg: "tcp", Port: 8080, Hosts: []string{"h2"},
					Ports: []contract.PublishedPort{{HostPort: 8088, ContainerPort: 8080}}, DrainTimeout: 10 * time.Second}},
				"h2": {{Namespace: "default", Project: "shop", Egg: "tcp", Port: 8080, Hosts: []string{"h2"},
					Ports: []contract.PublishedPort{{HostPort: 8088, ContainerPort: 8080}}, DrainTimeout: 10 * time.Second}},
			},
		},
		{
			name: "a used egg is served where its users run, by its names, on the networks they share with it",
			workloads: map[string][]contract.WorkloadSpec{
				"h1": {wl("h1", "db", 1, on("h1", "backend", "admin"), func(w *contract.WorkloadSpec) { w.Aliases = []string{"postgres"} })},
				"h2": {wl("h2", "app", 2, noPort, uses("db"), on("h2", "frontend", "backend")), wl("h2", "cron", 1, noPort, uses("db"), on("h2", "admin"))},
				"h3": {wl("h3", "app", 1, noPort, uses("db"), on("h3", "frontend"))},
			},
			want: map[string][]contract.Service{
				// db's own replica shares its networks: it reaches db by name too.
				"h1": {with(db, func(s *contract.Service) {
					s.Hosts, s.Names = []string{"h1"}, []string{"db", "postgres"}
					s.Networks = slices.Sorted(slices.Values([]string{net("h1", "backend"), net("h1", "admin")}))
				})},
				"h2": {with(db, func(s *contract.Service) {
					s.Hosts, s.Names = []string{"h1"}, []string{"db", "postgres"}
					s.Networks = slices.Sorted(slices.Values([]string{net("h2", "backend"), net("h2", "admin")}))
				})},
				// app on h3 shares no network with db: served, reached by no name here.
				"h3": {with(db, func(s *contract.Service) { s.Hosts, s.Names = []string{"h1"}, []string{"db", "postgres"} })},
			},
		},
		{
			name: "a routed egg used by a workload is served everywhere, with names where it is used",
			workloads: map[string][]contract.WorkloadSpec{
				"h1": {wl("h1", "web", 1, routes)},
				"h2": {wl("h2", "bot", 1, noPort, uses("web"))},
			},
			want: map[string][]contract.Service{
				"h1": {with(web, func(s *contract.Service) {
					s.Hosts, s.Names, s.Networks = []string{"h1"}, []string{"web"}, []string{net("h1", "default")}
				})},
				"h2": {with(web, func(s *contract.Service) {
					s.Hosts, s.Names, s.Networks = []string{"h1"}, []string{"web"}, []string{net("h2", "default")}
				})},
			},
		},
		{
			// Compose services call each other by name, with no reference.
			name: "eggs of a project reach each other by name on every shared network of every host, uses or not",
			workloads: map[string][]contract.WorkloadSpec{
				"h1": {wl("h1", "api", 2, on("h1", "backend")), wl("h1", "worker", 1, noPort, on("h1", "backend"))},
				"h2": {
					wl("h2", "db", 1, on("h2", "backend"), func(w *contract.WorkloadSpec) { w.Port, w.Aliases = 5432, []string{"postgres"} }),
					wl("h2", "admin", 1, noPort, on("h2", "admin")),
				},
				// Another namespace's network of the same name is another network.
				"h3": {{Namespace: "staging", Project: "shop", Egg: "api", Replicas: 1, Port: 8080,
					Networks: []string{contract.NetworkName("h3", "staging", "shop", "backend")}}},
			},
			want: map[string][]contract.Service{
				"h1": {
					{Namespace: "default", Project: "shop", Egg: "api", Port: 8080, Hosts: []string{"h1"}, DrainTimeout: 10 * time.Second,
						Names: []string{"api"}, Networks: []string{net("h1", "backend")}},
					{Namespace: "default", Project: "shop", Egg: "db", Port: 5432, Hosts: []string{"h2"}, DrainTimeout: 10 * time.Second,
						Names: []string{"db", "postgres"}, Networks: []string{net("h1", "backend")}},
				},
				"h2": {
					{Namespace: "default", Project: "shop", Egg: "api", Port: 8080, Hosts: []string{"h1"}, DrainTimeout: 10 * time.Second,
						Names: []string{"api"}, Networks: []string{net("h2", "backend")}},
					{Namespace: "default", Project: "shop", Egg: "db", Port: 5432, Hosts: []string{"h2"}, DrainTimeout: 10 * time.Second,
						Names: []string{"db", "postgres"}, Networks: []string{net("h2", "backend")}},
				},
				"h3": {{Namespace: "staging", Project: "shop", Egg: "api", Port: 8080, Hosts: []string{"h3"},
					Names: []string{"api"}, Networks: []string{contract.NetworkName("h3", "staging", "shop", "backend")}}},
			},
		},
		{
			name: "an egg placed nowhere, or of another project, or used by a cold workload is served nowhere",
			workloads: map[string][]contract.WorkloadSpec{
				"h1": {wl("h1", "app", 1, uses("cache"), on("h1")), wl("h1", "cold", 0, uses("db"))},
				"h2": {wl("h2", "db", 1, on("h2")), {Namespace: "staging", Project: "shop", Egg: "app", Replicas: 1, Uses: []string{"db"}}},
			},
			want: map[string][]contract.Service{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ServicesByHost(tt.workloads)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("services\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestNetworkOfInvertsNetworkName(t *testing.T) {
	for _, name := range []string{"default", "back-end", "a-b-c"} {
		docker := contract.NetworkName("h1", "default", "my-shop", name)
		if got, ok := networkOf(docker, "h1", "default", "my-shop"); !ok || got != name {
			t.Errorf("networkOf(%q) = %q, %v; want %q", docker, got, ok, name)
		}
		if _, ok := networkOf(docker, "h2", "default", "my-shop"); ok {
			t.Errorf("networkOf(%q) on another host answered", docker)
		}
	}
	if _, ok := networkOf("bridge", "h1", "default", "my-shop"); ok {
		t.Error("a foreign network was read as the project's")
	}
}
