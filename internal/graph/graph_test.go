package graph

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/resource"
)

func egg(name string, inputs map[string]any) *resource.Desired {
	return &resource.Desired{Type: resource.Egg, Name: name, Inputs: inputs}
}

func keys(rs []*resource.Desired) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Key()
	}
	return out
}

func TestNewOrdersParentsFirstAndDerivesReferenceEdges(t *testing.T) {
	g, err := New([]*resource.Desired{
		egg("web", map[string]any{"env": map[string]any{"DB": "${egg/db.address}"}}),
		egg("db", map[string]any{"volumes": []any{"${volume/pgdata.name}:/data"}}),
		{Type: resource.Volume, Name: "pgdata"},
		egg("worker", nil),
	}, []*resource.Dependency{
		{Parent: "egg/db", Child: "egg/web", Condition: resource.ConditionHealthy},
		{Parent: "egg/db", Child: "egg/worker"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keys(g.Resources()), []string{"volume/pgdata", "egg/db", "egg/web", "egg/worker"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("order = %v, want %v", got, want)
	}
	if got, want := keys(g.LeafResources()), []string{"egg/web", "egg/worker"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("leaves = %v, want %v", got, want)
	}
	// The explicit healthy condition wins over the reference's created one,
	// and the two give one edge, not two.
	deps := g.DependenciesOf("egg/web")
	if len(deps) != 1 || deps[0].Parent != "egg/db" || deps[0].Condition != resource.ConditionHealthy {
		t.Fatalf("web's dependencies = %+v", deps)
	}
	if got := keys(g.ParentResources("egg/db")); !reflect.DeepEqual(got, []string{"volume/pgdata"}) {
		t.Fatalf("db's parents = %v", got)
	}
	if got := g.Children("egg/db"); !reflect.DeepEqual(got, []string{"egg/web", "egg/worker"}) {
		t.Fatalf("db's children = %v", got)
	}
}

func TestNewReportsEveryProblem(t *testing.T) {
	_, err := New([]*resource.Desired{
		egg("web", map[string]any{"url": "${egg/api.address}"}),
		egg("api", nil),
		egg("api", nil),
		egg("cache", map[string]any{"x": "${egg/nowhere.address}"}),
	}, []*resource.Dependency{
		{Parent: "egg/web", Child: "egg/api"},
		{Parent: "secret/key", Child: "egg/web"},
	})
	if err == nil {
		t.Fatal("New accepted a bad graph")
	}
	var dup *DuplicateError
	var missing *MissingError
	var cycle *CycleError
	if !errors.As(err, &dup) || dup.Key != "egg/api" {
		t.Errorf("no duplicate reported for egg/api: %v", err)
	}
	if !errors.As(err, &missing) {
		t.Errorf("no missing resource reported: %v", err)
	}
	if !errors.As(err, &cycle) {
		t.Fatalf("no cycle reported: %v", err)
	}
	if got := strings.Join(cycle.Path, " -> "); got != "egg/api -> egg/web -> egg/api" {
		t.Errorf("cycle path = %q", got)
	}
	for _, want := range []string{
		"egg/api is defined twice",
		"egg/cache references ${egg/nowhere.address}, but egg/nowhere is not defined",
		"egg/web depends on secret/key, which is not defined",
		"dependency cycle: egg/api -> egg/web -> egg/api",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestCycleWithoutLeavesIsFound(t *testing.T) {
	// No resource is free of children here, so a walk from the leaves would see
	// nothing at all: New must refuse it rather than return an empty graph.
	_, err := New([]*resource.Desired{egg("a", nil), egg("b", nil), egg("c", nil)}, []*resource.Dependency{
		{Parent: "egg/b", Child: "egg/a"},
		{Parent: "egg/c", Child: "egg/b"},
		{Parent: "egg/a", Child: "egg/c"},
	})
	var cycle *CycleError
	if !errors.As(err, &cycle) || len(cycle.Path) != 4 || cycle.Path[0] != cycle.Path[3] {
		t.Fatalf("err = %v, want a 3-cycle", err)
	}
}
