package provider

import (
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/contract"
)

const registryYAML = `
project: shop
eggs:
  private:
    image: registry.example.com:5000/shop/web:1
  public:
    image: app:1
secrets:
  token: {env: TOKEN}
registries:
  registry.example.com:5000: {username: ci, password: "${secret.token}"}
`

// A registry login reaches the workloads pulling from that registry only,
// with the password's value; a new password reaches them too (the state's
// version changes) but rolls nothing (the spec hash leaves it out), and the
// stored state holds it sealed.
func TestARegistryLoginReachesOnlyItsImagesWorkloadsAndRollsNothing(t *testing.T) {
	e := newEnv(t, "h1")
	e.apply("default/shop", registryYAML, map[string]string{"token": "first-pass-1"})
	d := e.state("h1")
	private, _ := d.Workload("default/shop/private")
	if a := private.PullAuth; a == nil || a.Registry != "registry.example.com:5000" || a.Username != "ci" ||
		a.Password != "first-pass-1" || !strings.HasPrefix(a.Handle, "hatch-secret:token:") {
		t.Fatalf("private pulls with %+v, want the registry's login with its password", private.PullAuth.WithoutPassword())
	}
	if public, _ := d.Workload("default/shop/public"); public.PullAuth != nil || len(public.Secrets) != 0 {
		t.Fatalf("public pulls from Docker Hub, yet carries %+v and secrets %+v", public.PullAuth.WithoutPassword(), public.Secrets)
	}
	if len(private.Secrets) != 0 {
		t.Fatalf("private carries secrets %+v: the password is no secret file of its containers", private.Secrets)
	}
	hash, version := contract.SpecHash(private), d.Version

	e.apply("default/shop", registryYAML, map[string]string{"token": "second-pass-2"})
	d = e.state("h1")
	private, _ = d.Workload("default/shop/private")
	if private.PullAuth == nil || private.PullAuth.Password != "second-pass-2" {
		t.Fatal("the new password did not reach the host")
	}
	if contract.SpecHash(private) != hash {
		t.Error("a new registry password rolls the egg's containers")
	}
	if d.Version == version {
		t.Error("a new registry password left the state's version as it was: the agent would keep the old one")
	}
	stored, _ := e.st.DesiredState(t.Context(), "h1")
	if strings.Contains(string(stored.Doc), "-pass-") {
		t.Fatal("the stored desired state holds a registry password in clear")
	}
}
