package spec

import (
	"errors"
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

// An egg's pull policy reaches its inputs, the default (digest, written or
// not) as "", so both give equal inputs; Marshal writes back what is not
// the default.
func TestPullPolicyReachesTheInputsAndReadsBack(t *testing.T) {
	src := `project: shop
eggs:
  pinned: {image: "ghcr.io/acme/web:main"}
  digest: {image: "ghcr.io/acme/web:main", pull: digest}
  local: {image: "hatch-test-app:dev", pull: missing}
  fresh: {image: "ghcr.io/acme/web:main", pull: always}
`
	p, err := parse(src)
	if err != nil {
		t.Fatal(err)
	}
	rs, _ := p.Resources()
	got := map[string]string{}
	for _, r := range rs {
		if r.Type != resource.Egg {
			continue
		}
		in, err := inputs.Decode[inputs.Egg](r.Inputs)
		if err != nil {
			t.Fatal(err)
		}
		got[r.Name] = in.Pull
		if in.Digest != "" {
			t.Errorf("egg %s: the loader wrote digest %q: only the control plane does", r.Name, in.Digest)
		}
		if err := CheckResource(r, Limits{}); err != nil {
			t.Errorf("egg %s: CheckResource refuses what the loader wrote: %v", r.Name, err)
		}
	}
	want := map[string]string{"pinned": "", "digest": "", "local": "missing", "fresh": "always"}
	for name, pull := range want {
		if got[name] != pull {
			t.Errorf("egg %s: pull %q, want %q", name, got[name], pull)
		}
	}
	out, err := Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"pull: missing", "pull: always"} {
		if !strings.Contains(string(out), line) {
			t.Errorf("Marshal wrote no %q:\n%s", line, out)
		}
	}
	if strings.Contains(string(out), "pull: digest") {
		t.Errorf("Marshal wrote the default policy:\n%s", out)
	}
}

func TestPullPolicyErrors(t *testing.T) {
	src := `project: shop
eggs:
  web: {image: nginx, pull: sometimes}
  built: {build: ., pull: always}
`
	_, err := parse(src)
	var perr *Error
	if !errors.As(err, &perr) {
		t.Fatalf("err = %v, want a *Error", err)
	}
	checkDiagnostics(t, src, perr.Errors, []want{
		{"web: {", []string{`"sometimes" is not a pull policy`, "digest", "always", "missing"}},
		{"built: {", []string{"builds its image: pull: is for image:"}},
	})
}

// CheckResource refuses, in inputs sent to the control plane, a pull
// policy it does not know, one for a build, and a digest that is not one
// or that another policy would not use.
func TestCheckResourceRefusesAPullPolicyOrDigestThatCannotBe(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	for _, c := range []struct {
		name  string
		egg   map[string]any
		field string
	}{
		{"an unknown policy", map[string]any{"image": "nginx", "pull": "never"}, "inputs.pull"},
		{"a policy for a build", map[string]any{"build": map[string]any{"context": "."}, "pull": "always"}, "inputs.pull"},
		{"a digest with pull missing", map[string]any{"image": "nginx", "pull": "missing", "digest": digest}, "inputs.digest"},
		{"a digest that is none", map[string]any{"image": "nginx", "digest": "sha256:xyz"}, "inputs.digest"},
	} {
		r := &resource.Desired{Type: resource.Egg, Name: "web", Inputs: c.egg}
		err := CheckResource(r, Limits{})
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %v, want a refusal of %s", c.name, err, c.field)
		}
	}
	ok := &resource.Desired{Type: resource.Egg, Name: "web", Inputs: map[string]any{"image": "nginx", "digest": digest}}
	if err := CheckResource(ok, Limits{}); err != nil {
		t.Errorf("a digest with the default policy: %v", err)
	}
}
