package buildctx

import (
	"strings"
	"testing"
)

func TestIgnoreFollowsDockersRules(t *testing.T) {
	tests := []struct {
		name     string
		ignore   string
		excluded []string
		included []string
	}{
		{"no patterns", "", nil, []string{"a", "dir/b"}},
		{"a name is anchored at the root", "secret.txt", []string{"secret.txt"}, []string{"dir/secret.txt"}},
		{"a leading slash changes nothing", "/secret.txt", []string{"secret.txt"}, []string{"dir/secret.txt"}},
		{"a directory takes its contents", "node_modules", []string{"node_modules", "node_modules/x/y.js"}, []string{"src/node_modules"}},
		{"a star stays in its segment", "*.go", []string{"main.go"}, []string{"cmd/main.go", "go.mod"}},
		{"a star segment matches one level", "*/*.md", []string{"docs/a.md"}, []string{"a.md", "docs/x/a.md"}},
		{"double star matches any depth", "**/*.go", []string{"main.go", "a/b/c.go"}, []string{"go.mod"}},
		{"double star in the middle", "a/**/z", []string{"a/z", "a/b/z", "a/b/c/z/file"}, []string{"z", "b/z"}},
		{"an exception re-includes", "*\n!app", []string{"main.go", "sub/app"}, []string{"app"}},
		{"the last match wins", "!keep\n*", []string{"keep"}, nil},
		{"an exception inside an excluded directory", "dir\n!dir/keep", []string{"dir", "dir/other"}, []string{"dir/keep"}},
		{"comments and blank lines are skipped", "# *\n\n  \nx", []string{"x"}, []string{"y", "# *"}},
		{"patterns are cleaned", "./a/../b/", []string{"b", "b/c"}, []string{"a"}},
		{"character classes", "file[0-9]", []string{"file1"}, []string{"filex", "file10"}},
		{"question mark is one character", "?.txt", []string{"a.txt"}, []string{"ab.txt"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ig, err := ParseIgnore(strings.NewReader(tt.ignore))
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range tt.excluded {
				if !ig.Excluded(p) {
					t.Errorf("%q is included, want excluded", p)
				}
			}
			for _, p := range tt.included {
				if ig.Excluded(p) {
					t.Errorf("%q is excluded, want included", p)
				}
			}
		})
	}
}

func TestMalformedPatternIsRefusedWithItsLine(t *testing.T) {
	_, err := ParseIgnore(strings.NewReader("ok\n# fine\nbad[\n"))
	if err == nil || !strings.Contains(err.Error(), ".dockerignore:3:") {
		t.Fatalf("ParseIgnore = %v, want an error at line 3", err)
	}
}

func TestHasExceptions(t *testing.T) {
	for text, want := range map[string]bool{"": false, "a\nb": false, "a\n!b": true} {
		ig, err := ParseIgnore(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		if ig.HasExceptions() != want {
			t.Errorf("HasExceptions(%q) = %v, want %v", text, !want, want)
		}
	}
}
