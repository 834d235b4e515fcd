package contract

import (
	"reflect"
	"testing"
)

func TestValidPeersAreTheHostsNotRemoved(t *testing.T) {
	hosts := []PeerHost{
		{ID: "h-c", Name: "c", MeshAddresses: []string{"10.0.0.3:7702", "[fd00::3]:7702"}},
		{ID: "h-a", Name: "a", MeshAddresses: []string{"10.0.0.1:7702"}},
		{ID: "h-gone", Name: "gone", Removed: true, MeshAddresses: []string{"10.0.0.9:7702"}},
		{ID: "h-b", Name: "b"}, // down, or no address reported yet: still valid
	}
	reaches := map[string][]Reach{
		"h-a": {
			{Workload: "default/shop/web", Ports: []int{8080, 0}}, {Workload: "default/shop/api", Ports: []int{9000}},
			{Workload: "default/shop/web", Ports: []int{0}}, {Workload: "default/shop/quiet"}, // reached by name only: no stream
		},
		"h-gone": {{Workload: "default/shop/web", Ports: []int{0}}},
	}
	got := ValidPeers(hosts, func(id string) []Reach { return reaches[id] })
	want := []Peer{
		{HostID: "h-a", Name: "a", Addresses: []string{"10.0.0.1:7702"}, Reaches: []string{"default/shop/api", "default/shop/web"},
			Streams: []Reach{{Workload: "default/shop/api", Ports: []int{9000}}, {Workload: "default/shop/web", Ports: []int{0, 8080}}}},
		{HostID: "h-b", Name: "b"},
		{HostID: "h-c", Name: "c", Addresses: []string{"10.0.0.3:7702", "[fd00::3]:7702"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ValidPeers =\n%+v\nwant\n%+v", got, want)
	}
	hosts[0].MeshAddresses[0] = "changed"
	if got[2].Addresses[0] != "10.0.0.3:7702" {
		t.Fatal("ValidPeers shares the caller's slices")
	}
}

func TestRoutedWorkloadsAreThoseTheIngressServes(t *testing.T) {
	d := DesiredState{Workloads: []WorkloadSpec{
		{Namespace: "default", Project: "shop", Egg: "web", Routes: []Route{{Host: "shop.example"}}},
		{Namespace: "default", Project: "shop", Egg: "db"},
		{Namespace: "default", Project: "shop", Egg: "tcp", Ports: []PublishedPort{{HostPort: 5432, ContainerPort: 5432}}},
	}}
	if got, want := RoutedWorkloads(d), []string{"default/shop/tcp", "default/shop/web"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("RoutedWorkloads = %v, want %v", got, want)
	}
}

// A peer opens a stream to a workload only on a port its own state streams
// to: HTTP where it routes the egg, a published port's target, the egg's
// port where its relay stands for it. A peer list from a control plane that
// knew no ports holds it to the workload alone.
func TestAPeerMayOpenOnlyTheStreamsItsStateServes(t *testing.T) {
	peer := Peer{HostID: "h-a", Reaches: []string{"default/shop/web", "default/shop/db"},
		Streams: []Reach{{Workload: "default/shop/db", Ports: []int{5432}}, {Workload: "default/shop/web", Ports: []int{0}}}}
	for _, tc := range []struct {
		workload string
		port     int
		want     bool
	}{
		{"default/shop/web", 0, true},
		{"default/shop/web", 8080, false}, // routed only: no raw TCP to the routes' port
		{"default/shop/db", 5432, true},
		{"default/shop/db", 0, false},
		{"default/shop/db", 38241, false},
		{"default/other/db", 5432, false},
	} {
		if got := peer.MayOpen(tc.workload, tc.port); got != tc.want {
			t.Errorf("MayOpen(%s, %d) = %v, want %v", tc.workload, tc.port, got, tc.want)
		}
	}
	legacy := Peer{HostID: "h-a", Reaches: []string{"default/shop/web"}}
	if !legacy.MayOpen("default/shop/web", 38241) || legacy.MayOpen("default/shop/db", 5432) {
		t.Error("a peer without streams is not held to its workloads alone")
	}
	if (Peer{HostID: "h-a"}).MayOpen("default/shop/web", 0) {
		t.Error("a peer reaching nothing opened a stream")
	}
}

func TestAServicesStreamPortsAreWhatItsHostStreamsTo(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Service
		want []int
	}{
		{"routed", Service{Port: 8080, Routes: []Route{{Host: "shop.example"}}}, []int{0}},
		{"published", Service{Port: 8080, Ports: []PublishedPort{{HostPort: 15432, ContainerPort: 5432}, {HostPort: 1, ContainerPort: 0}}}, []int{5432}},
		{"relayed", Service{Port: 5432, Names: []string{"db"}, Networks: []string{"n"}}, []int{5432}},
		{"named on no shared network", Service{Port: 5432, Names: []string{"db"}}, nil},
		{"all at once, each port once", Service{Port: 5432, Names: []string{"db"}, Networks: []string{"n"},
			Routes: []Route{{Host: "a"}}, Ports: []PublishedPort{{HostPort: 5432, ContainerPort: 5432}}}, []int{0, 5432}},
	} {
		if got := tc.s.StreamPorts(); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: StreamPorts = %v, want %v", tc.name, got, tc.want)
		}
	}
}
