package archtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const (
	module = "github.com/hatchery/hatchery"
	// doc holds the package table, relative to this package's directory
	// (where go test runs it).
	doc = "../../docs/ARCHITECTURE.md"
)

// mayImport is the layer rule: which groups of the doc's package table a
// package of each group may import. Tests and examples may import any
// package; nothing else imports them.
var mayImport = map[string][]string{
	"commands":           {"commands", "control plane", "agent", "shared"},
	"control plane":      {"control plane", "shared"},
	"agent":              {"agent", "shared"},
	"shared":             {"shared"},
	"tests and examples": {"commands", "control plane", "agent", "shared", "tests and examples"},
}

// allowedCrossings are the imports known to cross the layers, each with the
// issue that removes it. One that no longer crosses (the import is gone or
// the package moved) fails the check too, so the list never outlives its
// reason.
var allowedCrossings = map[[2]string]string{}

// TestImportsFollowTheLayers checks every import of the module's non-test
// code against the groups of docs/ARCHITECTURE.md's package table. Test
// files are left out: a test may join the layers on purpose (a server test
// runs a real agent).
func TestImportsFollowTheLayers(t *testing.T) {
	f, err := os.Open(doc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	layers, err := readLayers(f)
	if err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	pkgs, err := listImports()
	if err != nil {
		t.Fatal(err)
	}
	for _, problem := range crossings(layers, pkgs, allowedCrossings) {
		t.Error(problem)
	}
}

// layers maps each package path listed in the table (without the module
// prefix) to its group.
type layers map[string]string

// groupOf returns the group of pkg: that of the longest listed path that
// is pkg or one of its parent directories, so that a listed package's
// sub-packages (its adapters, its test suites) sit in its group.
func (l layers) groupOf(pkg string) (string, bool) {
	for p := pkg; ; {
		if g, ok := l[p]; ok {
			return g, true
		}
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			return "", false
		}
		p = p[:i]
	}
}

var (
	// groupRow is a group's heading row: "| **control plane** | | |".
	groupRow = regexp.MustCompile(`^\| \*\*([a-z ]+)\*\* \|`)
	// listedPath is a full package path in a row's first cell; the
	// abbreviations ("`.../sqlite`") are sub-packages, which groupOf finds
	// by their parent.
	listedPath = regexp.MustCompile("`((?:cmd|internal|test|examples)/[a-z0-9/_-]+)`")
)

// readLayers reads the package table of the doc: the rows under each
// group's heading row, up to the end of the table.
func readLayers(r io.Reader) (layers, error) {
	l := layers{}
	group := ""
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if m := groupRow.FindStringSubmatch(line); m != nil {
			group = m[1]
			if _, ok := mayImport[group]; !ok {
				return nil, fmt.Errorf("group %q of the package table has no layer rule (mayImport)", group)
			}
			continue
		}
		if group == "" {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break // the table ended
		}
		firstCell, _, _ := strings.Cut(strings.TrimPrefix(line, "|"), "|")
		for _, m := range listedPath.FindAllStringSubmatch(firstCell, -1) {
			l[m[1]] = group
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(l) == 0 {
		return nil, errors.New("no package table found (rows under a \"| **group** |\" heading)")
	}
	return l, nil
}

// pkg is a package of the module and the module's packages its non-test
// code imports, both without the module prefix.
type pkg struct {
	path    string
	imports []string
}

// listImports runs go list over the whole module, docker-tagged files
// included (they only add: no file is built without the tag alone).
func listImports() ([]pkg, error) {
	cmd := exec.Command("go", "list", "-tags", "docker", "-json=ImportPath,Imports", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w: %s", err, stderr.String())
	}
	var pkgs []pkg
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("go list output: %w", err)
		}
		own := pkg{path: strings.TrimPrefix(p.ImportPath, module+"/")}
		for _, imp := range p.Imports {
			if rest, ok := strings.CutPrefix(imp, module+"/"); ok {
				own.imports = append(own.imports, rest)
			}
		}
		pkgs = append(pkgs, own)
	}
	return pkgs, nil
}

// crossings returns a line for each import that breaks the layer rule (and
// is not an allowed crossing), each package the table does not place, and
// each allowed crossing that no longer occurs.
func crossings(l layers, pkgs []pkg, allowed map[[2]string]string) []string {
	var problems []string
	seen := map[[2]string]bool{}
	for _, p := range pkgs {
		from, ok := l.groupOf(p.path)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s is in no group of the package table in %s: add its row", p.path, doc))
			continue
		}
		for _, imp := range p.imports {
			to, ok := l.groupOf(imp)
			if !ok || slices.Contains(mayImport[from], to) {
				continue // an unplaced import is reported as a package of its own
			}
			if _, ok := allowed[[2]string{p.path, imp}]; ok {
				seen[[2]string{p.path, imp}] = true
				continue
			}
			problems = append(problems, fmt.Sprintf("%s (%s) imports %s (%s): %s packages may import only %s (the layers of %s)",
				p.path, from, imp, to, from, strings.Join(mayImport[from], ", "), doc))
		}
	}
	for c, why := range allowed {
		if !seen[c] {
			problems = append(problems, fmt.Sprintf("%s's import of %s no longer crosses the layers: remove the allowed crossing (%s)", c[0], c[1], why))
		}
	}
	slices.Sort(problems)
	return problems
}
