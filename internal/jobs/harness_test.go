package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/desired"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/seal"
	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/store/postgres"
	"github.com/hatchery/hatchery/internal/store/sqlite"
	"github.com/hatchery/hatchery/internal/testutil/pgtest"
)

// testStore is what the tests need of a real store.
type testStore interface {
	store.Runs
	store.ScheduleStates
	store.Leases
	store.Events
	store.DesiredStates
	store.Statuses
	store.Members
	store.SecretValues
	store.RegistryLogins
	ListProjects(ctx context.Context) ([]string, error)
	ListResources(ctx context.Context, project string) ([]*resource.Deployed, error)
	PutResource(ctx context.Context, project string, r *resource.Deployed) error
	MarkHostDown(ctx context.Context, id string, notSeenSince, at time.Time) (bool, error)
}

// clock is the tests' clock: the wall clock's (moving) if start is zero,
// else one that stands at start and moves only when advanced, so a test's
// ticks do not depend on how fast this machine runs it. It never goes
// behind the wall clock by much: the SQLite store checks fences by the
// wall clock, and leases taken by this one (30 s) must not have expired by
// it while a test runs.
type clock struct {
	mu     sync.Mutex // guards offset
	start  time.Time
	offset time.Duration
}

// standingClock is a clock standing half a second past the wall clock's
// last whole second.
func standingClock() *clock {
	return &clock{start: time.Now().Truncate(time.Second).Add(500 * time.Millisecond)}
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.start.IsZero() {
		return time.Now().Add(c.offset)
	}
	return c.start.Add(c.offset)
}

// advance moves the clock on by d.
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

// harness is a jobs service over a real store and the hosts' desired
// states, without its loop: the tests run its passes.
type harness struct {
	st     testStore
	states *desired.States
	svc    *Service
	clock  *clock
	box    *seal.Box
}

const project = "default/shop"

func newSQLite(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "hatch.db"), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// onStores runs test on a harness over SQLite and over PostgreSQL.
func onStores(t *testing.T, test func(t *testing.T, h *harness)) {
	t.Run("sqlite", func(t *testing.T) { test(t, harnessOn(t, newSQLite(t), "srv-a", standingClock())) })
	t.Run("postgres", func(t *testing.T) {
		test(t, harnessOn(t, newPostgres(t, pgtest.Shared(t).NewSchema(t)), "srv-a", standingClock()))
	})
}

func newPostgres(t *testing.T, url string) *postgres.Store {
	t.Helper()
	st, err := postgres.Open(t.Context(), url, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// harnessOn is a harness over st: a second one over the same store is
// another server.
func harnessOn(t *testing.T, st testStore, serverID string, c *clock) *harness {
	t.Helper()
	log := zaptest.NewLogger(t)
	box, err := seal.New(bytes.Repeat([]byte{1}, 32))
	if err != nil {
		t.Fatal(err)
	}
	states, err := desired.New(desired.Deps{Desired: st, Statuses: st, Records: st, Events: st, Secrets: st,
		Fleet: desired.StoreFleet{List: st, Identities: st, Reports: st}, Box: box, Logger: log, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Tick, cfg.LeaseWait = 100*time.Millisecond, 500*time.Millisecond
	svc, err := New(cfg, Deps{Runs: st, Schedules: st, Leases: st, Events: st, Records: st, Hosts: st, Desired: states,
		Sources:  []Source{EggSchedules{Projects: st, Skipped: func(p, e string, err error) { t.Errorf("egg %s skipped: %v", e, err) }}},
		ServerID: serverID, Logger: log, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	return &harness{st: st, states: states, svc: svc, clock: c, box: box}
}

// report stores a status report of host (which makes it up), with runs.
func (h *harness) report(t *testing.T, host string, runs ...contract.RunStatus) {
	t.Helper()
	b, err := json.Marshal(contract.StatusReport{HostID: host, Time: h.clock.now(), Runs: runs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.st.PutStatus(t.Context(), host, b, h.clock.now()); err != nil {
		t.Fatal(err)
	}
}

// egg records a deployed egg of the project with inputs.
func (h *harness) egg(t *testing.T, name string, inputs map[string]any) *resource.Deployed {
	t.Helper()
	r := &resource.Deployed{ID: "id-" + name, Type: resource.Egg, Name: name, Inputs: inputs,
		Outputs: map[string]any{"address": name, "hosts": []any{}}}
	if err := h.st.PutResource(t.Context(), project, r); err != nil {
		t.Fatal(err)
	}
	return r
}

// scheduled is the inputs of an egg with a schedule.
func scheduled(sched map[string]any) map[string]any {
	return map[string]any{"image": "app:1", "command": []any{"report"}, "schedule": sched}
}

// pass runs one scheduler pass (in Service.pass's order), failing on any
// step's error.
func (h *harness) pass(t *testing.T) {
	t.Helper()
	if err := h.svc.recordProgress(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.decideTicks(t.Context(), time.Time{}); err != nil {
		t.Fatalf("decide ticks: %v", err)
	}
	for _, step := range []func(context.Context) error{h.svc.deliverPending, h.svc.releaseEnded} {
		if err := step(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// runs lists the project's runs, oldest first.
func (h *harness) runs(t *testing.T) []store.Run {
	t.Helper()
	runs, err := h.st.ListRuns(t.Context(), store.RunFilter{Project: project})
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(runs)
	return runs
}

// desiredState returns host's desired state.
func (h *harness) desiredState(t *testing.T, host string) contract.DesiredState {
	t.Helper()
	st, err := h.st.DesiredState(t.Context(), host)
	if err != nil {
		t.Fatal(err)
	}
	d, err := store.DecodeDesiredState(h.box, st)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// desiredRuns returns the runs in host's desired state.
func (h *harness) desiredRuns(t *testing.T, host string) []contract.Run {
	t.Helper()
	return h.desiredState(t, host).Runs
}

// events returns the types of the events recorded.
func (h *harness) events(t *testing.T) []store.Event {
	t.Helper()
	evs, err := h.st.ListEvents(t.Context(), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func hasEvent(evs []store.Event, typ store.EventType) bool {
	return slices.ContainsFunc(evs, func(e store.Event) bool { return e.Type == typ })
}
