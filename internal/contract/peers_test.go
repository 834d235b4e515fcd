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
	reaches := map[string][]string{
		"h-a":    {"default/shop/web", "default/shop/api", "default/shop/web"},
		"h-gone": {"default/shop/web"},
	}
	got := ValidPeers(hosts, func(id string) []string { return reaches[id] })
	want := []Peer{
		{HostID: "h-a", Name: "a", Addresses: []string{"10.0.0.1:7702"}, Reaches: []string{"default/shop/api", "default/shop/web"}},
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
