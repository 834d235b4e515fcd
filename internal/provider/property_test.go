package provider

import (
	"flag"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"pgregory.net/rapid"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/desired"
	"github.com/hatchery/hatchery/internal/resource"
)

// TestPlacementInvariantsOverRandomHistories applies random projects to a
// random fleet whose hosts go down and come back, rescheduling as the control
// plane does, and checks after every step that each egg has exactly its
// replicas placed whenever a host is live, that nothing runs on a host gone
// past the reschedule delay, that every stored version is its content's, and
// that applying again a project that landed writes nothing. Every host's
// Services and Peers are those its hosts' workloads imply, however the
// replicas moved, and every egg with a port is reached by name on a host
// exactly on the networks it shares with a workload there.
func TestPlacementInvariantsOverRandomHistories(t *testing.T) {
	// Each history runs on a SQLite store of its own, which the race detector
	// slows down a lot: 20 histories unless -rapid.checks says otherwise.
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == f.DefValue {
		if err := f.Value.Set("20"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Value.Set(f.DefValue) })
	}
	rapid.Check(t, func(rt *rapid.T) {
		hosts := make([]string, rapid.IntRange(1, 4).Draw(rt, "hosts"))
		for i := range hosts {
			hosts[i] = fmt.Sprintf("h%d", i+1)
		}
		e := newEnvLogging(t, zap.NewNop(), hosts...)
		defer e.st.Close()
		eggs := rapid.SliceOfNDistinct(rapid.SampledFrom([]string{"a", "b", "c"}), 1, 3, rapid.ID[string]).Draw(rt, "eggs")
		down := map[string]bool{}
		var yaml string
		landed := false // whether the last apply succeeded
		for step := range rapid.IntRange(1, 8).Draw(rt, "steps") {
			switch rapid.IntRange(0, 2).Draw(rt, fmt.Sprintf("op%d", step)) {
			case 0: // apply the project with new replica counts
				var b strings.Builder
				b.WriteString("project: p\neggs:\n")
				// a is on both networks, so any egg may use its address.
				for _, egg := range eggs {
					extra := ", networks: [default, back]"
					switch {
					case egg == "a": // routed: served by every host
						extra += ", port: 80, routes: [a.localhost]"
					default:
						extra = ", networks: " + rapid.SampledFrom([]string{"[default]", "[back]", "[default, back]"}).Draw(rt, "networks")
						if rapid.Bool().Draw(rt, "port") {
							extra += ", port: 9000"
						}
						if slices.Contains(eggs, "a") && rapid.Bool().Draw(rt, "uses-a") {
							extra += `, env: {A: "${a.address}"}`
						}
					}
					fmt.Fprintf(&b, "  %s: {image: %s:1, replicas: %d%s}\n", egg, egg, rapid.IntRange(0, 5).Draw(rt, "replicas"), extra)
				}
				b.WriteString("networks:\n  back: {}\n")
				yaml = b.String()
				_, err := e.reconciler(Options{}).Reconcile(t.Context(), "default/p", e.project("default/p", yaml, nil))
				if err != nil && len(down) < len(hosts) {
					rt.Fatalf("apply with a live host: %v", err)
				}
				landed = err == nil
			case 1: // a host goes down and stays down past the delay
				h := rapid.SampledFrom(hosts).Draw(rt, "down")
				if !down[h] {
					e.down(h)
					down[h] = true
				}
				e.clock.Advance(3 * time.Second)
			case 2: // a host comes back
				h := rapid.SampledFrom(hosts).Draw(rt, "up")
				e.up(h)
				delete(down, h)
			}
			recs := mustList(t, e, "default/p")
			changed, err := e.set.Reschedule(t.Context(), "default/p", recs)
			if err != nil && len(down) < len(hosts) {
				rt.Fatalf("reschedule with a live host: %v", err)
			}
			for _, r := range changed {
				if err := e.st.PutResource(t.Context(), "default/p", r); err != nil {
					t.Fatal(err)
				}
			}
			checkPlacement(rt, e, hosts, down, mustList(t, e, "default/p"))
		}
		if !landed || len(down) == len(hosts) {
			return // applying again may rightly finish what failed
		}
		versions := make([]string, len(hosts))
		for i, h := range hosts {
			versions[i] = e.version(h)
		}
		if _, err := e.reconciler(Options{}).Reconcile(t.Context(), "default/p", e.project("default/p", yaml, nil)); err != nil {
			rt.Fatalf("re-apply: %v", err)
		}
		for i, h := range hosts {
			if v := e.version(h); v != versions[i] {
				rt.Fatalf("re-applying the same project rewrote %s", h)
			}
		}
	})
}

func checkPlacement(rt *rapid.T, e *env, hosts []string, down map[string]bool, recs []*resource.Deployed) {
	anyLive := len(down) < len(hosts)
	workloads := map[string][]contract.WorkloadSpec{}
	for _, h := range hosts {
		workloads[h] = e.state(h).Workloads
	}
	services := desired.ServicesByHost(workloads)
	checkReachedByName(rt, workloads, services)
	for _, h := range hosts {
		d := e.state(h)
		if !reflect.DeepEqual(d.Services, services[h]) {
			rt.Fatalf("%s serves %+v, its hosts' workloads imply %+v", h, d.Services, services[h])
		}
		if len(d.Workloads) == 0 && len(d.Peers) == 0 {
			continue // never written yet: nothing placed anywhere so far
		}
		if len(d.Peers) != len(hosts) {
			rt.Fatalf("%s lists %d peers, want every host: %+v", h, len(d.Peers), d.Peers)
		}
		for _, p := range d.Peers {
			var ids []string
			var streams []contract.Reach
			for _, s := range services[p.HostID] {
				if ports := s.StreamPorts(); len(ports) > 0 {
					ids = append(ids, s.ID())
					streams = append(streams, contract.Reach{Workload: s.ID(), Ports: ports})
				}
			}
			if !slices.Equal(p.Reaches, ids) || !reflect.DeepEqual(p.Streams, streams) {
				rt.Fatalf("in %s's state, peer %s reaches %v by %+v, want %v by %+v", h, p.HostID, p.Reaches, p.Streams, ids, streams)
			}
		}
	}
	for _, h := range hosts {
		stored, err := e.st.DesiredState(e.t.Context(), h)
		if err != nil {
			rt.Fatal(err)
		}
		d := e.state(h)
		if stored.Version != "" && stored.Version != d.ContentVersion() {
			rt.Fatalf("%s: stored version %s is not its content's %s", h, stored.Version, d.ContentVersion())
		}
		if stored.Version != "" && d.Version != d.ComputeVersion() {
			rt.Fatalf("%s: the version it gets, %s, is not its whole state's %s", h, d.Version, d.ComputeVersion())
		}
		for _, w := range d.Workloads {
			if down[h] && anyLive && w.Replicas > 0 {
				rt.Fatalf("%s is down past the delay but runs %d of %s", h, w.Replicas, w.Egg)
			}
		}
	}
	for _, r := range recs {
		if r.Type != resource.Egg || r.Pending {
			continue
		}
		want := resource.Int(r.Inputs["replicas"])
		got := 0
		var on []string
		for _, h := range hosts {
			if w, ok := e.state(h).Workload("default/p/" + r.Name); ok {
				got += w.Replicas
				on = append(on, h)
				if w.Replicas == 0 {
					rt.Fatalf("%s has an entry with no replica on %s", r.Name, h)
				}
			}
		}
		if got > want || anyLive && got != want {
			rt.Fatalf("egg %s: %d replicas placed, want %d (down: %v)", r.Name, got, want, down)
		}
		if !slices.Equal(on, desired.HostsOf(r.Outputs)) {
			rt.Fatalf("egg %s runs on %v but its hosts output says %v", r.Name, on, desired.HostsOf(r.Outputs))
		}
	}
}

// projectNetworks are the networks the random projects of
// TestPlacementInvariantsOverRandomHistories put eggs on.
var projectNetworks = []string{"default", "back"}

// checkReachedByName checks services against the rule, restated from the
// workloads: on each host, an egg of default/p with a port and a replica
// somewhere is reached by its name on every network of the host that it
// shares with a workload running there, and a service is reached on no
// other network.
func checkReachedByName(rt *rapid.T, workloads map[string][]contract.WorkloadSpec, services map[string][]contract.Service) {
	// joins[egg] = the project networks it is on (same on every host).
	joins := map[string][]string{}
	port := map[string]int{}
	for host, ws := range workloads {
		for _, w := range ws {
			if w.Replicas <= 0 {
				continue
			}
			port[w.Egg] = w.Port
			for _, n := range projectNetworks {
				if slices.Contains(w.Networks, contract.NetworkName(host, "default", "p", n)) && !slices.Contains(joins[w.Egg], n) {
					joins[w.Egg] = append(joins[w.Egg], n)
				}
			}
		}
	}
	for host, ws := range workloads {
		want := map[string][]string{} // egg -> Docker networks of host it is reached on
		for _, w := range ws {
			if w.Replicas <= 0 {
				continue
			}
			for egg, nets := range joins {
				for _, n := range nets {
					docker := contract.NetworkName(host, "default", "p", n)
					if port[egg] > 0 && slices.Contains(w.Networks, docker) && !slices.Contains(want[egg], docker) {
						want[egg] = append(want[egg], docker)
					}
				}
			}
		}
		got := map[string][]string{}
		for _, s := range services[host] {
			if len(s.Networks) > 0 {
				if len(s.Names) == 0 || s.Names[0] != s.Egg {
					rt.Fatalf("on %s, %s is reached on %v by the names %v", host, s.Egg, s.Networks, s.Names)
				}
				got[s.Egg] = s.Networks
			}
		}
		for egg := range want {
			slices.Sort(want[egg])
		}
		if !reflect.DeepEqual(got, want) && (len(got) > 0 || len(want) > 0) {
			rt.Fatalf("on %s, eggs are reached by name on %v, want %v", host, got, want)
		}
	}
}
