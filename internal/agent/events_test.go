package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/docker/docker/api/types/events"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/converge"
	"github.com/hatchery/hatchery/internal/ingress"
)

// fakeEvents is a Docker event stream the test feeds; every subscription is
// kept, so a test can drop one and watch the agent subscribe again.
type fakeEvents struct {
	mu   sync.Mutex
	subs []fakeSub
}

type fakeSub struct {
	msgs chan events.Message
	errs chan error
	opts events.ListOptions
}

func (f *fakeEvents) Events(ctx context.Context, opts events.ListOptions) (<-chan events.Message, <-chan error) {
	s := fakeSub{msgs: make(chan events.Message), errs: make(chan error, 1), opts: opts}
	f.mu.Lock()
	f.subs = append(f.subs, s)
	f.mu.Unlock()
	return s.msgs, s.errs
}

func (f *fakeEvents) sub(n int) (fakeSub, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.subs) < n {
		return fakeSub{}, false
	}
	return f.subs[n-1], true
}

// fakeRouter records what the agent tells the ingress.
type fakeRouter struct {
	mu      sync.Mutex
	table   ingress.Table
	updates int
	gone    []string
	problem string
}

func (r *fakeRouter) Update(t ingress.Table) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.table = t
	r.updates++
	return nil
}

func (r *fakeRouter) Challenges() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for t := range r.table.Challenges {
		out = append(out, t)
	}
	return out
}

func (r *fakeRouter) HTTPSProblem() string { return "" }

func (r *fakeRouter) updated() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.updates
}

func (r *fakeRouter) SetProblem(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.problem = reason
}

func (r *fakeRouter) currentProblem() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.problem
}

func (r *fakeRouter) Gone(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gone = append(r.gone, id)
}

func (r *fakeRouter) snapshot() (ingress.Table, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.table, slices.Clone(r.gone)
}

func dieEvent(c containers.Container, host string) events.Message {
	attrs := maps.Clone(c.Labels)
	attrs[containers.LabelHost] = host
	return events.Message{Type: events.ContainerEventType, Action: events.ActionDie, Actor: events.Actor{ID: c.ID, Attributes: attrs}}
}

func TestDockerEventsDriveConvergesAndTheIngress(t *testing.T) {
	f := newFake(t)
	d := &countingDocker{Client: f}
	cp, ev, router := newFakeControlPlane(), &fakeEvents{}, &fakeRouter{}
	w := web(2)
	w.Routes = []contract.Route{{Host: "shop.localhost"}}
	cp.set(desiredState(w))
	cfg := testConfig(t, d, cp, t.TempDir())
	cfg.Events, cfg.Router = ev, router
	startAgent(t, cfg)

	eventually(t, "the ingress routes to both replicas", func() error {
		tbl, _ := router.snapshot()
		if len(tbl.Eggs) != 1 || len(tbl.Eggs[0].Backends) != 2 || !tbl.Eggs[0].Backends[0].Healthy {
			return fmt.Errorf("table %+v", tbl)
		}
		return nil
	})
	sub, _ := ev.sub(1)
	if got := sub.opts.Filters.Get("label"); !slices.Contains(got, containers.LabelHost+"="+testHost) {
		t.Errorf("the subscription is not limited to this host: labels %v", got)
	}

	victim := f.All()[0]
	lists := d.listCount()
	sub.msgs <- dieEvent(victim, "other-host") // another host's container: ignored
	sub.msgs <- dieEvent(victim, testHost)
	eventually(t, "the dead container leaves the ingress and a converge runs", func() error {
		_, gone := router.snapshot()
		if !slices.Equal(gone, []string{victim.ID}) || d.listCount() <= lists {
			return fmt.Errorf("gone %v, lists %d (was %d)", gone, d.listCount(), lists)
		}
		return nil
	})

	lists = d.listCount()
	sub.errs <- errors.New("unexpected EOF")
	eventually(t, "the agent subscribes again and converges", func() error {
		if _, ok := ev.sub(2); !ok || d.listCount() <= lists {
			return fmt.Errorf("resubscribed %v, lists %d (was %d)", ok, d.listCount(), lists)
		}
		return nil
	})
}

func TestClassifyEvents(t *testing.T) {
	for action, want := range map[events.Action]containerEvent{
		events.ActionDie:           eventGone,
		events.ActionDestroy:       eventGone,
		events.ActionStart:         eventChanged,
		events.ActionOOM:           eventChanged,
		"health_status: unhealthy": eventChanged,
		"health_status: healthy":   eventChanged,
		events.ActionKill:          eventIgnored, // a kill may be any signal; die follows a real end
		events.ActionExecStart:     eventIgnored,
		events.ActionAttach:        eventIgnored,
	} {
		if got := classify(action); got != want {
			t.Errorf("classify(%q) = %v, want %v", action, got, want)
		}
	}
}

func TestRoutingTable(t *testing.T) {
	withRoutes := web(3)
	withRoutes.Routes = []contract.Route{{Host: "shop.localhost"}, {Host: "api.localhost", PathPrefix: "/v1"}}
	withRoutes.Ports = []contract.PublishedPort{{HostPort: 8088, ContainerPort: 8080}}
	withRoutes.Rollout.DrainTimeout = 3e9
	plain := web(1)
	plain.Egg = "worker"
	portOnly := web(1)
	portOnly.Egg = "db"
	portOnly.Port = 0
	portOnly.Ports = []contract.PublishedPort{{HostPort: 5432, ContainerPort: 5432}}
	desired := desiredState(withRoutes, plain, portOnly)

	ctr := func(w contract.WorkloadSpec, id string, st contract.ContainerState, healthy bool) containers.Container {
		c := containers.FromLabels(id, "n-"+id, containers.Labels(testHost, w, 0, "any"))
		c.State, c.Healthy = st, healthy
		if id != "" && id != "c4" { // c4 has no address yet
			c.IP = "10.0.0." + id[1:]
		}
		return c
	}
	foreign := ctr(withRoutes, "c9", contract.StateRunning, true)
	foreign.Labels = maps.Clone(foreign.Labels)
	foreign.Labels[containers.LabelHost] = "host-b"
	placeholder := ctr(withRoutes, "", contract.StateBuilding, false)
	actual := []containers.Container{
		ctr(withRoutes, "c1", contract.StateRunning, true),
		ctr(withRoutes, "c2", contract.StateRunning, false), // booting: a backend, not in the pool
		ctr(withRoutes, "c3", contract.StateCrashed, false), // not running: no backend
		ctr(withRoutes, "c4", contract.StateRunning, true),  // no address yet
		placeholder, foreign,
		ctr(plain, "c5", contract.StateRunning, true),
		ctr(portOnly, "c6", contract.StateRunning, true),
	}
	got := routingTable(desired, actual, converge.NewHistory(), "/relays")
	want := ingress.Table{Eggs: []ingress.Egg{
		{
			Name:         "default/shop/web",
			Routes:       []ingress.Route{{Host: "shop.localhost"}, {Host: "api.localhost", PathPrefix: "/v1"}},
			Ports:        []ingress.Port{{Published: 8088, Target: 8080}},
			Port:         8080,
			DrainTimeout: 3e9,
			Backends: []ingress.Backend{
				{ContainerID: "c1", Addr: "10.0.0.1:8080", Healthy: true},
				{ContainerID: "c2", Addr: "10.0.0.2:8080", Healthy: false},
			},
		},
		{
			Name:         "default/shop/db",
			Ports:        []ingress.Port{{Published: 5432, Target: 5432}},
			DrainTimeout: contract.DefaultDrainTimeout,
			Backends:     []ingress.Backend{{ContainerID: "c6", Addr: "10.0.0.6:5432", Healthy: true}},
		},
	}}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("table\n %+v\nwant\n %+v", got, want)
	}
}
