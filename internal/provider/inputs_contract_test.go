package provider

import (
	"path/filepath"
	"testing"

	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/spec"
)

// Package spec writes inputs with the types of package inputs and the
// providers decode them back with the same types, so the two cannot declare
// different fields. What can still go wrong is the shape resolution leaves:
// a reference written where its output's value does not fit. This test
// loads every project of spec's test data and the examples, resolves the
// references with values of the kind each output has (hosts is a list), and
// decodes every resource strictly: a field that does not fit fails here, not
// in a user's apply. Encoding the decoded value again must give the resolved
// inputs back, so nothing spec writes is dropped on the way.
func TestSpecInputsDecode(t *testing.T) {
	files, err := filepath.Glob("../spec/testdata/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../examples/shop/hatch.yaml")
	outputs := map[string]any{
		"address": "db:5432", "hosts": []any{"h1", "h2"}, "name": "hatch-x", "host": "h1",
		"handle": "hatch-secret:x:1:fp",
	}
	decoded := map[resource.Kind]int{}
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
			var again map[string]any
			switch r.Type {
			case resource.Egg:
				var egg inputs.Egg
				if egg, err = inputs.Decode[inputs.Egg](in); err == nil {
					again = inputs.Encode(egg)
					if env, ok := in["env"].(map[string]any); ok {
						for k, v := range env {
							if _, isString := v.(string); !isString {
								env[k] = egg.Env[k] // a whole reference to a list, read as a string
							}
						}
					}
				}
			case resource.Volume:
				again, err = roundTrip[inputs.Volume](in)
			case resource.Route:
				again, err = roundTrip[inputs.Route](in)
			case resource.Network:
				again, err = roundTrip[inputs.Network](in)
			case resource.Secret:
				again, err = roundTrip[inputs.Secret](in)
			default:
				t.Errorf("%s: %s: a type this test does not know", file, r.Key())
				continue
			}
			if err != nil {
				t.Errorf("%s: %s: inputs: %v", file, r.Key(), err)
				continue
			}
			if !resource.Equal(again, in) {
				t.Errorf("%s: %s: decoded and encoded again\n got %v\nwant %v", file, r.Key(), again, in)
			}
			decoded[r.Type]++
		}
	}
	for _, typ := range resource.Kinds() {
		if decoded[typ] == 0 {
			t.Errorf("no %s in the test projects: the check proves nothing for it", typ)
		}
	}
}

// roundTrip decodes resolved inputs as the providers do and encodes them again.
func roundTrip[T any](in map[string]any) (map[string]any, error) {
	v, err := inputs.Decode[T](in)
	if err != nil {
		return nil, err
	}
	return inputs.Encode(v), nil
}
