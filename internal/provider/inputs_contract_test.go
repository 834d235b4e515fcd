package provider

import (
	"maps"
	"path/filepath"
	"testing"

	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/spec"
)

// The providers decode the inputs package spec writes into structs of their
// own. This test loads every project of spec's test data and the examples,
// resolves the references with values of the kind each output has, and
// decodes every egg, volume and route strictly: a field spec writes that the
// providers do not know fails here, not in a user's apply.
func TestSpecInputsDecode(t *testing.T) {
	files, err := filepath.Glob("../spec/testdata/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../examples/shop/hatch.yaml")
	outputs := map[string]any{
		"address": "db:5432", "hosts": []any{"h1"}, "name": "hatch-x", "host": "h1",
		"handle": "hatch-secret:x:1:fp",
	}
	decoded := map[string]int{}
	for _, file := range files {
		p, err := spec.Load(file, spec.Options{LookupEnv: func(string) (string, bool) { return "v", true }})
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		resources, _ := p.Resources()
		for _, r := range resources {
			in, err := resource.Resolve(r.Inputs, func(ref resource.Ref) (any, error) { return outputs[ref.Output], nil })
			if err != nil {
				t.Fatalf("%s: %s: %v", file, r.Key(), err)
			}
			switch r.Type {
			case "egg":
				_, err = decode[eggInputs](r.Key(), in)
			case "volume":
				_, err = decode[volumeInputs](r.Key(), in)
			case "route":
				_, err = decode[routeInputs](r.Key(), in)
			default:
				continue
			}
			if err != nil {
				t.Errorf("%s: %v", file, err)
			}
			decoded[r.Type]++
		}
	}
	for _, typ := range []string{"egg", "volume", "route"} {
		if decoded[typ] == 0 {
			t.Errorf("no %s in the test projects: the check proves nothing for it", typ)
		}
	}
}

func TestEnvValuesBecomeStrings(t *testing.T) {
	in, err := decode[eggInputs]("egg/web", map[string]any{
		"env": map[string]any{"URL": "http://api:80", "API_HOSTS": []any{"h1", "h2"}, "N": 3},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := envInputs{"URL": "http://api:80", "API_HOSTS": "h1,h2", "N": "3"}
	if !maps.Equal(in.Env, want) {
		t.Fatalf("env %v, want %v", in.Env, want)
	}
}
