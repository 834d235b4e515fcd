//go:build docker

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"

	"github.com/hatchery/hatchery/internal/testutil/dockertest"
	"github.com/hatchery/hatchery/internal/testutil/registrytest"
)

// registryProject is web from a private registry's tag, its login from
// registries: (left out when login is false), with a pull policy ("" for
// the default: the control plane pins the tag's digest at plan).
func registryProject(t *testing.T, ref, host string, login, autoRevert bool, pull string) string {
	t.Helper()
	yaml := fmt.Sprintf(`project: priv
secrets:
  reg_pass: {env: REG_PASS}
eggs:
  web:
    image: %s
    port: 8080
    health: {http: /healthz, interval: 1s, timeout: 1s}
    rollout: {auto_revert: %t, progress_deadline: 30s}
`, ref, autoRevert)
	if pull != "" {
		yaml += "    pull: " + pull + "\n"
	}
	if login {
		yaml += fmt.Sprintf("registries:\n  %q: {username: \"${env.REG_USER}\", password: \"${secret.reg_pass}\"}\n", host)
	}
	return filepath.Join(writeProject(t, map[string]string{"hatch.yaml": yaml}), "hatch.yaml")
}

// A private image deploys with the project's registries: login, pinned to
// its digest by the control plane with that login. A new tag without a
// login fails the plan, naming the registry; pulled by the hosts (pull:
// missing), without a login or with a wrong password, it fails the rollout
// with the registry's own words and its host while the old container keeps
// serving (and auto-revert puts the old spec back); the right login rolls
// to it.
// The password is in no log, CLI output, API answer or event (the
// cluster's secret check), and in no file under the data dirs in clear.
func TestClusterPullsAPrivateImageWithTheProjectsRegistryLogin(t *testing.T) {
	c := newCluster(t, clusterOptions{agents: []string{"a"}})
	a := c.agents["a"]
	reg := registrytest.Start(t)
	c.keepSecret(reg.Password)
	local := dockertest.Image(t, dockertest.ImageSpec{})
	repo := "hatchtest/e2e-" + dockertest.RunID()
	v1 := reg.Push(t, c.scope.Client, local, repo+":v1")
	// v2 is other bytes, so that its digest is another than v1's.
	v2 := reg.Push(t, c.scope.Client, dockertest.Image(t, dockertest.ImageSpec{Env: map[string]string{"APP_VERSION": "v2"}}), repo+":v2")
	t.Cleanup(func() {
		for _, ref := range []string{v1, v2} {
			_, _ = c.scope.Client.ImageRemove(context.WithoutCancel(t.Context()), ref, image.RemoveOptions{})
		}
	})
	right := []string{"REG_USER=" + reg.Username, "REG_PASS=" + reg.Password}
	wrong := []string{"REG_USER=" + reg.Username, "REG_PASS=not-the-password"}

	c.mustHatch(right, "apply", "-f", registryProject(t, v1, reg.Host, true, true, ""), "--yes")
	running := func() container.Summary {
		t.Helper()
		cs := c.projectContainers("default", "priv", "web", a.hostID)
		if len(cs) != 1 || cs[0].State != "running" {
			t.Fatalf("web runs %d containers (%v), want 1 running", len(cs), containerIDs(cs))
		}
		return cs[0]
	}
	first := running()
	if !pinnedTo(first.Image, v1) {
		t.Fatalf("web runs %s, want %s pinned to its digest", first.Image, v1)
	}

	// v2 without a login: the control plane cannot resolve it, and says
	// which registry refused.
	out, err := c.hatch(right, "plan", "-f", registryProject(t, v2, reg.Host, false, true, ""))
	if err == nil || !strings.Contains(out, "registry "+reg.Host) || !strings.Contains(out, "egg web") || !strings.Contains(strings.ToLower(out), "unauthorized") {
		t.Fatalf("hatch plan of v2 without a login: %v, want a failure naming the egg and the registry's refusal:\n%s", err, out)
	}

	// v2 without a login, pulled by the host, with auto-revert: the
	// rollout fails on the registry's refusal and v1's spec is put back.
	// (The apply's follow may see the revert before the failure: the
	// event says what happened.)
	out, _ = c.hatch(right, "apply", "-f", registryProject(t, v2, reg.Host, false, true, "missing"), "--yes")
	dockertest.Eventually(t, 30*time.Second, 200*time.Millisecond, func() error {
		reverted := strings.Join(c.eventMessages("rollout.reverted"), "\n")
		if !strings.Contains(reverted, "no basic auth credentials") || !strings.Contains(reverted, "registry "+reg.Host) {
			return fmt.Errorf("rollout.reverted events %q, want the registry's refusal (the apply said:\n%s)", reverted, out)
		}
		return nil
	})
	if now := running(); now.ID != first.ID {
		t.Fatalf("without a login: web's v1 container %s was replaced by %s", first.ID, now.ID)
	}

	// v2 with a wrong password, without auto-revert: the apply fails with
	// the registry's words and its host; v1 keeps serving.
	out, err = c.hatch(wrong, "apply", "-f", registryProject(t, v2, reg.Host, true, false, "missing"), "--yes")
	if err == nil || !strings.Contains(out, "unauthorized") || !strings.Contains(out, "registry "+reg.Host) {
		t.Fatalf("hatch apply of v2 with a wrong password: %v, want a failure with the registry's words and its host:\n%s", err, out)
	}
	if now := running(); now.ID != first.ID {
		t.Fatalf("with a wrong password: web's v1 container %s was replaced by %s", first.ID, now.ID)
	}

	// The right password: a new attempt at the same spec, which rolls.
	plan := c.mustHatch(right, "plan", "-f", registryProject(t, v2, reg.Host, true, false, ""))
	c.mustHatch(right, "apply", "-f", registryProject(t, v2, reg.Host, true, false, ""), "--yes")
	if now := running(); !pinnedTo(now.Image, v2) {
		t.Fatalf("after the apply with the right login web runs %s, want %s pinned", now.Image, v2)
	}
	// A cluster-wide login: a project without registries: pulls with it.
	passFile := filepath.Join(t.TempDir(), "registry-password")
	if err := os.WriteFile(passFile, []byte(reg.Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.mustHatch(nil, "registry", "login", reg.Host, "--username", reg.Username, "--password-file", passFile)
	if list := c.mustHatch(nil, "registry", "list"); !strings.Contains(list, reg.Host) || !strings.Contains(list, reg.Username) {
		t.Fatalf("hatch registry list:\n%s\nwant the login's host and user", list)
	}
	v3 := reg.Push(t, c.scope.Client, local, repo+":v3")
	t.Cleanup(func() {
		_, _ = c.scope.Client.ImageRemove(context.WithoutCancel(t.Context()), v3, image.RemoveOptions{})
	})
	c.mustHatch([]string{"REG_PASS=unused"}, "apply", "-f", registryProject(t, v3, reg.Host, false, false, ""), "--yes")
	if now := running(); !pinnedTo(now.Image, v3) {
		t.Fatalf("with the cluster's login web runs %s, want %s pinned", now.Image, v3)
	}
	c.mustHatch(nil, "registry", "logout", reg.Host)
	c.mustHatch(nil, "status", "priv")
	c.getJSON("/api/v1/projects/default/priv/status", nil)
	c.getJSON("/api/v1/projects/default/priv", nil)
	c.getJSON("/api/v1/hosts", nil)
	c.eventMessages("")
	if strings.Contains(plan, reg.Password) {
		t.Error("the plan shows the registry password")
	}

	// Every file the server and the agent keep: the password only sealed.
	err = filepath.Walk(c.dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || !info.Mode().IsRegular() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(data), reg.Password) {
			t.Errorf("%s holds the registry password in clear", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	c.mustHatch(nil, "destroy", "priv", "--yes")
}

// pinnedTo reports whether image is tag's repository pinned to a digest
// ("host/repo@sha256:...").
func pinnedTo(image, tag string) bool {
	repo := tag[:strings.LastIndex(tag, ":")]
	return strings.HasPrefix(image, repo+"@sha256:")
}
