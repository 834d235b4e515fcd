package spec

import (
	"errors"
	"testing"

	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

const registryProject = `project: shop
secrets:
  ghcr_token: {env: GHCR_TOKEN}
registries:
  ghcr.io: {username: "${env.REGION}-ci", password: "${secret.ghcr_token}"}
  127.0.0.1:5000: {username: local, password: "${secret.ghcr_token}"}
eggs:
  web: {image: "ghcr.io/acme/web:main"}
  api: {image: "127.0.0.1:5000/api:1"}
  hub: {image: nginx}
  built: {build: .}
`

// Each image egg gets the login of its image's registry, its password the
// secret's handle; an egg pulling from elsewhere, or building, gets none.
func TestRegistriesGiveEachEggItsRegistrysLogin(t *testing.T) {
	p, err := parse(registryProject)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Warnings) != 0 {
		t.Errorf("warnings %v: the secret is used by the registries, and both registries by an egg", p.Warnings)
	}
	rs, _ := p.Resources()
	got := map[string]*inputs.PullAuth{}
	for _, r := range rs {
		if r.Type != resource.Egg {
			continue
		}
		in, err := inputs.Decode[inputs.Egg](r.Inputs)
		if err != nil {
			t.Fatal(err)
		}
		got[r.Name] = in.PullAuth
		if err := CheckResource(r, Limits{}); err != nil {
			t.Errorf("egg %s: CheckResource refuses what the loader wrote: %v", r.Name, err)
		}
	}
	handle := "${secret/ghcr_token.handle}"
	if a := got["web"]; a == nil || *a != (inputs.PullAuth{Registry: "ghcr.io", Username: "us-ci", Password: handle}) {
		t.Errorf("web: pull auth %+v, want ghcr.io's", a)
	}
	if a := got["api"]; a == nil || *a != (inputs.PullAuth{Registry: "127.0.0.1:5000", Username: "local", Password: handle}) {
		t.Errorf("api: pull auth %+v, want 127.0.0.1:5000's", a)
	}
	if got["hub"] != nil || got["built"] != nil {
		t.Errorf("hub %+v, built %+v: want no login (Docker Hub has none here; a build pulls nothing)", got["hub"], got["built"])
	}
}

func TestRegistryErrors(t *testing.T) {
	src := `project: shop
secrets:
  tok: {env: TOK}
registries:
  https://ghcr.io: {username: a, password: "${secret.tok}"}
  ghcr.io/acme: {username: a, password: "${secret.tok}"}
  literal.example.com: {username: a, password: hunter2}
  mixed.example.com: {username: a, password: "x${secret.tok}"}
  undefined.example.com: {username: a, password: "${secret.nope}"}
  nouser.example.com: {password: "${secret.tok}"}
  extra.example.com: {username: a, password: "${secret.tok}", email: a@b}
eggs:
  web: {image: "literal.example.com/web:1"}
`
	_, err := parse(src)
	var perr *Error
	if !errors.As(err, &perr) {
		t.Fatalf("err = %v, want a *Error", err)
	}
	checkDiagnostics(t, src, perr.Errors, []want{
		{"https://ghcr.io", []string{`"https://ghcr.io" is not a registry host`, "ghcr.io"}},
		{"ghcr.io/acme", []string{"is not a registry host"}},
		{"literal.example.com: {", []string{"password must be a secret", "${secret.<name>}", "every plan"}},
		{"literal.example.com: {", []string{"needs a username and a password"}},
		{"mixed.example.com", []string{"password must be a secret"}},
		{"mixed.example.com", []string{"needs a username and a password"}},
		{"undefined.example.com", []string{`secret "nope", which is not defined`}},
		{"undefined.example.com", []string{"needs a username and a password"}},
		{"nouser.example.com", []string{"needs a username and a password"}},
		{"extra.example.com", []string{`unknown field "email"`}},
	})
}

// A registry no egg pulls from is a warning, like a secret nothing uses.
func TestAnUnusedRegistryWarns(t *testing.T) {
	src := `project: shop
secrets:
  tok: {env: TOK}
registries:
  ghcr.io: {username: a, password: "${secret.tok}"}
eggs:
  web: {image: nginx}
`
	p, err := parse(src)
	if err != nil {
		t.Fatal(err)
	}
	checkDiagnostics(t, src, p.Warnings, []want{
		{"tok: {env", []string{`secret "tok" is not used`}},
		{"secret.tok", []string{`registry "ghcr.io" is not the registry of any egg's image`}},
	})
}

// A control plane refuses a login sent for another registry than the
// image's, or with a literal password.
func TestCheckResourceRefusesABadPullAuth(t *testing.T) {
	p, err := parse(registryProject)
	if err != nil {
		t.Fatal(err)
	}
	rs, _ := p.Resources()
	var web *resource.Desired
	for _, r := range rs {
		if r.Key() == "egg/web" {
			web = r
		}
	}
	for field, edit := range map[string]func(a map[string]any){
		"inputs.pull_auth.registry": func(a map[string]any) { a["registry"] = "evil.example.com" },
		"inputs.pull_auth.password": func(a map[string]any) { a["password"] = "hunter2" },
		"inputs.pull_auth.username": func(a map[string]any) { a["username"] = "" },
	} {
		r := *web
		r.Inputs = resource.Clone(web.Inputs)
		edit(r.Inputs["pull_auth"].(map[string]any))
		var ierr *InputError
		if err := CheckResource(&r, Limits{}); !errors.As(err, &ierr) || ierr.Field != field {
			t.Errorf("%s changed: err %v, want an error on it", field, err)
		}
	}
}
