package provider

import (
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/store"
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

// A cluster-wide login reaches the workloads of its registry that have no
// login of their project's, at their placement and at once when it
// changes (SetClusterLogin), and leaves with a logout; a project's own
// login wins.
func TestAClusterLoginReachesTheWorkloadsWithoutAProjectLogin(t *testing.T) {
	e := newEnv(t, "h1")
	put := func(password string) {
		t.Helper()
		if err := e.st.PutRegistryLogin(t.Context(), store.RegistryLogin{Host: "registry.example.com:5000", Username: "cluster",
			Sealed: e.box.Seal([]byte(password)), Fingerprint: password + "-fp", UpdatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	put("cluster-pass-1")
	yaml := strings.Replace(registryYAML, "  public:\n    image: app:1\n", "  public:\n    image: app:1\n  shared:\n    image: registry.example.com:5000/shop/api:1\n", 1)
	yaml = strings.Replace(yaml, "  registry.example.com:5000: {username: ci, password: \"${secret.token}\"}\n", "", 1)
	yaml = strings.Replace(yaml, "registries:\n", "", 1)
	e.apply("default/shop", yaml, map[string]string{"token": "unused"})
	auth := func(egg string) *contract.RegistryAuth {
		w, _ := e.state("h1").Workload("default/shop/" + egg)
		return w.PullAuth
	}
	if a := auth("shared"); a == nil || a.Username != "cluster" || a.Password != "cluster-pass-1" {
		t.Fatalf("shared pulls with %+v, want the cluster's login", a.WithoutPassword())
	}
	if a := auth("public"); a != nil {
		t.Fatalf("public (Docker Hub) pulls with %+v", a.WithoutPassword())
	}
	put("cluster-pass-2")
	if err := e.set.SetClusterLogin(t.Context(), "registry.example.com:5000"); err != nil {
		t.Fatal(err)
	}
	if a := auth("shared"); a == nil || a.Password != "cluster-pass-2" {
		t.Fatal("the new cluster password did not reach the host at once")
	}
	if err := e.st.DeleteRegistryLogin(t.Context(), "registry.example.com:5000"); err != nil {
		t.Fatal(err)
	}
	if err := e.set.SetClusterLogin(t.Context(), "registry.example.com:5000"); err != nil {
		t.Fatal(err)
	}
	if a := auth("shared"); a != nil {
		t.Fatalf("after the logout shared still pulls with %+v", a.WithoutPassword())
	}
	// A project's own login is never replaced by the cluster's.
	put("cluster-pass-3")
	e.apply("default/shop", registryYAML, map[string]string{"token": "project-pass"})
	if err := e.set.SetClusterLogin(t.Context(), "registry.example.com:5000"); err != nil {
		t.Fatal(err)
	}
	if a := auth("private"); a == nil || a.Username != "ci" || a.Password != "project-pass" {
		t.Fatalf("private pulls with %+v, want its project's login", a.WithoutPassword())
	}
}
