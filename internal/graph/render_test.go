package graph

import (
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/resource"
)

func shopGraph(t *testing.T) *Graph {
	t.Helper()
	g, err := New([]*resource.Desired{
		{Type: resource.Route, Name: "shop.localhost/v1", Inputs: map[string]any{"hosts": "${egg/web.hosts}"}},
		egg("web", map[string]any{"env": map[string]any{"DB": "${egg/db.address}"}}),
		egg("db", map[string]any{"volumes": []any{"${volume/pgdata.name}"}}),
		egg("migrate", nil),
		{Type: resource.Volume, Name: "pgdata"},
		{Type: resource.Secret, Name: "key"},
	}, []*resource.Dependency{
		{Parent: "egg/db", Child: "egg/web", Condition: resource.ConditionHealthy},
		{Parent: "egg/migrate", Child: "egg/web", Condition: resource.ConditionCompleted},
		{Parent: "secret/key", Child: "egg/web"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestTextListsResourcesInOrderWithTheirParents(t *testing.T) {
	want := `egg/migrate
secret/key
volume/pgdata
egg/db                   <- volume/pgdata
egg/web                  <- egg/db (healthy), egg/migrate (completed), secret/key
route/shop.localhost/v1  <- egg/web
`
	if got := shopGraph(t).Text(); got != want {
		t.Errorf("Text() =\n%s\nwant\n%s", got, want)
	}
}

func TestTextOfAGraphWithoutEdges(t *testing.T) {
	g, err := New([]*resource.Desired{egg("b", nil), egg("a", nil)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := g.Text(); got != "egg/a\negg/b\n" {
		t.Errorf("Text() = %q", got)
	}
}

func TestDOT(t *testing.T) {
	got := shopGraph(t).DOT(`my "shop"`)
	for _, line := range []string{
		`digraph "my \"shop\"" {`,
		`  "egg/db" [shape=box];`,
		`  "volume/pgdata" [shape=cylinder];`,
		`  "secret/key" [shape=note];`,
		`  "route/shop.localhost/v1" [shape=cds];`,
		`  "volume/pgdata" -> "egg/db";`,
		`  "egg/db" -> "egg/web" [label="healthy"];`,
		`  "egg/migrate" -> "egg/web" [label="completed"];`,
		`  "secret/key" -> "egg/web";`,
		`  "egg/web" -> "route/shop.localhost/v1";`,
	} {
		if !strings.Contains(got, line+"\n") {
			t.Errorf("DOT misses the line %s\n%s", line, got)
		}
	}
	if !strings.HasSuffix(got, "}\n") {
		t.Errorf("DOT does not close the graph:\n%s", got)
	}
	// One node statement per resource and one arrow per edge, no more.
	if n := strings.Count(got, "[shape="); n != 6 {
		t.Errorf("%d nodes, want 6", n)
	}
	if n := strings.Count(got, " -> "); n != 5 {
		t.Errorf("%d edges, want 5", n)
	}
}
