package sessionhost

import (
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

func TestAttachableIsTheRunsContainerMadeAndNeverStarted(t *testing.T) {
	w := contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: "web"}
	labels := func(host, run string) map[string]string { return containers.RunLabels(host, w, "h", run) }
	req := contract.AttachRequest{Project: "default/shop", Egg: "web", Run: "r1"}
	for _, tc := range []struct {
		name    string
		found   []container.Summary
		want    string
		refused string
	}{
		{name: "not made yet", found: nil},
		{name: "another host's, another run's, another egg's", found: []container.Summary{
			{ID: "x", State: container.StateCreated, Labels: labels("other", "r1")},
			{ID: "y", State: container.StateCreated, Labels: labels("h1", "r2")},
			{ID: "z", State: container.StateCreated, Labels: containers.RunLabels("h1", contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: "db"}, "h", "r1")},
		}},
		{name: "made", found: []container.Summary{{ID: "c1", State: container.StateCreated, Labels: labels("h1", "r1")}}, want: "c1"},
		{name: "started already", found: []container.Summary{{ID: "c1", State: container.StateRunning, Labels: labels("h1", "r1")}},
			refused: "its terminal is given once"},
		{name: "ended", found: []container.Summary{{ID: "c1", State: container.StateExited, Labels: labels("h1", "r1")}},
			refused: "started already"},
	} {
		got, err := attachable(tc.found, "h1", req)
		switch {
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("%s: %q, %v; want refused with %q", tc.name, got, err, tc.refused)
		case tc.refused == "" && (err != nil || got != tc.want):
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}

func TestOnNetworksWaitsForEveryLabelledNetwork(t *testing.T) {
	ins := container.InspectResponse{Config: &container.Config{Labels: map[string]string{containers.LabelNetworks: "a,b"}},
		NetworkSettings: &container.NetworkSettings{Networks: map[string]*network.EndpointSettings{"a": {}}}}
	if onNetworks(ins) {
		t.Fatal("on network a only, said to be on a and b")
	}
	ins.NetworkSettings.Networks["b"] = &network.EndpointSettings{}
	if !onNetworks(ins) {
		t.Fatal("on a and b, said not to be")
	}
	ins.Config.Labels, ins.NetworkSettings = nil, nil
	if !onNetworks(ins) {
		t.Fatal("a container with no networks to wait for, said not to be ready")
	}
}
