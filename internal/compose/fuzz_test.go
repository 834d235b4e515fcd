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
// form a graph and pass spec.CheckResource, or one of the two errors a user
// can be given: compose-go's refusal of the file (a *loadError), or an
// *spec.Error whose problems each have a line. Any other error is this
// package's own failure (the hatch.yaml it converted to does not load) and
// fails the target.
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
		var lerr *loadError
		switch {
		case errors.As(err, &lerr):
			if lerr.err == nil {
				t.Fatalf("compose-go's refusal without a reason: %#v", lerr)
			}
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
			t.Fatalf("neither compose-go's refusal nor problems with lines: %v", err)
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
