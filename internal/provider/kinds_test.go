package provider

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/graph"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/spec"
)

// everyKindYAML holds a resource of every kind.
const everyKindYAML = `
project: kinds
eggs:
  web:
    image: web:1
    port: 8080
    routes: [kinds.localhost]
    volumes: ["data:/data"]
    networks: [backend]
    secrets: [api_key]
volumes:
  data: {}
networks:
  backend: {}
secrets:
  api_key: {env: API_KEY}
`

// A kind of resource is declared in several packages (see "Adding a
// resource kind" in docs/ARCHITECTURE.md). This test fails for a kind of
// resource.Kinds that one of them misses: its outputs in package inputs,
// its provider (declaring those outputs and reporting them), its inputs'
// check in spec.CheckResource, its shape in graph's rendering, and a
// resource of it in a project spec writes. TestSpecInputsDecode checks that
// spec's test projects hold every kind and that its inputs decode.
func TestEveryKindIsDeclaredEverywhere(t *testing.T) {
	e := newEnv(t, "h1")
	e.apply("default/kinds", everyKindYAML, map[string]string{"api_key": "k"})
	registry := e.set.Registry(Options{})
	for _, kind := range resource.Kinds() {
		t.Run(string(kind), func(t *testing.T) {
			outputs, ok := inputs.Outputs(kind)
			if !ok {
				t.Fatal("package inputs declares no outputs for it (inputs.Outputs)")
			}
			p, ok := registry[kind]
			if !ok {
				t.Fatal("no provider in Set.Registry")
			}
			if got := p.Schema().Outputs; !slices.Equal(got, outputs) {
				t.Errorf("its provider declares outputs %v, package inputs %v", got, outputs)
			}
			recs := 0
			for _, r := range mustList(t, e, "default/kinds") {
				if r.Type != kind {
					continue
				}
				recs++
				for _, o := range outputs {
					if _, ok := r.Outputs[o]; !ok {
						t.Errorf("%s: its provider did not report output %q (it reported %v)", r.Key(), o, r.Outputs)
					}
				}
			}
			if recs == 0 {
				t.Error("spec wrote no resource of it for a project using every kind (spec.Project.Resources)")
			}
			bad := &resource.Desired{Type: kind, Name: "x", Inputs: map[string]any{"no_such_input": 1}}
			if err := spec.CheckResource(bad, spec.Limits{}); err == nil {
				t.Error("spec.CheckResource let an input it does not have through: it does not check the kind")
			}
			g, err := graph.New([]*resource.Desired{{Type: kind, Name: "x"}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if dot := g.DOT("p"); !strings.Contains(dot, fmt.Sprintf("%q [shape=", resource.Key(kind, "x"))) ||
				strings.Contains(dot, "shape=plaintext") {
				t.Errorf("graph renders it with no shape of its own:\n%s", dot)
			}
		})
	}
}
