package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/spec"
)

// The Compose golden cases, converted by the compose package's tests.
const composeCases = "../compose/testdata"

func readGolden(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestConvertPrintsTheEquivalentHatchYAML(t *testing.T) {
	dir := filepath.Join(composeCases, "webapp")
	code, out, errOut := run(t, "convert", "-f", filepath.Join(dir, "compose.yaml"))
	if code != 0 || errOut != "" {
		t.Fatalf("hatch convert = %d, stderr %q", code, errOut)
	}
	if want := readGolden(t, filepath.Join(dir, "hatch.yaml.golden")); out != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out, want)
	}
}

func TestConvertMergesSeveralFiles(t *testing.T) {
	dir := filepath.Join(composeCases, "extends-overrides")
	code, out, errOut := run(t, "convert", "-f", filepath.Join(dir, "compose.yaml"), "-f", filepath.Join(dir, "compose.prod.yaml"))
	if code != 0 || errOut != "" {
		t.Fatalf("hatch convert = %d, stderr %q", code, errOut)
	}
	if want := readGolden(t, filepath.Join(dir, "hatch.yaml.golden")); out != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out, want)
	}
}

// What Hatchery ignores is a warning on stderr, with the file and line;
// --strict makes every one an error and prints nothing on stdout.
func TestConvertWarnsAndStrictRefuses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "compose.yaml")
	src := "services:\n  web:\n    image: nginx\n    privileged: true\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "convert", "-f", path)
	if code != 0 || !strings.Contains(out, "  web:\n    image: nginx\n") {
		t.Fatalf("hatch convert = %d, stdout %q", code, out)
	}
	if want := path + ":4: warning: service \"web\" privileged: not supported by Hatchery, ignored\n"; errOut != want {
		t.Errorf("stderr = %q, want %q", errOut, want)
	}

	code, out, errOut = run(t, "convert", "--strict", "-f", path)
	if code != 1 || out != "" {
		t.Fatalf("hatch convert --strict = %d, stdout %q", code, out)
	}
	if want := path + ":4: service \"web\" privileged: not supported by Hatchery, ignored\n"; errOut != want {
		t.Errorf("stderr = %q, want %q", errOut, want)
	}
}

func TestConvertABrokenComposeFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "compose.yaml")
	if err := os.WriteFile(path, []byte("services:\n  web:\n    image: nginx\n    stop_grace_period: 10 parsecs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "convert", "-f", path)
	if code != 1 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "hatch: load "+path+": ") ||
		!strings.Contains(errOut, "services[web].stop_grace_period") {
		t.Fatalf("hatch convert = %d %q %q, want one line naming the service and the key", code, out, errOut)
	}
}

// Given a hatch.yaml, convert prints its canonical form, which validates.
func TestConvertAHatchYAML(t *testing.T) {
	code, out, errOut := run(t, "convert", "-f", shop)
	if code != 0 || errOut != "" || !strings.HasPrefix(out, "project: shop\neggs:\n") {
		t.Fatalf("hatch convert = %d %q %q", code, out, errOut)
	}
	// Beside what the shop's file names (build contexts, the secret's file).
	dir := t.TempDir()
	entries, err := os.ReadDir(filepath.Dir(shop))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		abs, err := filepath.Abs(filepath.Join(filepath.Dir(shop), e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(abs, filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "converted.yaml")
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := run(t, "validate", "-f", path); code != 0 || out != path+": ok (10 resources)\n" {
		t.Fatalf("the canonical shop does not validate: %d %q %q", code, out, errOut)
	}
}

func TestValidateAComposeFile(t *testing.T) {
	path := filepath.Join(composeCases, "webapp", "compose.yaml")
	code, out, errOut := run(t, "validate", "-f", path)
	if code != 0 || errOut != "" {
		t.Fatalf("hatch validate = %d, stderr %q", code, errOut)
	}
	// Three eggs, their volume and the project's default network.
	if want := path + ": ok (5 resources)\n"; out != want {
		t.Errorf("stdout = %q, want %q", out, want)
	}
}

// validate checks what apply will read of a Compose project too: a secret's
// file must exist.
func TestValidateAComposeFileChecksItsSources(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "compose.yaml")
	src := "services:\n  web:\n    image: nginx\n    secrets: [key]\nsecrets:\n  key:\n    file: ./key.txt\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := run(t, "validate", "-f", path)
	if code != 1 || !strings.HasPrefix(errOut, path+`:6: secret "key": its file `+filepath.Join(dir, "key.txt")+" does not exist") {
		t.Fatalf("hatch validate = %d %q", code, errOut)
	}
	if err := os.WriteFile(filepath.Join(dir, "key.txt"), []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := run(t, "validate", "-f", path); code != 0 || !strings.HasSuffix(out, ": ok (3 resources)\n") {
		t.Fatalf("with the file: %d %q %q", code, out, errOut)
	}
}

func TestValidateAComposeFileWithErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "docker-compose.yml")
	src := "services:\n  db:\n    image: postgres\n    volumes: [data:/data]\n    deploy:\n      replicas: 2\nvolumes:\n  data:\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "validate", "-f", path)
	if code != 1 || out != "" || !strings.HasPrefix(errOut, path+":6: egg \"db\" mounts volume \"data\", so it runs at most one replica") {
		t.Fatalf("hatch validate = %d %q %q", code, out, errOut)
	}
}

func TestGraphOfAComposeFile(t *testing.T) {
	code, out, errOut := run(t, "graph", "-f", filepath.Join(composeCases, "migrations", "compose.yaml"))
	if code != 0 || errOut != "" {
		t.Fatalf("hatch graph = %d, stderr %q", code, errOut)
	}
	pos := map[string]int{}
	for i, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		pos[strings.Fields(l)[0]] = i
	}
	for _, edge := range [][2]string{
		{"volume/db", "egg/db"}, {"egg/db", "egg/migrate"}, {"egg/migrate", "egg/app"}, {"egg/migrate", "egg/seed"},
		{"egg/app", "route/app.localhost"}, {"egg/app", "route/api.localhost/v1"},
	} {
		if _, ok := pos[edge[0]]; !ok || pos[edge[0]] >= pos[edge[1]] {
			t.Errorf("%s is not listed before %s:\n%s", edge[0], edge[1], out)
		}
	}
	if !strings.Contains(out, "<- egg/db (healthy), egg/migrate (completed), network/default\n") {
		t.Errorf("egg/app's parents and conditions are not shown:\n%s", out)
	}
}

func TestConvertEnablesProfiles(t *testing.T) {
	path := filepath.Join(composeCases, "profiles", "compose.yaml")
	for _, tc := range []struct {
		args []string
		eggs []string
	}{
		{nil, []string{"app", "db"}},
		{[]string{"--profile", "debug"}, []string{"adminer", "app", "db"}},
		{[]string{"--profile", "debug", "--profile", "tools"}, []string{"adminer", "app", "db", "migrate"}},
	} {
		code, out, errOut := run(t, append([]string{"convert", "-f", path}, tc.args...)...)
		if code != 0 {
			t.Fatalf("hatch convert %v = %d %q", tc.args, code, errOut)
		}
		p, err := spec.Parse([]byte(out), path, spec.Options{})
		if err != nil {
			t.Fatalf("the output does not load: %v", err)
		}
		var eggs []string
		for _, e := range p.Eggs {
			eggs = append(eggs, e.Name)
		}
		if strings.Join(eggs, ",") != strings.Join(tc.eggs, ",") {
			t.Errorf("hatch convert %v gives eggs %v, want %v", tc.args, eggs, tc.eggs)
		}
	}
}
