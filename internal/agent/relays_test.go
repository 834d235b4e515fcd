package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
)

func TestRelayWorkloads(t *testing.T) {
	kv := contract.Service{Namespace: "default", Project: "shop", Egg: "kv", Port: 6379, Hosts: []string{"host-b"},
		Names: []string{"kv", "cache"}, Networks: []string{"net-2", "net-1", "net-2"}}
	relay := func(network string) contract.WorkloadSpec {
		return contract.WorkloadSpec{
			Namespace: "default", Project: "shop", Egg: "kv.relay-" + shortHash(network)[:8],
			Image: "hatch-relay:abc", Replicas: 1,
			Command:        []string{"--listen", ":6379", "--socket", "/run/hatch/relay.sock"},
			NetworkAliases: []string{"kv", "cache"},
			Networks:       []string{network},
			Binds:          []contract.BindMount{{Source: "/data/relays/" + shortHash("default/shop/kv"), Target: "/run/hatch"}},
			StopTimeout:    5 * time.Second,
		}
	}
	tests := []struct {
		name     string
		services []contract.Service
		want     []contract.WorkloadSpec
	}{
		{name: "no services, no relays"},
		{name: "one relay per network consumers reach the egg on, each carrying its names",
			services: []contract.Service{kv}, want: sortedByID(relay("net-1"), relay("net-2"))},
		{name: "a service nobody here references by name has none",
			services: []contract.Service{{Namespace: "default", Project: "shop", Egg: "web", Port: 80, Routes: []contract.Route{{Host: "a.localhost"}}}}},
		{name: "a service without networks has none",
			services: []contract.Service{{Namespace: "default", Project: "shop", Egg: "kv", Port: 6379, Names: []string{"kv"}}}},
		{name: "a service without a port has none",
			services: []contract.Service{{Namespace: "default", Project: "shop", Egg: "kv", Names: []string{"kv"}, Networks: []string{"n"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := relayWorkloads(contract.DesiredState{HostID: testHost, Services: tt.services}, "hatch-relay:abc", "/data/relays")
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("relays\n got %+v\nwant %+v", got, tt.want)
			}
			for _, w := range got {
				if !isRelay(w.ID()) || isRelay("default/shop/kv") {
					t.Errorf("isRelay cannot tell relay %s from an egg", w.ID())
				}
			}
		})
	}
}

func sortedByID(ws ...contract.WorkloadSpec) []contract.WorkloadSpec {
	if len(ws) == 2 && ws[0].ID() > ws[1].ID() {
		ws[0], ws[1] = ws[1], ws[0]
	}
	return ws
}

// The agent runs a relay for a service its consumers reach by name, gives
// the ingress its socket, keeps it out of the status report, and removes it
// when the service no longer calls for it.
func TestTheAgentRunsRelaysAndReportsThemNot(t *testing.T) {
	f, cp := newFake(t), newFakeControlPlane()
	w := web(1)
	kv := contract.Service{Namespace: "default", Project: "shop", Egg: "kv", Port: 6379, Hosts: []string{"host-b"},
		Names: []string{"kv"}, Networks: []string{"net-1"}}
	d := desiredState(w)
	d.Services = []contract.Service{kv}
	d.Seal()
	cp.set(d)
	cfg := testConfig(t, f, cp, t.TempDir())
	cfg.RelayImage = "hatch-relay:abc"
	router := &fakeRouter{}
	cfg.Router = router
	startAgent(t, cfg)

	relay := relayWorkloads(d, cfg.RelayImage, filepath.Join(cfg.DataDir, relaysDir))[0]
	eventually(t, "the relay runs, and the report shows the egg alone", func() error {
		if n := running(f.All(), relay); n != 1 {
			return fmt.Errorf("%d relays running", n)
		}
		r, _ := cp.lastReport()
		if r.Version != d.Version || len(r.Containers) != 1 || r.Containers[0].WorkloadID != w.ID() {
			return fmt.Errorf("report: version %q, containers %+v", r.Version, r.Containers)
		}
		return nil
	})
	if fi, err := os.Stat(relay.Binds[0].Source); err != nil || !fi.IsDir() {
		t.Errorf("the relay's socket directory was not made before its container: %v", err)
	}
	table, _ := router.snapshot()
	var sockets []string
	for _, e := range table.Eggs {
		if e.Name == kv.ID() {
			for _, s := range e.Sockets {
				sockets = append(sockets, s.Path)
			}
		}
	}
	if want := relaySocket(filepath.Join(cfg.DataDir, relaysDir), kv); len(sockets) != 1 || sockets[0] != want {
		t.Errorf("the ingress serves sockets %v for kv, want [%s]", sockets, want)
	}

	d2 := desiredState(w)
	cp.set(d2)
	eventually(t, "the relay and its socket directory are removed", func() error {
		for _, c := range f.All() {
			if isRelay(c.WorkloadID) {
				return fmt.Errorf("relay %s still there (%s)", c.ID, c.State)
			}
		}
		if _, err := os.Stat(relay.Binds[0].Source); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("socket directory: %v", err)
		}
		return nil
	})
}

func TestRelaysWithoutARelayImageAreAnError(t *testing.T) {
	f, cp := newFake(t), newFakeControlPlane()
	d := desiredState(web(1))
	d.Services = []contract.Service{{Namespace: "default", Project: "shop", Egg: "kv", Port: 6379, Names: []string{"kv"}, Networks: []string{"n"}}}
	d.Seal()
	cp.set(d)
	startAgent(t, testConfig(t, f, cp, t.TempDir()))
	eventually(t, "a report naming the missing relay image", func() error {
		r, _ := cp.lastReport()
		if r.Version != d.Version || !strings.Contains(strings.Join(r.Errors, "\n"), "no relay image") {
			return fmt.Errorf("report: version %q, errors %v", r.Version, r.Errors)
		}
		return nil
	})
}
