package resource

import (
	"errors"
	"reflect"
	"testing"
)

func TestRefsAndResolve(t *testing.T) {
	inputs := map[string]any{
		"env": map[string]any{
			"DATABASE_URL": "postgres://app@${egg/db.address}/shop",
			"LITERAL":      "cost: $${HOME}",
		},
		"hosts":    "${egg/db.hosts}",
		"volumes":  []any{"${volume/pgdata.name}:/data"},
		"replicas": 3,
	}
	refs, err := Refs(inputs)
	if err != nil {
		t.Fatal(err)
	}
	want := []Ref{{"egg/db", "address"}, {"egg/db", "hosts"}, {"volume/pgdata", "name"}}
	if !reflect.DeepEqual(refs, want) {
		t.Fatalf("Refs = %v, want %v", refs, want)
	}

	outputs := map[Ref]any{
		{"egg/db", "address"}:     "db:5432",
		{"egg/db", "hosts"}:       []any{"host-a"},
		{"volume/pgdata", "name"}: "hatch-shop-pgdata-1a2b",
	}
	got, err := Resolve(inputs, func(r Ref) (any, error) {
		v, ok := outputs[r]
		if !ok {
			return nil, errors.New("missing " + r.String())
		}
		return v, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wantResolved := map[string]any{
		"env": map[string]any{
			"DATABASE_URL": "postgres://app@db:5432/shop",
			"LITERAL":      "cost: ${HOME}",
		},
		"hosts":    []any{"host-a"},
		"volumes":  []any{"hatch-shop-pgdata-1a2b:/data"},
		"replicas": 3,
	}
	if !reflect.DeepEqual(got, wantResolved) {
		t.Fatalf("Resolve = %#v\nwant %#v", got, wantResolved)
	}
	// The input map is not modified.
	if inputs["hosts"] != "${egg/db.hosts}" {
		t.Fatalf("Resolve modified its input: %v", inputs["hosts"])
	}
}

func TestTemplated(t *testing.T) {
	for _, tc := range []struct {
		inputs map[string]any
		want   bool
	}{
		{map[string]any{"a": "plain", "n": 3, "l": []any{"x"}}, false},
		{map[string]any{"a": map[string]any{"b": "${egg/db.address}"}}, true},
		{map[string]any{"l": []any{"cost: $${HOME}"}}, true}, // the escape must be undone too
		{nil, false},
	} {
		if got := Templated(tc.inputs); got != tc.want {
			t.Errorf("Templated(%v) = %v, want %v", tc.inputs, got, tc.want)
		}
	}
}

func TestParseRefErrors(t *testing.T) {
	for _, s := range []string{"", "egg", "egg/db", "egg/db.", "/db.x", "egg/.x"} {
		if _, err := ParseRef(s); err == nil {
			t.Errorf("ParseRef(%q) succeeded, want an error", s)
		}
	}
	r, err := ParseRef("route/api.localhost/v1.x")
	if err != nil || r.Key != "route/api.localhost/v1" || r.Output != "x" {
		t.Fatalf("ParseRef with dots in the name = %v, %v", r, err)
	}
	if _, err := Refs(map[string]any{"a": "${egg/db.address"}); err == nil {
		t.Fatal("an unclosed reference was accepted")
	}
}

func TestEqualNormalisesNumbers(t *testing.T) {
	a := map[string]any{"replicas": 3, "env": map[string]any{"A": "1"}}
	b := map[string]any{"env": map[string]any{"A": "1"}, "replicas": float64(3)}
	if !Equal(a, b) {
		t.Fatal("3 and 3.0 should compare equal")
	}
	if Equal(a, map[string]any{"replicas": 4, "env": map[string]any{"A": "1"}}) {
		t.Fatal("different values compared equal")
	}
	if !Equal(nil, map[string]any{}) {
		t.Fatal("nil and empty maps should compare equal")
	}
}

// A list written with one reference to a list output is, resolved, a list of
// that output's items: the inputs keep their shape (package inputs relies on
// it), while a whole reference elsewhere keeps the output's own value.
func TestResolveSplicesListOutputsIntoLists(t *testing.T) {
	inputs := map[string]any{
		"beside": []any{map[string]any{"egg": "db", "hosts": []any{"${egg/db.hosts}"}}},
		"mixed":  []any{"a", "${egg/db.hosts}", "${egg/db.address}", "b", "x-${egg/db.hosts}"},
		"whole":  "${egg/db.hosts}",
		"none":   []any{"${egg/none.hosts}"},
	}
	outputs := map[Ref]any{
		{"egg/db", "hosts"}:   []any{"h1", "h2"},
		{"egg/db", "address"}: "db:5432",
		{"egg/none", "hosts"}: []string{},
	}
	got, err := Resolve(inputs, func(r Ref) (any, error) { return outputs[r], nil })
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"beside": []any{map[string]any{"egg": "db", "hosts": []any{"h1", "h2"}}},
		"mixed":  []any{"a", "h1", "h2", "db:5432", "b", `x-["h1","h2"]`},
		"whole":  []any{"h1", "h2"},
		"none":   []any{},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Resolve = %#v\nwant %#v", got, want)
	}
	// "$${" starts an escape, not a reference: never spliced.
	got, err = Resolve(map[string]any{"l": []any{"$${egg/db.hosts}"}}, func(r Ref) (any, error) { return outputs[r], nil })
	if err != nil || !reflect.DeepEqual(got["l"], []any{"${egg/db.hosts}"}) {
		t.Fatalf("escaped: %#v, %v", got, err)
	}
}
