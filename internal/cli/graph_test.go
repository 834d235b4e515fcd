package cli

import (
	"strings"
	"testing"
)

func TestGraphOfTheExample(t *testing.T) {
	code, out, errOut := run(t, "graph", "-f", shop)
	if code != 0 || errOut != "" {
		t.Fatalf("hatch graph = %d, stderr %q", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 10 {
		t.Fatalf("%d lines, want one per resource (10):\n%s", len(lines), out)
	}
	pos := map[string]int{}
	for i, l := range lines {
		pos[strings.Fields(l)[0]] = i
	}
	// Dependency order: what each needs comes first.
	for _, edge := range [][2]string{
		{"volume/pgdata", "egg/db"}, {"egg/db", "egg/migrate"}, {"egg/migrate", "egg/api"},
		{"secret/api_key", "egg/api"}, {"egg/api", "egg/web"}, {"egg/web", "route/shop.localhost"},
	} {
		if pos[edge[0]] >= pos[edge[1]] {
			t.Errorf("%s is not listed before %s:\n%s", edge[0], edge[1], out)
		}
	}
	if !strings.Contains(out, "<- egg/db (healthy), egg/migrate (completed), network/backend, secret/api_key\n") {
		t.Errorf("egg/api's parents and conditions are not shown:\n%s", out)
	}
}

func TestGraphDOT(t *testing.T) {
	code, out, errOut := run(t, "graph", "-f", shop, "--format", "dot")
	if code != 0 || errOut != "" {
		t.Fatalf("hatch graph --format dot = %d, stderr %q", code, errOut)
	}
	if !strings.HasPrefix(out, "digraph \"shop\" {\n") || !strings.Contains(out, `"egg/db" -> "egg/api" [label="healthy"];`) {
		t.Errorf("not the shop's graph in DOT:\n%s", out)
	}
}

func TestGraphRefusesAnUnknownFormat(t *testing.T) {
	code, out, errOut := run(t, "graph", "-f", shop, "--format", "svg")
	if code != 1 || out != "" || errOut != "hatch: unknown --format \"svg\": use text or dot\n" {
		t.Fatalf("hatch graph --format svg = %d %q %q", code, out, errOut)
	}
}

func TestGraphOfAFileWithErrors(t *testing.T) {
	path := writeProject(t, "project: shop\neggs:\n  web:\n    image: nginx\n    depends_on: [db]\n")
	code, out, errOut := run(t, "graph", "-f", path)
	if code != 1 || out != "" {
		t.Fatalf("exit code %d, stdout %q", code, out)
	}
	if want := path + ":5: egg \"web\" depends on \"db\", which is not defined\n"; errOut != want {
		t.Fatalf("stderr = %q, want %q", errOut, want)
	}
}

// graph shows a project on a machine without its secrets: it does not check
// the files and variables that only apply reads.
func TestGraphDoesNotNeedTheSecrets(t *testing.T) {
	path := writeProject(t, "project: shop\neggs:\n  web:\n    image: nginx\n    secrets: [token]\nsecrets:\n  token: {file: ./absent.txt}\n")
	if code, _, errOut := run(t, "graph", "-f", path); code != 0 {
		t.Fatalf("hatch graph = %d %q", code, errOut)
	}
	if code, _, _ := run(t, "validate", "-f", path); code != 1 {
		t.Fatalf("hatch validate accepted a missing secret file")
	}
}
