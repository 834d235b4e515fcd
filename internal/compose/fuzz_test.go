package compose

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/hatchery/hatchery/internal/spec"
)

// FuzzLoad feeds Load arbitrary compose.yaml text, starting from the golden
// cases: it must never panic, and must either give a project whose resources
// form a graph and pass spec.CheckResource, or an error; an *spec.Error has problems, each with a line.
// `go test ./internal/compose -run '^$' -fuzz FuzzLoad -fuzztime 30s` explores.
func FuzzLoad(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*/compose.yaml")
	for _, s := range seeds {
		data, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		file := filepath.Join(dir, "compose.yaml")
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := Load(context.Background(), []string{file}, Options{Environ: []string{"APP_VERSION=1", "COMPOSE_PROJECT_NAME=fuzz"}})
		var perr *spec.Error
		switch {
		case errors.As(err, &perr):
			if len(perr.Errors) == 0 {
				t.Fatalf("an *spec.Error without problems")
			}
			for _, d := range perr.Errors {
				if d.Line < 1 || d.Message == "" {
					t.Fatalf("a problem without a line or a message: %+v", d)
				}
			}
		case err != nil:
		default:
			if _, err := p.Graph(); err != nil {
				t.Fatalf("a loaded project has no graph: %v", err)
			}
			rs, _ := p.Resources()
			for _, r := range rs {
				if err := spec.CheckResource(r, spec.Limits{}); err != nil {
					t.Fatalf("%s: loaded, but a control plane refuses it: %v", r.Key(), err)
				}
			}
		}
	})
}
