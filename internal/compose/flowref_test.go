package compose

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"
)

// A ${VAR} unquoted inside {...} or [...] is the YAML trap a hatch.yaml
// explains (spec.ExplainFlowReference); compose-go's message for it is the
// parser's "did not find expected ',' or '}'" at a line counted from 0, so
// the Compose loader gives the same explanation at the right line.
func TestLoadExplainsAVariableUnquotedInAFlowCollection(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string // compose.yaml, and override.yaml if given
		file  string            // the file and line the error must be at
		line  int
		want  string
	}{
		{
			name:  "in environment",
			files: map[string]string{"compose.yaml": "services:\n  web:\n    image: nginx\n    environment: {TAG: ${TAG}, MODE: prod}\n"},
			file:  "compose.yaml", line: 4,
			want: `not valid YAML: ${TAG} inside {...} must be quoted: TAG: "${TAG}"`,
		},
		{
			name:  "in x-hatch routes",
			files: map[string]string{"compose.yaml": "services:\n  web:\n    image: nginx\n    x-hatch:\n      port: 80\n      routes: [web.localhost, ${HOST}]\n"},
			file:  "compose.yaml", line: 6,
			want: `not valid YAML: ${HOST} inside [...] must be quoted: "${HOST}"`,
		},
		{
			name:  "an output reference, escaped as Compose escapes it",
			files: map[string]string{"compose.yaml": "services:\n  web:\n    image: nginx\n    command: [/app, --db, $${db.address}]\n"},
			file:  "compose.yaml", line: 4,
			want: `not valid YAML: $${db.address} inside [...] must be quoted: "$${db.address}"`,
		},
		{
			name: "in the second file given",
			files: map[string]string{
				"compose.yaml":  "services:\n  web:\n    image: nginx\n",
				"override.yaml": "services:\n  web:\n    labels: {sha: ${GIT_SHA}}\n",
			},
			file: "override.yaml", line: 3,
			want: `not valid YAML: ${GIT_SHA} inside {...} must be quoted: sha: "${GIT_SHA}"`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeFiles(t, tc.files)
			files := []string{filepath.Join(dir, "compose.yaml")}
			if _, ok := tc.files["override.yaml"]; ok {
				files = append(files, filepath.Join(dir, "override.yaml"))
			}
			perr, err := mustFail(t, files, Options{Environ: []string{"TAG=1", "HOST=a.localhost", "GIT_SHA=abc"}})
			if perr == nil {
				t.Fatalf("got %v, want one error at %s:%d", err, tc.file, tc.line)
			}
			if len(perr.Errors) != 1 {
				t.Fatalf("got %v, want one error", perr)
			}
			d := perr.Errors[0]
			if d.File != filepath.Join(dir, tc.file) || d.Line != tc.line || d.Message != tc.want {
				t.Errorf("got  %s\nwant %s:%d: %s", d, tc.file, tc.line, tc.want)
			}
		})
	}
}

// A file that is not YAML for another reason keeps compose-go's error,
// even when a reference in a flow collection follows the problem.
func TestLoadKeepsComposeGosErrorForOtherYAMLProblems(t *testing.T) {
	dir := writeFiles(t, map[string]string{"compose.yaml": "services:\n  web:\n    image: [nginx\n    environment: {TAG: ${TAG}}\n"})
	perr, err := mustFail(t, []string{filepath.Join(dir, "compose.yaml")}, Options{})
	if perr != nil {
		t.Fatalf("got %v, want compose-go's error", perr)
	}
	if _, ok := err.(*loadError); !ok {
		t.Errorf("got %T %v, want compose-go's error wrapped with the file", err, err)
	}
}

// Env files are the other place a Compose user writes ${VAR}; they are not
// YAML, so braces there are text and the trap does not exist: a value like
// {"a": "${X}"} in .env or an env_file is read as written, X substituted.
// This pins that, so that the hint above is not needed there.
func TestEnvFilesHaveNoFlowCollectionTrap(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"compose.yaml": "services:\n  web:\n    image: nginx\n    env_file: [web.env]\n    environment:\n      B: ${JSON}\n",
		".env":         "X=1\nJSON={\"a\": \"${X}\", \"b\": [${X}]}\n",
		"web.env":      "C={c: ${X}}\nD=[${X}]\n",
	})
	p, err := Load(context.Background(), []string{filepath.Join(dir, "compose.yaml")}, Options{})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := map[string]string{"B": `{"a": "1", "b": [1]}`, "C": "{c: 1}", "D": "[1]"}
	if got := p.Eggs[0].Env; !reflect.DeepEqual(got, want) {
		t.Errorf("env = %q, want %q", got, want)
	}
}
