package spec

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds Parse arbitrary text, starting from the test projects: it
// must never panic, and must either load a project whose resources form a
// graph and whose every resource a control plane accepts (CheckResource),
// or return an *Error whose every problem has a line.
// `go test ./internal/spec -run '^$' -fuzz FuzzParse -fuzztime 30s` explores.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.yaml")
	for _, s := range append(seeds, "../../examples/shop/hatch.yaml") {
		data, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data, "hatch.yaml", Options{LookupEnv: testEnv})
		if err != nil {
			var perr *Error
			if !errors.As(err, &perr) || len(perr.Errors) == 0 {
				t.Fatalf("Parse returned %v, want an *Error with problems", err)
			}
			for _, d := range perr.Errors {
				if d.Line < 1 || d.Message == "" {
					t.Fatalf("a problem without a line or a message: %+v", d)
				}
			}
			return
		}
		if _, err := p.Graph(); err != nil {
			t.Fatalf("a loaded project has no graph: %v", err)
		}
		checkAllResources(t, p)
	})
}
