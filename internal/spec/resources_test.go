package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/hatchery/hatchery/internal/resource"
)

var update = flag.Bool("update", false, "rewrite the golden files of the spec-to-resources mapping")

// golden is what a project file maps to, as the golden files hold it.
type golden struct {
	Resources    []goldenResource `json:"resources"`
	Dependencies []goldenDep      `json:"dependencies"`
	// Order is the graph's topological order, the order apply walks.
	Order    []string `json:"order"`
	Warnings []string `json:"warnings,omitempty"`
}

type goldenResource struct {
	Key    string         `json:"key"`
	Source string         `json:"source,omitempty"`
	Inputs map[string]any `json:"inputs"`
}

type goldenDep struct {
	Parent    string `json:"parent"`
	Child     string `json:"child"`
	Condition string `json:"condition,omitempty"`
}

// TestResourcesGolden maps each testdata/*.yaml (and the example shop) to its
// resources and compares them with testdata/*.golden. After a deliberate
// change of the mapping, run `go test ./internal/spec -run Golden -update`
// and review the diff of the golden files: it is the change of the contract.
func TestResourcesGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../examples/shop/hatch.yaml")
	env := func(name string) (string, bool) {
		v, ok := map[string]string{"REGION": "eu-west", "TAG": "2.1"}[name]
		return v, ok
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		if strings.Contains(file, "examples/shop") {
			name = "shop"
		}
		t.Run(name, func(t *testing.T) {
			p, err := Load(file, Options{LookupEnv: env})
			if err != nil {
				t.Fatalf("Load(%s): %v", file, err)
			}
			got := goldenOf(t, p)
			path := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s maps to other resources than %s; run with -update and review the diff\n%s", file, path, firstDifference(got, want))
			}
		})
	}
}

func goldenOf(t *testing.T, p *Project) []byte {
	t.Helper()
	resources, deps := p.Resources()
	g, err := p.Graph()
	if err != nil {
		t.Fatalf("Graph: %v", err)
	}
	var out golden
	for _, r := range resources {
		out.Resources = append(out.Resources, goldenResource{Key: r.Key(), Source: r.Source, Inputs: r.Inputs})
	}
	for _, d := range deps {
		out.Dependencies = append(out.Dependencies, goldenDep{Parent: d.Parent, Child: d.Child, Condition: string(d.Condition)})
	}
	for _, r := range g.Resources() {
		out.Order = append(out.Order, r.Key())
	}
	for _, w := range p.Warnings {
		out.Warnings = append(out.Warnings, fmt.Sprintf("%d: %s", w.Line, w.Message))
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func firstDifference(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			return fmt.Sprintf("line %d:\n got: %s\nwant: %s", i+1, g[i], w[i])
		}
	}
	return fmt.Sprintf("got %d lines, want %d", len(g), len(w))
}

// The inputs do not depend on the directory hatch runs in: the same file
// reached by two paths gives equal resources (a spurious update would
// otherwise roll every egg built from a directory).
func TestResourcesIndependentOfTheWorkingDirectory(t *testing.T) {
	src, err := os.ReadFile("testdata/secrets.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a, errA := Parse(src, "hatch.yaml", Options{})
	b, errB := Parse(src, "/somewhere/else/project/hatch.yaml", Options{})
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	ra, _ := a.Resources()
	rb, _ := b.Resources()
	for i := range ra {
		if !resource.Equal(ra[i].Inputs, rb[i].Inputs) {
			t.Errorf("%s: inputs differ between two paths to the file:\n%v\n%v", ra[i].Key(), ra[i].Inputs, rb[i].Inputs)
		}
	}
	if got := b.Path(b.Secrets[1].File); b.Secrets[1].Name != "db_password" || got != "/somewhere/else/project/db_password.txt" {
		t.Errorf("Path of the secret file = %s", got)
	}
}

// randomProject writes a valid project file: eggs e0..en-1, each depending
// on and referencing only earlier ones, with routes, volumes and networks.
type randomProject struct {
	src       string
	eggs      int
	routes    int
	volumes   int
	networks  int // networks the file defines
	defaultOn bool
	dependsOn map[string][]string // egg key -> parent egg keys by depends_on
	addressOf map[string][]string // egg key -> egg keys whose address it uses
}

func drawProject(t *rapid.T) randomProject {
	rp := randomProject{eggs: rapid.IntRange(1, 8).Draw(t, "eggs"), dependsOn: map[string][]string{}, addressOf: map[string][]string{}}
	rp.networks = rapid.IntRange(0, 3).Draw(t, "networks")
	var b strings.Builder
	var networkOf []string // by egg index
	b.WriteString("project: random\neggs:\n")
	for i := 0; i < rp.eggs; i++ {
		key := fmt.Sprintf("egg/e%d", i)
		fmt.Fprintf(&b, "  e%d:\n    image: img%d\n    port: %d\n", i, i, 8000+i)
		if rapid.Bool().Draw(t, "stateful") {
			fmt.Fprintf(&b, "    volumes: [\"v%d:/data\"]\n", i)
			rp.volumes++
		} else {
			fmt.Fprintf(&b, "    replicas: %d\n", rapid.IntRange(0, 5).Draw(t, "replicas"))
		}
		network := DefaultNetwork
		if rp.networks > 0 && rapid.Bool().Draw(t, "ownNetwork") {
			network = fmt.Sprintf("n%d", rapid.IntRange(0, rp.networks-1).Draw(t, "network"))
			fmt.Fprintf(&b, "    networks: [%s]\n", network)
		} else {
			rp.defaultOn = true
		}
		networkOf = append(networkOf, network)
		routes := rapid.IntRange(0, 2).Draw(t, "routes")
		if routes > 0 {
			b.WriteString("    routes: [")
			for r := 0; r < routes; r++ {
				fmt.Fprintf(&b, "\"e%d.localhost/r%d\", ", i, r)
			}
			b.WriteString("]\n")
			rp.routes += routes
		}
		var deps, refs []string
		for j := 0; j < i; j++ {
			if rapid.Bool().Draw(t, "dependsOn") {
				deps = append(deps, fmt.Sprintf("e%d", j))
				rp.dependsOn[key] = append(rp.dependsOn[key], fmt.Sprintf("egg/e%d", j))
			}
			// An address is reachable only from an egg on one of its networks.
			if networkOf[j] == network && rapid.Bool().Draw(t, "references") {
				refs = append(refs, fmt.Sprintf("E%d: \"tcp://${e%d.address}\"", j, j))
				rp.addressOf[key] = append(rp.addressOf[key], fmt.Sprintf("egg/e%d", j))
			}
		}
		if len(deps) > 0 {
			fmt.Fprintf(&b, "    depends_on: [%s]\n", strings.Join(deps, ", "))
		}
		if len(refs) > 0 {
			fmt.Fprintf(&b, "    env: {%s}\n", strings.Join(refs, ", "))
		}
	}
	if rp.volumes > 0 {
		b.WriteString("volumes:\n")
		for i := 0; i < rp.eggs; i++ {
			if strings.Contains(b.String(), fmt.Sprintf("\"v%d:/data\"", i)) {
				fmt.Fprintf(&b, "  v%d: {}\n", i)
			}
		}
	}
	if rp.networks > 0 {
		b.WriteString("networks:\n")
		for n := 0; n < rp.networks; n++ {
			fmt.Fprintf(&b, "  n%d: {}\n", n)
		}
	}
	rp.src = b.String()
	return rp
}

// Any valid project maps to a graph with one resource per egg, route, volume
// and network, where every egg comes after what it depends on and references,
// and after its volume, and lists the eggs whose address it uses without
// being placed by them.
func TestResourcesOfRandomProjects(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rp := drawProject(t)
		p, err := Parse([]byte(rp.src), "hatch.yaml", Options{})
		if err != nil {
			t.Fatalf("Parse:\n%s\n%v", rp.src, err)
		}
		g, err := p.Graph()
		if err != nil {
			t.Fatalf("Graph: %v", err)
		}
		wantLen := rp.eggs + rp.routes + rp.volumes + rp.networks
		if rp.defaultOn {
			wantLen++
		}
		if g.Len() != wantLen {
			t.Fatalf("%d resources, want %d:\n%s", g.Len(), wantLen, rp.src)
		}
		pos := map[string]int{}
		for i, r := range g.Resources() {
			pos[r.Key()] = i
		}
		for child, parents := range rp.dependsOn {
			for _, parent := range parents {
				if pos[parent] > pos[child] {
					t.Fatalf("%s depends on %s but comes first", child, parent)
				}
			}
		}
		for child, parents := range rp.addressOf {
			r, _ := g.Resource(child)
			uses := r.Inputs["uses"].([]any)
			if _, ok := r.Inputs["placement"].(map[string]any)["beside"]; ok {
				t.Fatalf("%s is placed by the eggs it references: %v", child, r.Inputs["placement"])
			}
			for _, parent := range parents {
				if pos[parent] > pos[child] {
					t.Fatalf("%s references %s but comes first", child, parent)
				}
				if !slices.Contains(uses, any(strings.TrimPrefix(parent, "egg/"))) {
					t.Fatalf("%s uses %s's address but does not list it: uses = %v", child, parent, uses)
				}
			}
		}
		for _, e := range p.Eggs {
			for _, v := range e.namedVolumes() {
				if pos["volume/"+v] > pos["egg/"+e.Name] {
					t.Fatalf("egg %s comes before its volume %s", e.Name, v)
				}
			}
		}
	})
}

// Closing a chain of depends_on into a loop is reported as a cycle, with the
// path of the eggs in it, on the line of one of them.
func TestCyclesAreReportedWithTheirPath(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 6).Draw(t, "chain")
		var b strings.Builder
		b.WriteString("project: loop\neggs:\n")
		eggLines := map[int]string{}
		for i := 0; i < n; i++ {
			parent := (i + 1) % n
			fmt.Fprintf(&b, "  e%d:\n    image: x\n    depends_on: [e%d]\n", i, parent)
			eggLines[3+3*i] = fmt.Sprintf("egg %q", fmt.Sprintf("e%d", i))
		}
		_, err := Parse([]byte(b.String()), "hatch.yaml", Options{})
		var perr *Error
		if !errors.As(err, &perr) || len(perr.Errors) != 1 {
			t.Fatalf("Parse = %v, want one error", err)
		}
		d := perr.Errors[0]
		if n == 1 {
			if !strings.Contains(d.Message, "depends on itself") {
				t.Fatalf("a self-dependency gave %s", d)
			}
			return
		}
		if !strings.Contains(d.Message, "dependency cycle") {
			t.Fatalf("want a cycle, got %s", d)
		}
		for i := 0; i < n; i++ {
			if !strings.Contains(d.Message, fmt.Sprintf("egg %q", fmt.Sprintf("e%d", i))) {
				t.Fatalf("the cycle's path misses e%d: %s", i, d)
			}
		}
		if _, ok := eggLines[d.Line]; !ok {
			t.Fatalf("the cycle is reported on line %d, which is not an egg's in\n%s", d.Line, b.String())
		}
	})
}
