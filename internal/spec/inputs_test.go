package spec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/resource"
)

// TestCheckResourceAcceptsWhatResourcesWrites: a control plane checking
// resources with CheckResource accepts every resource of every test project.
func TestCheckResourceAcceptsWhatResourcesWrites(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, f := range append(files, "../../examples/shop/hatch.yaml", "../../examples/demo/hatch.yaml") {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		p, err := Parse(data, f, Options{LookupEnv: testEnv})
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		checkAllResources(t, p)
	}
}

// checkAllResources fails t unless every resource of p passes CheckResource.
func checkAllResources(t *testing.T, p *Project) {
	t.Helper()
	rs, _ := p.Resources()
	for _, r := range rs {
		if err := CheckResource(r, Limits{}); err != nil {
			t.Fatalf("%s: the loader wrote what CheckResource refuses: %v", r.Key(), err)
		}
	}
}

func TestCheckResourceNamesTheField(t *testing.T) {
	egg := func(in map[string]any) *resource.Desired {
		return &resource.Desired{Type: resource.Egg, Name: "w", Inputs: in}
	}
	for _, c := range []struct {
		r     *resource.Desired
		lim   Limits
		field string
	}{
		{&resource.Desired{Type: resource.Egg, Name: "a/b", Inputs: map[string]any{"image": "x"}}, Limits{}, "name: "},
		{&resource.Desired{Type: resource.Network, Name: "..", Inputs: map[string]any{}}, Limits{}, "name: "},
		{&resource.Desired{Type: resource.Secret, Name: "s", Inputs: map[string]any{"value": "x"}}, Limits{}, `inputs: unknown field "value"`},
		{egg(map[string]any{"image": "x", "replicas": 11}), Limits{MaxReplicas: 10}, "inputs.replicas: "},
		{egg(map[string]any{"image": "x", "replicas": MaxReplicas + 1}), Limits{MaxReplicas: MaxReplicas * 2}, "inputs.replicas: "},
		{egg(map[string]any{"image": "x", "port": 65536}), Limits{}, "inputs.port: "},
		{egg(map[string]any{"image": "x", "aliases": []any{"-a"}}), Limits{}, "inputs.aliases[0]: "},
		{egg(map[string]any{"image": "x", "env": map[string]any{"1A": "x"}}), Limits{}, "inputs.env: "},
		{egg(map[string]any{"image": "x", "env": map[string]any{"A": []any{"x"}}}), Limits{}, "inputs.env.A: "},
		{egg(map[string]any{"image": "x", "health": map[string]any{"http": "/", "tcp": true}}), Limits{}, "inputs.health: "},
		{egg(map[string]any{"image": "x", "rollout": map[string]any{"max_surge": map[string]any{"percent": 101}}}), Limits{}, "inputs.rollout.max_surge: "},
		{egg(map[string]any{"image": "x", "placement": map[string]any{"hosts": []any{"a b"}}}), Limits{}, "inputs.placement.hosts[0]: "},
		{egg(map[string]any{"build": map[string]any{"context": "w", "dockerfile": "../Dockerfile"}}), Limits{}, "inputs.build.dockerfile: "},
	} {
		err := CheckResource(c.r, c.lim)
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s %v: got %v, want an error naming %q", c.r.Key(), c.r.Inputs, err, c.field)
		}
	}
}
