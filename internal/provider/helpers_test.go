package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/desired"
	"github.com/hatchery/hatchery/internal/graph"
	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/seal"
	"github.com/hatchery/hatchery/internal/spec"
	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/store/sqlite"
)

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// env is a Set over a real SQLite store, with hosts that reported.
type env struct {
	t     *testing.T
	st    *sqlite.Store
	box   *seal.Box
	set   *Set
	clock *clock
	log   *zap.Logger
	ids   int
}

var t0 = time.UnixMilli(1_700_000_000_000).UTC()

func newEnv(t *testing.T, hosts ...string) *env {
	t.Helper()
	return newEnvLogging(t, zaptest.NewLogger(t), hosts...)
}

// newEnvLogging is newEnv with a logger of the caller's (quiet ones for
// property tests, which run many).
func newEnvLogging(t *testing.T, log *zap.Logger, hosts ...string) *env {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "hatch.db"), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	box, err := seal.New(bytes.Repeat([]byte{3}, 32))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, st: st, box: box, clock: &clock{now: t0}, log: log}
	e.setWith(func(*desired.Deps) {})
	for _, h := range hosts {
		e.up(h)
	}
	return e
}

// setWith makes the env's Set one over its store, with what edit changes
// of the Deps.
func (e *env) setWith(edit func(d *desired.Deps)) {
	e.t.Helper()
	d := desired.Deps{Desired: e.st, Statuses: e.st, Records: e.st, Events: e.st, Secrets: e.st,
		Fleet: desired.StoreFleet{List: e.st, Identities: e.st, Reports: e.st}, Box: e.box, Logger: e.log, Now: e.clock.Now}
	edit(&d)
	set, err := New(Deps{Deps: d})
	if err != nil {
		e.t.Fatal(err)
	}
	e.set = set
}

// up makes a host report (it is live from then on).
func (e *env) up(host string, containers ...contract.ContainerStatus) {
	e.t.Helper()
	rep, _ := json.Marshal(contract.StatusReport{HostID: host, Time: e.clock.Now(), Containers: containers})
	if _, err := e.st.PutStatus(e.t.Context(), host, rep, e.clock.Now()); err != nil {
		e.t.Fatal(err)
	}
}

// down marks a host down now.
func (e *env) down(host string) {
	e.t.Helper()
	if ok, err := e.st.MarkHostDown(e.t.Context(), host, e.clock.Now().Add(time.Hour), e.clock.Now()); err != nil || !ok {
		e.t.Fatalf("mark %s down: %v, %v", host, ok, err)
	}
}

// reconciler returns a reconciler over the env's store with fast retries.
func (e *env) reconciler(opts Options) *reconciler.Reconciler {
	return &reconciler.Reconciler{
		Resources: e.st,
		Registry:  e.set.Registry(opts),
		Logger:    e.log,
		IDGen: reconciler.IDGeneratorFunc(func() string {
			e.ids++
			return fmt.Sprintf("id%04d", e.ids)
		}),
		Backoff: func() backoff.BackOff {
			return backoff.WithMaxRetries(backoff.NewConstantBackOff(time.Millisecond), 3)
		},
	}
}

// project loads a hatch.yaml and stages its secrets' values, as the server
// does with a plan request: each secret's inputs get the value's fingerprint.
func (e *env) project(project, yaml string, secrets map[string]string) *graph.Graph {
	e.t.Helper()
	p, err := spec.Parse([]byte(yaml), "hatch.yaml", spec.Options{})
	if err != nil {
		e.t.Fatalf("parse: %v", err)
	}
	rs, deps := p.Resources()
	for _, r := range rs {
		if r.Type != resource.Secret {
			continue
		}
		value, ok := secrets[r.Name]
		if !ok {
			e.t.Fatalf("no value for secret %s", r.Name)
		}
		fp, err := e.set.StageSecret(e.t.Context(), project, r.Name, []byte(value))
		if err != nil {
			e.t.Fatal(err)
		}
		r.Inputs[FingerprintInput] = fp
	}
	g, err := graph.New(rs, deps)
	if err != nil {
		e.t.Fatal(err)
	}
	return g
}

// apply reconciles the project to yaml and fails the test on an error.
func (e *env) apply(project, yaml string, secrets map[string]string) reconciler.Result {
	e.t.Helper()
	res, err := e.reconciler(Options{}).Reconcile(e.t.Context(), project, e.project(project, yaml, secrets))
	if err != nil {
		e.t.Fatalf("reconcile %s: %v", project, err)
	}
	return res
}

// destroy reconciles the project to nothing.
func (e *env) destroy(project string, opts Options) {
	e.t.Helper()
	empty, err := graph.New(nil, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.reconciler(opts).Reconcile(e.t.Context(), project, empty); err != nil {
		e.t.Fatalf("destroy %s: %v", project, err)
	}
}

// state returns a host's desired state as its agent gets it: secrets
// opened, with the fleet's peers.
func (e *env) state(host string) contract.DesiredState {
	e.t.Helper()
	stored, err := e.st.DesiredState(e.t.Context(), host)
	if err != nil {
		e.t.Fatal(err)
	}
	list, err := e.st.DesiredPeers(e.t.Context())
	if err != nil {
		e.t.Fatal(err)
	}
	peers, err := store.DecodePeers(list)
	if err != nil {
		e.t.Fatal(err)
	}
	d, err := store.WholeDesiredState(e.box, stored, peers, list.Version)
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

// version returns the version of a host's desired state as its agent gets
// it (its stored state's with the peers').
func (e *env) version(host string) string {
	e.t.Helper()
	return e.state(host).Version
}

// slots returns host -> slots of a workload over the given hosts.
func (e *env) slots(id string, hosts ...string) map[string]int {
	out := map[string]int{}
	for _, h := range hosts {
		if w, ok := e.state(h).Workload(id); ok {
			out[h] = w.Replicas
		}
	}
	return out
}

// record returns a project's deployed record.
func (e *env) record(project, key string) *resource.Deployed {
	e.t.Helper()
	recs, err := e.st.ListResources(e.t.Context(), project)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, r := range recs {
		if r.Key() == key {
			return r
		}
	}
	e.t.Fatalf("%s has no record %s", project, key)
	return nil
}

// events returns every event of a type.
func (e *env) events(typ store.EventType) []store.Event {
	e.t.Helper()
	evs, err := e.st.ListEvents(context.Background(), 0, 1000)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []store.Event
	for _, ev := range evs {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}
