package compose

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/spec"
)

var update = flag.Bool("update", false, "rewrite the golden files of the Compose conversion")

// A golden case is a directory of testdata holding Compose files written to
// look like real projects, and:
//
//	files             the -f files, in order (default: compose.yaml)
//	environ           the environment, KEY=value lines (default: empty)
//	hatch.yaml.golden what `hatch convert` prints
//	warnings.golden   the warnings, one per line, the directory as <dir>
type goldenCase struct {
	dir     string
	files   []string
	environ []string
}

func goldenCases(t *testing.T) []goldenCase {
	t.Helper()
	dirs, err := filepath.Glob("testdata/*")
	if err != nil {
		t.Fatal(err)
	}
	var cases []goldenCase
	for _, dir := range dirs {
		if info, err := os.Stat(dir); err != nil || !info.IsDir() || filepath.Base(dir) == "rapid" {
			continue // rapid keeps its failing cases there
		}
		c := goldenCase{dir: dir, files: []string{filepath.Join(dir, "compose.yaml")}}
		if data, err := os.ReadFile(filepath.Join(dir, "files")); err == nil {
			c.files = nil
			for _, f := range strings.Fields(string(data)) {
				c.files = append(c.files, filepath.Join(dir, f))
			}
		}
		if data, err := os.ReadFile(filepath.Join(dir, "environ")); err == nil {
			c.environ = strings.Fields(string(data))
		}
		cases = append(cases, c)
	}
	if len(cases) < 12 {
		t.Fatalf("%d golden cases, want at least a dozen", len(cases))
	}
	return cases
}

// TestConvertGolden converts each case and compares the hatch.yaml and the
// warnings with the golden files; then it parses the golden hatch.yaml, as a
// file beside the Compose files, and checks it maps to the same resources as
// the Compose project: what convert prints is what apply would deploy. After
// a deliberate change: go test ./internal/compose -run Golden -update, and
// review the diff.
func TestConvertGolden(t *testing.T) {
	for _, c := range goldenCases(t) {
		t.Run(filepath.Base(c.dir), func(t *testing.T) {
			p, err := Load(context.Background(), c.files, Options{Environ: c.environ})
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			got, err := spec.Marshal(p.Project)
			if err != nil {
				t.Fatal(err)
			}
			abs, err := filepath.Abs(c.dir)
			if err != nil {
				t.Fatal(err)
			}
			var warnings bytes.Buffer
			for _, w := range p.Warnings {
				fmt.Fprintln(&warnings, strings.ReplaceAll(w.String(), abs, "<dir>"))
			}
			compareGolden(t, filepath.Join(c.dir, "hatch.yaml.golden"), got)
			compareGolden(t, filepath.Join(c.dir, "warnings.golden"), bytes.ReplaceAll(warnings.Bytes(), []byte(c.dir+string(filepath.Separator)), nil))

			back, err := spec.Parse(got, filepath.Join(c.dir, "hatch.yaml"), spec.Options{})
			if err != nil {
				t.Fatalf("the converted hatch.yaml does not load: %v", err)
			}
			sameResources(t, p.Project, back)
		})
	}
}

func compareGolden(t *testing.T, path string, got []byte) {
	t.Helper()
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
		t.Errorf("%s differs; run with -update and review the diff\n got:\n%s\nwant:\n%s", path, got, want)
	}
}

// sameResources fails unless two projects have equal resources and
// dependencies.
func sameResources(t *testing.T, want, got *spec.Project) {
	t.Helper()
	rw, dw := want.Resources()
	rg, dg := got.Resources()
	if len(rw) != len(rg) {
		t.Fatalf("%d resources, want %d", len(rg), len(rw))
	}
	for i := range rw {
		if rw[i].Key() != rg[i].Key() || !resource.Equal(rw[i].Inputs, rg[i].Inputs) {
			t.Fatalf("resource %s differs from %s:\n got: %v\nwant: %v", rg[i].Key(), rw[i].Key(), rg[i].Inputs, rw[i].Inputs)
		}
	}
	if fmt.Sprint(deref(dw)) != fmt.Sprint(deref(dg)) {
		t.Fatalf("dependencies %v, want %v", deref(dg), deref(dw))
	}
}

func deref(ds []*resource.Dependency) []resource.Dependency {
	out := make([]resource.Dependency, len(ds))
	for i, d := range ds {
		out[i] = *d
	}
	return out
}

// mustFail loads files that must fail and returns the *spec.Error, or the
// plain error compose-go gave.
func mustFail(t *testing.T, files []string, opts Options) (*spec.Error, error) {
	t.Helper()
	p, err := Load(context.Background(), files, opts)
	if err == nil {
		t.Fatalf("Load succeeded, want an error; warnings: %v", p.Warnings)
	}
	var perr *spec.Error
	if errors.As(err, &perr) {
		return perr, nil
	}
	return nil, err
}
