package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const shop = "../../examples/shop/hatch.yaml"

// writeProject writes a project file in a fresh directory and returns its path.
func writeProject(t *testing.T, src string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hatch.yaml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestValidateTheExample(t *testing.T) {
	code, out, errOut := run(t, "validate", "-f", shop)
	if code != 0 || errOut != "" {
		t.Fatalf("hatch validate = %d, stderr %q", code, errOut)
	}
	if want := shop + ": ok (10 resources)\n"; out != want {
		t.Fatalf("stdout = %q, want %q", out, want)
	}
}

func TestValidatePrintsEveryErrorWithItsLine(t *testing.T) {
	path := writeProject(t, `project: shop
eggs:
  web:
    image: nginx
    replicas: 2
    volumes: ["data:/data"]
  api:
    imag: api
volumes:
  data: {}
`)
	code, out, errOut := run(t, "validate", "-f", path)
	if code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	if out != "" {
		t.Errorf("stdout = %q, want nothing", out)
	}
	lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
	want := []string{
		path + `:5: egg "web" mounts volume "data", so it runs at most one replica`,
		path + `:7: egg "api" needs build:`,
		path + `:8: egg "api": unknown field "imag": did you mean "image"?`,
	}
	if len(lines) != len(want) {
		t.Fatalf("stderr has %d lines, want %d:\n%s", len(lines), len(want), errOut)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d = %q\nwant it to start with %q", i+1, lines[i], w)
		}
	}
}

func TestValidateWarnsButSucceeds(t *testing.T) {
	path := writeProject(t, "project: shop\neggs:\n  web:\n    image: nginx\n    volumes: [\"/srv/html:/usr/share/nginx/html\"]\n")
	code, out, errOut := run(t, "validate", "-f", path)
	if code != 0 {
		t.Fatalf("exit code %d, want 0; stderr %q", code, errOut)
	}
	if !strings.HasPrefix(errOut, path+":5: warning: ") || !strings.Contains(errOut, "bind mount") {
		t.Errorf("stderr = %q, want a warning about the bind mount on line 5", errOut)
	}
	if out != path+": ok (2 resources)\n" {
		t.Errorf("stdout = %q", out)
	}
}

func TestValidateChecksWhatApplyWillRead(t *testing.T) {
	path := writeProject(t, `project: shop
eggs:
  web:
    image: "nginx:${env.HATCH_TEST_TAG}"
    secrets: [token]
secrets:
  token: {env: HATCH_TEST_TOKEN}
`)
	// Unset, and restored after the test as t.Setenv does.
	for _, name := range []string{"HATCH_TEST_TAG", "HATCH_TEST_TOKEN"} {
		t.Setenv(name, "")
		os.Unsetenv(name)
	}
	code, _, errOut := run(t, "validate", "-f", path)
	if code != 1 || !strings.Contains(errOut, path+":4: ") || !strings.Contains(errOut, "HATCH_TEST_TAG is not set") {
		t.Fatalf("with no variables: %d %q", code, errOut)
	}

	t.Setenv("HATCH_TEST_TAG", "1.27")
	code, _, errOut = run(t, "validate", "-f", path)
	if code != 1 || !strings.Contains(errOut, path+":7: ") || !strings.Contains(errOut, "HATCH_TEST_TOKEN is not set") {
		t.Fatalf("with the tag but no token: %d %q", code, errOut)
	}

	t.Setenv("HATCH_TEST_TOKEN", "s3cret")
	code, out, errOut := run(t, "validate", "-f", path)
	if code != 0 || errOut != "" || !strings.HasSuffix(out, ": ok (3 resources)\n") {
		t.Fatalf("with both: %d %q %q", code, out, errOut)
	}
	if strings.Contains(out+errOut, "s3cret") {
		t.Fatal("validate printed a secret's value")
	}
}

func TestValidateAMissingFile(t *testing.T) {
	code, _, errOut := run(t, "validate", "-f", filepath.Join(t.TempDir(), "nope.yaml"))
	if code != 1 || !strings.HasPrefix(errOut, "hatch: read project file: ") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("hatch validate of a missing file = %d %q", code, errOut)
	}
}

// TestValidateTheCIExample: examples/ci's project validates with what its
// workflow sets, and names the variable a pipeline forgot.
func TestValidateTheCIExample(t *testing.T) {
	const ci = "../../examples/ci/hatch.yaml"
	t.Setenv("GIT_SHA", "0123abc")
	t.Setenv("REGISTRY_USER", "ci-bot")
	t.Setenv("GHCR_TOKEN", "ghp_example")
	if code, out, errOut := run(t, "validate", "-f", ci); code != 0 || out != ci+": ok (4 resources)\n" {
		t.Fatalf("hatch validate = %d, stdout %q, stderr %q", code, out, errOut)
	}
	os.Unsetenv("GHCR_TOKEN")
	if code, _, errOut := run(t, "validate", "-f", ci); code != 1 || !strings.Contains(errOut, "GHCR_TOKEN is not set") {
		t.Fatalf("without GHCR_TOKEN: hatch validate = %d, stderr %q; want 1 naming it", code, errOut)
	}
}
