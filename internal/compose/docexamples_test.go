package compose

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/hatchery/hatchery/internal/spec"
)

// The examples users copy from the README, docs/ and examples/ load: a doc
// example that stops parsing fails here, not in a user's terminal (issue
// 33: the README's route with its own certificate was not YAML). This test
// lives in package compose because it is the one that can load both kinds
// of file: a hatch.yaml through spec, a Compose file through Load.

// repoRoot is where README.md is, from this package's directory.
const repoRoot = "../.."

// docExample is a fenced ```yaml block of a Markdown file.
type docExample struct {
	doc  string // the Markdown file, relative to the repository
	line int    // the line of the block's first content line in doc
	text string
}

// exampleMarker is the first line every ```yaml block starts with, naming
// the file it is: "# hatch.yaml" or "# compose.yaml" for a whole file (what
// follows the name is free text), or "# hatch.yaml, under eggs.NAME:" for an
// egg's settings, which the test indents under that egg of a minimal project.
var exampleMarker = regexp.MustCompile(`^# (hatch\.yaml|compose\.yaml)(?:, under eggs\.([a-z0-9-]+):$|$|[ :(—-])`)

// loadExample loads a block as the file its marker names; the error says
// where in doc each problem is. A block without a marker is an error, so
// that none is passed over because the test could not tell what it is.
func loadExample(t *testing.T, ex docExample) error {
	t.Helper()
	first, _, _ := strings.Cut(ex.text, "\n")
	m := exampleMarker.FindStringSubmatch(first)
	if m == nil {
		return fmt.Errorf("%s:%d: a yaml block starts with a comment naming its file: \"# hatch.yaml\" or \"# compose.yaml\" (a whole file), or \"# hatch.yaml, under eggs.NAME:\" (an egg's settings); this one starts with %q", ex.doc, ex.line, first)
	}
	dir := t.TempDir()
	text, header := ex.text, 0
	if m[2] != "" {
		var b strings.Builder
		b.WriteString("project: docs\neggs:\n  " + m[2] + ":\n")
		for _, l := range strings.Split(strings.TrimSuffix(ex.text, "\n"), "\n") {
			b.WriteString("    " + l + "\n")
		}
		text, header = b.String(), 3
	}
	at := func(d spec.Diagnostic) string {
		return fmt.Sprintf("%s:%d: %s", ex.doc, ex.line+d.Line-1-header, d.Message)
	}
	var err error
	if m[1] == "compose.yaml" {
		path := filepath.Join(dir, "compose.yaml")
		if werr := os.WriteFile(path, []byte(text), 0o644); werr != nil {
			t.Fatal(werr)
		}
		_, err = Load(context.Background(), []string{path}, Options{})
	} else {
		_, err = spec.Parse([]byte(text), filepath.Join(dir, "hatch.yaml"), spec.Options{LookupEnv: exampleEnv})
	}
	var perr *spec.Error
	if errors.As(err, &perr) {
		lines := make([]string, len(perr.Errors))
		for i, d := range perr.Errors {
			lines[i] = at(d)
		}
		return errors.New(strings.Join(lines, "\n"))
	}
	if err != nil {
		return fmt.Errorf("%s:%d: %w", ex.doc, ex.line, err)
	}
	return nil
}

// fence opens or closes a fenced block, with its language.
var fence = regexp.MustCompile("^( *)```(\\S*)\\s*$")

// markdownParts splits a Markdown file into its fenced blocks (each with its
// language) and its prose, the blocks' lines blanked so lines keep their
// numbers. A fenced block without a language is an error: a reader cannot
// tell a YAML example from a diagram, and neither can this test.
func markdownParts(doc, text string) (yamlBlocks []docExample, prose string, errs []error) {
	lines := strings.Split(text, "\n")
	var out []string
	for i := 0; i < len(lines); i++ {
		m := fence.FindStringSubmatch(lines[i])
		if m == nil {
			out = append(out, lines[i])
			continue
		}
		if m[2] == "" {
			errs = append(errs, fmt.Errorf("%s:%d: a fenced block says its language (```yaml is loaded by this test; ```text, ```sh, ```json are not YAML)", doc, i+1))
		}
		start, indent := i+1, m[1]
		var body []string
		for i++; i < len(lines) && !fence.MatchString(lines[i]); i++ {
			body = append(body, strings.TrimPrefix(lines[i], indent))
		}
		if i == len(lines) {
			return yamlBlocks, strings.Join(out, "\n"), append(errs, fmt.Errorf("%s:%d: the fenced block is not closed", doc, start))
		}
		if m[2] == "yaml" || m[2] == "yml" {
			yamlBlocks = append(yamlBlocks, docExample{doc: doc, line: start + 1, text: strings.Join(body, "\n") + "\n"})
		}
		for range len(body) + 2 {
			out = append(out, "")
		}
	}
	return yamlBlocks, strings.Join(out, "\n"), errs
}

// codeSpan is an inline code span of prose (it may wrap over lines).
var codeSpan = regexp.MustCompile("(`+)([^`]+)`+")

// yamlSpan tells the inline code spans that are YAML a user may copy: those
// holding a reference (${...}), and flow mappings with a plain key
// ({host: ..., tls: off}); the JSON bodies of docs/API.md quote their keys.
var yamlSpan = regexp.MustCompile(`\$\{|^\{[a-z_]+: `)

func docFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md under %s: %v", repoRoot, err)
	}
	return append([]string{filepath.Join(repoRoot, "README.md")}, docs...)
}

func TestDocExamplesLoad(t *testing.T) {
	blocks := 0
	for _, path := range docFiles(t) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		doc, _ := filepath.Rel(repoRoot, path)
		examples, prose, errs := markdownParts(doc, string(data))
		for _, err := range errs {
			t.Error(err)
		}
		for _, ex := range examples {
			blocks++
			t.Run(fmt.Sprintf("%s:%d", doc, ex.line), func(t *testing.T) {
				if err := loadExample(t, ex); err != nil {
					t.Errorf("a yaml example does not load:\n%v", err)
				}
			})
		}
		for _, m := range codeSpan.FindAllStringSubmatchIndex(prose, -1) {
			span := strings.Join(strings.Fields(prose[m[4]:m[5]]), " ")
			if !yamlSpan.MatchString(span) {
				continue
			}
			var node yaml.Node
			if err := yaml.Unmarshal([]byte(span), &node); err != nil {
				why := err.Error()
				if _, hint, ok := spec.ExplainFlowReference([]byte(span)); ok {
					why = hint
				}
				line := strings.Count(prose[:m[4]], "\n") + 1
				t.Errorf("%s:%d: the inline example `%s` is not YAML (%s): write it so it parses, or make it a ```yaml block", doc, line, span, why)
			}
		}
	}
	if blocks == 0 {
		t.Fatal("no ```yaml block in README.md or docs/: this test would check nothing")
	}
}

// exampleEnv is the environment the examples and docs load in: what the
// pipeline of examples/ci (docs/CI.md) sets.
func exampleEnv(name string) (string, bool) {
	v, ok := map[string]string{"GIT_SHA": "0123abc", "REGISTRY_USER": "ci-bot"}[name]
	return v, ok
}

func TestExampleProjectsLoad(t *testing.T) {
	found := 0
	err := filepath.WalkDir(filepath.Join(repoRoot, "examples"), func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		switch name := e.Name(); {
		case name == "hatch.yaml":
			found++
			if _, err := spec.Load(path, spec.Options{LookupEnv: exampleEnv}); err != nil {
				t.Errorf("%s does not load:\n%v", path, err)
			}
		case composeFileName.MatchString(name):
			found++
			if _, err := Load(context.Background(), []string{path}, Options{}); err != nil {
				t.Errorf("%s does not load:\n%v", path, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no hatch.yaml or compose.yaml under examples/: this test would check nothing")
	}
}

// The rules the doc test reads blocks by: a block is loaded as what its
// first line says, an unmarked one or one that does not load is an error,
// and a fence without a language is refused rather than passed over.
func TestDocExampleRules(t *testing.T) {
	load := func(text string) error {
		return loadExample(t, docExample{doc: "X.md", line: 10, text: text})
	}
	whole := "# hatch.yaml: a minimal project\nproject: x\neggs:\n  web: {image: nginx}\n"
	if err := load(whole); err != nil {
		t.Errorf("a whole hatch.yaml: %v", err)
	}
	if err := load("# hatch.yaml, under eggs.web:\nimage: nginx\nport: 80\nroutes: [web.localhost]\n"); err != nil {
		t.Errorf("an egg's settings: %v", err)
	}
	if err := load("# compose.yaml\nservices:\n  web:\n    image: nginx\n"); err != nil {
		t.Errorf("a Compose file: %v", err)
	}
	for name, tc := range map[string]struct{ text, want string }{
		"no marker": {"project: x\neggs:\n  web: {image: nginx}\n", `X.md:10: a yaml block starts with a comment naming its file`},
		"a trap, at its line in the doc": {"# hatch.yaml\nproject: x\neggs:\n  web: {image: nginx, command: [${env.X}]}\n",
			`X.md:13: not valid YAML: ${env.X} inside [...] must be quoted: "${env.X}"`},
		"a fragment's line in the doc": {"# hatch.yaml, under eggs.web:\nimage: nginx\nreplicas: lots\n", "X.md:12: "},
		"a Compose file's line in the doc": {"# compose.yaml\nservices:\n  web:\n    image: nginx\n    environment: {A: ${A}}\n",
			`X.md:14: not valid YAML: ${A} inside {...} must be quoted: A: "${A}"`},
	} {
		if err := load(tc.text); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", name, err, tc.want)
		}
	}
	if _, _, errs := markdownParts("X.md", "text\n```\nproject: x\n```\n"); len(errs) != 1 || !strings.Contains(errs[0].Error(), "X.md:2: a fenced block says its language") {
		t.Errorf("a fence without a language: got %v", errs)
	}
	blocks, prose, errs := markdownParts("X.md", "a `b`\n\n  ```yaml\n  # hatch.yaml\n  project: x\n  ```\n```sh\nls\n```\nend\n")
	if errs != nil || len(blocks) != 1 || blocks[0].line != 4 || blocks[0].text != "# hatch.yaml\nproject: x\n" || strings.Count(prose, "\n") != 10 || strings.Contains(prose, "ls") {
		t.Errorf("markdownParts = %+v, %q, %v", blocks, prose, errs)
	}
}
