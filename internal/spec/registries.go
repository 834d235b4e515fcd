package spec

import (
	"fmt"
	"sort"

	"go.yaml.in/yaml/v3"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

// Registry is one entry of `registries:`: the login for the images pulled
// from Host. Its password is a secret's (a file would otherwise hold it, and
// every plan show it), so it reaches only the hosts pulling from Host.
type Registry struct {
	Host string // host[:port], as image references name it
	Line int
	// Username is as written, ${env.*} substituted.
	Username string
	// Password is the secret holding the password, by name.
	Password string
}

// registries reads the `registries:` section: host: {username, password}.
// A password written literally is refused, not warned about: the file is
// meant to be committed, and the plan would show it.
func (d *decoder) registries(n *yaml.Node) []*Registry {
	var out []*Registry
	for _, f := range d.fields(n, "registries") {
		if !contract.ValidRegistryHost(f.Key) {
			d.errorf(f.Line, "registries: %q is not a registry host: write its hostname, with a port if it has one, as image references name it (ghcr.io, registry.example.com:5000; docker.io for Docker Hub)", f.Key)
			continue
		}
		r := &Registry{Host: f.Key, Line: f.Line}
		what := fmt.Sprintf("registry %q", f.Key)
		for _, g := range d.fields(f.Value, what, "username", "password") {
			switch g.Key {
			case "username":
				r.Username, _ = d.plain(g.Value, what+" username")
			case "password":
				r.Password = d.registryPassword(g, what)
			}
		}
		if r.Username == "" || r.Password == "" {
			d.errorf(f.Line, "%s needs a username and a password: {username: ${env.REGISTRY_USER}, password: ${secret.registry_token}}", what)
			continue
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Host < out[j].Host })
	return out
}

// registryPassword reads a registry's password: one ${secret.<name>}
// reference and nothing else. It returns the secret's name, or "" after
// reporting the problem.
func (d *decoder) registryPassword(g field, what string) string {
	var refs []lineRef
	text, ok := d.text(g.Value, what+" password", &refs)
	if !ok {
		return ""
	}
	var typ resource.Kind
	var name string
	if len(refs) == 1 {
		typ, name, _ = resource.SplitKey(refs[0].Key)
	}
	if typ != resource.Secret || text != refs[0].Ref.String() {
		d.errorf(g.Line, "%s password must be a secret, written ${secret.<name>} alone (define it under secrets:, from a file or a variable): a password written here would be in the file and in every plan", what)
		return ""
	}
	return name
}

// pullAuth returns the login for the registry image is pulled from, or nil
// when the project has none for it (or the egg builds its image).
func (p *Project) pullAuth(image string) *inputs.PullAuth {
	if image == "" {
		return nil
	}
	host := contract.ImageRegistry(unescape(image))
	for _, r := range p.Registries {
		if r.Host == host {
			return &inputs.PullAuth{Registry: r.Host, Username: escape(r.Username), Password: ref(resource.Secret, r.Password, inputs.OutputHandle)}
		}
	}
	return nil
}
