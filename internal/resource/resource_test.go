package resource

import (
	"encoding/json"
	"reflect"
	"testing"
)

// A clone shares nothing with its original: changing one's inputs, nested
// outputs or parents leaves the other as it was.
func TestDeployedCloneIsDeep(t *testing.T) {
	orig := &Deployed{ID: "1", Type: Egg, Name: "web", Source: "sha256:x", Pending: true,
		Inputs:  map[string]any{"env": map[string]any{"A": "1"}, "ports": []any{80}},
		Outputs: map[string]any{"hosts": []any{"h1"}},
		Parents: []string{"volume/data"},
	}
	c := orig.Clone()
	if !reflect.DeepEqual(c, orig) {
		t.Fatalf("clone %+v, want %+v", c, orig)
	}
	c.Inputs["env"].(map[string]any)["A"] = "2"
	c.Inputs["ports"].([]any)[0] = 81
	c.Outputs["hosts"].([]any)[0] = "h2"
	c.Parents[0] = "network/default"
	if orig.Inputs["env"].(map[string]any)["A"] != "1" || orig.Inputs["ports"].([]any)[0] != 80 ||
		orig.Outputs["hosts"].([]any)[0] != "h1" || orig.Parents[0] != "volume/data" {
		t.Fatalf("changing the clone changed the original: %+v", orig)
	}
	if (*Deployed)(nil).Clone() != nil {
		t.Fatal("nil.Clone() is not nil")
	}
}

func TestSplitKey(t *testing.T) {
	for key, want := range map[string]struct {
		typ  Kind
		name string
		ok   bool
	}{
		"egg/web":                {Egg, "web", true},
		"route/api.localhost/v1": {Route, "api.localhost/v1", true}, // a route's name holds slashes
		"egg":                    {"", "", false},
		"/web":                   {"", "", false},
		"egg/":                   {"", "", false},
	} {
		typ, name, ok := SplitKey(key)
		if typ != want.typ || name != want.name || ok != want.ok {
			t.Errorf("SplitKey(%q) = %q, %q, %v, want %+v", key, typ, name, ok, want)
		}
		if ok && Key(typ, name) != key {
			t.Errorf("Key(SplitKey(%q)) = %q", key, Key(typ, name))
		}
	}
}

func TestSplitProject(t *testing.T) {
	ns, name, err := SplitProject("default/shop")
	if err != nil || ns != "default" || name != "shop" || Project(ns, name) != "default/shop" {
		t.Fatalf("SplitProject(default/shop) = %q, %q, %v", ns, name, err)
	}
	for _, bad := range []string{"", "shop", "/shop", "default/", "a/b/c"} {
		if _, _, err := SplitProject(bad); err == nil {
			t.Errorf("SplitProject(%q) succeeded, want an error", bad)
		}
	}
}

func TestIntReadsCountsAsWrittenAndAsStored(t *testing.T) {
	for _, v := range []any{3, int64(3), float64(3), json.Number("3")} {
		if got := Int(v); got != 3 {
			t.Errorf("Int(%T %v) = %d, want 3", v, v, got)
		}
	}
	for _, v := range []any{nil, "3", true} {
		if got := Int(v); got != 0 {
			t.Errorf("Int(%T %v) = %d, want 0", v, v, got)
		}
	}
}
