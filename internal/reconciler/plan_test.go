package reconciler_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/resource"
)

func TestPlanShowsEachActionWithoutSideEffects(t *testing.T) {
	e := newEnv(t)
	e.apply(t, mustGraph(t, []*resource.Desired{
		volume("pgdata"),
		egg("db", map[string]any{"image": "postgres:16", "v": "${volume/pgdata.name}"}),
		egg("web", map[string]any{"image": "web:1", "db": "${egg/db.address}"}),
		egg("old", nil),
	}))
	before := e.records(t, project)
	e.world.ResetCalls()

	// db changes image (an update, whose outputs are assumed kept), web is
	// unchanged, cache is new and api references it: api's input is unknown
	// until cache exists.
	desired := []*resource.Desired{
		volume("pgdata"),
		egg("db", map[string]any{"image": "postgres:17", "v": "${volume/pgdata.name}"}),
		egg("web", map[string]any{"image": "web:1", "db": "${egg/db.address}"}),
		egg("cache", map[string]any{"image": "redis"}),
		egg("api", map[string]any{"image": "api:1", "cache": "redis://${egg/cache.address}", "db": "${egg/db.address}"}),
	}
	plan, err := e.r.Plan(context.Background(), project, mustGraph(t, desired))
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Key     string
		ID      string
		Action  reconciler.Action
		Changed []string
		Unknown []string
	}
	var got []row
	for _, c := range plan.Changes {
		got = append(got, row{c.Key, c.ID, c.Action, c.Changed, c.Unknown})
	}
	want := []row{
		{"egg/cache", "", reconciler.ActionCreate, nil, nil},
		{"volume/pgdata", before["volume/pgdata"].ID, reconciler.ActionUnchanged, nil, nil},
		{"egg/db", before["egg/db"].ID, reconciler.ActionUpdate, []string{"image"}, nil},
		{"egg/api", "", reconciler.ActionCreate, nil, []string{"cache"}},
		{"egg/web", before["egg/web"].ID, reconciler.ActionUnchanged, nil, nil},
		{"egg/old", before["egg/old"].ID, reconciler.ActionDelete, nil, nil},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("plan:\n got %+v\nwant %+v", got, want)
	}
	api := plan.Changes[3]
	if api.Inputs["cache"] != "redis://${egg/cache.address}" {
		t.Fatalf("api's unknown input = %v, want it as written", api.Inputs["cache"])
	}
	if api.Inputs["db"] != before["egg/db"].Outputs["address"] {
		t.Fatalf("api's known input = %v, want db's address resolved", api.Inputs["db"])
	}
	if !plan.HasChanges() || plan.Count(reconciler.ActionCreate) != 2 {
		t.Fatalf("plan counts: has changes %v, creates %d", plan.HasChanges(), plan.Count(reconciler.ActionCreate))
	}
	if n := e.world.CountCalls(); n != 0 {
		t.Fatalf("Plan made %d provider calls", n)
	}
	if after := e.records(t, project); !reflect.DeepEqual(after, before) {
		t.Fatal("Plan changed the records")
	}
}

func TestPlanAgreesWithReconcile(t *testing.T) {
	e := newEnv(t)
	e.apply(t, mustGraph(t, append(shop("web:1"), egg("gone", nil))))
	desired := shop("web:2")
	desired[3] = egg("worker", map[string]any{"image": "worker:2"})
	g := mustGraph(t, append(desired, egg("extra", nil)))
	plan, err := e.r.Plan(context.Background(), project, g)
	if err != nil {
		t.Fatal(err)
	}
	res := e.apply(t, g)
	for _, c := range plan.Changes {
		rr, ok := res.Get(c.Key)
		if !ok || rr.Action != c.Action || !reflect.DeepEqual(rr.Changed, c.Changed) {
			t.Errorf("%s: planned %s %v, reconciled %s %v", c.Key, c.Action, c.Changed, rr.Action, rr.Changed)
		}
	}
	if plan.Count(reconciler.ActionDelete) != 1 || plan.Count(reconciler.ActionUpdate) != 2 || plan.Count(reconciler.ActionCreate) != 1 {
		t.Fatalf("plan %+v, want 1 create, 2 updates and 1 delete", plan)
	}
	if len(plan.Changes) != len(res.Resources) {
		t.Fatalf("plan has %d changes, result %d resources", len(plan.Changes), len(res.Resources))
	}
	plan, err = e.r.Plan(context.Background(), project, g)
	if err != nil || plan.HasChanges() {
		t.Fatalf("plan after apply: %+v, %v; want no changes", plan, err)
	}
}

func TestPlanRecreatesPendingWithTheirID(t *testing.T) {
	e := newEnv(t)
	pending := &resource.Deployed{ID: "id-7", Type: resource.Egg, Name: "web", Pending: true}
	if err := e.store.PutResource(context.Background(), project, pending); err != nil {
		t.Fatal(err)
	}
	plan, err := e.r.Plan(context.Background(), project, mustGraph(t, []*resource.Desired{egg("web", nil)}))
	if err != nil {
		t.Fatal(err)
	}
	if c := plan.Changes[0]; c.Action != reconciler.ActionCreate || c.ID != "id-7" {
		t.Fatalf("change %+v, want a create reusing id-7", c)
	}
}
