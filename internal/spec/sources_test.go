package spec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckSources(t *testing.T) {
	dir := t.TempDir()
	write := func(name string) {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("web/Dockerfile")
	write("api/Dockerfile") // but api asks for Dockerfile.prod
	write("worker")         // a file, not a directory
	write("keys/token.txt")
	if err := os.MkdirAll(filepath.Join(dir, "keys/dir.txt"), 0o755); err != nil {
		t.Fatal(err)
	}
	src := `project: shop
eggs:
  web:
    build: ./web
    secrets: [token, missing, dir, set, unset]
  api:
    build: {context: ./api, dockerfile: Dockerfile.prod}
  worker:
    build: worker
  gone:
    build: ./gone
secrets:
  token: {file: ./keys/token.txt}
  missing: {file: ./keys/missing.txt}
  dir: {file: keys/dir.txt}
  set: {env: SET}
  unset: {env: UNSET}
`
	file := filepath.Join(dir, "hatch.yaml")
	p, err := Parse([]byte(src), file, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := p.CheckSources(Environment{
		LookupEnv: func(name string) (string, bool) { return "", name == "SET" }, // set, even if empty
		Stat:      os.Stat,
	})
	wants := []struct {
		at    string
		words string
	}{
		{"context: ./api", "the Dockerfile " + filepath.Join(dir, "api/Dockerfile.prod") + " does not exist"},
		{"build: worker", "the context " + filepath.Join(dir, "worker") + " is not a directory"},
		{"build: ./gone", "the context " + filepath.Join(dir, "gone") + " does not exist (it is relative to " + file + ")"},
		{"missing: {file", `secret "missing": its file ` + filepath.Join(dir, "keys/missing.txt") + " does not exist"},
		{"dir: {file", "is a directory, not a file"},
		{"unset: {env", `secret "unset": UNSET is not set in hatch's environment`},
	}
	if len(got) != len(wants) {
		t.Fatalf("got %d problems, want %d: %v", len(got), len(wants), got)
	}
	for i, w := range wants {
		if got[i].Line != lineOf(t, src, w.at) || !strings.Contains(got[i].Message, w.words) || got[i].File != file {
			t.Errorf("problem %d = %s\nwant on the line of %q: %s", i, got[i], w.at, w.words)
		}
	}
}

func TestCheckSourcesOfTheExample(t *testing.T) {
	p, err := Load("../../examples/shop/hatch.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if problems := p.CheckSources(Environment{LookupEnv: func(string) (string, bool) { return "", false }, Stat: os.Stat}); len(problems) > 0 {
		t.Fatalf("the example's build contexts or secret files are missing: %v", problems)
	}
}
