//go:build docker

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"

	"github.com/hatchery/hatchery/internal/testutil/dockertest"
	"github.com/hatchery/hatchery/internal/testutil/registrytest"
)

// pinProject is web from ref, a private registry's tag, one replica on
// each of two hosts, with the project's login for the registry.
func pinProject(t testing.TB, ref, host string) string {
	t.Helper()
	yaml := fmt.Sprintf(`project: pin
secrets:
  reg_pass: {env: REG_PASS}
registries:
  %q: {username: "${env.REG_USER}", password: "${secret.reg_pass}"}
eggs:
  web:
    image: %s
    replicas: 2
    port: 8080
    health: {http: /healthz, interval: 1s, timeout: 1s}
    rollout: {progress_deadline: 1m}
`, host, ref)
	return filepath.Join(writeProject(t, map[string]string{"hatch.yaml": yaml}), "hatch.yaml")
}

// pinnedRun is what web runs on each host: its containers' IDs and
// images, and the local image ID behind them.
type pinnedRun struct {
	ids      []string
	images   []string
	imageIDs []string
}

func (c *cluster) pinnedRun(t testing.TB) pinnedRun {
	t.Helper()
	var r pinnedRun
	for _, name := range []string{"a", "b"} {
		cs := c.projectContainers("default", "pin", "web", c.agents[name].hostID)
		if len(cs) != 1 || cs[0].State != "running" {
			t.Fatalf("host %s runs %d web containers (%v), want 1 running", name, len(cs), containerIDs(cs))
		}
		r.ids = append(r.ids, cs[0].ID)
		r.images = append(r.images, cs[0].Image)
		r.imageIDs = append(r.imageIDs, cs[0].ImageID)
	}
	return r
}

// runsDigest reports whether every host runs repo@digest, the bytes of
// the local image imageID.
func (r pinnedRun) runsDigest(repo, digest, imageID string) error {
	for i := range r.images {
		if r.images[i] != repo+"@"+digest || r.imageIDs[i] != imageID {
			return fmt.Errorf("host %d runs %s (image %s), want %s@%s (image %s)", i, r.images[i], r.imageIDs[i], repo, digest, imageID)
		}
	}
	return nil
}

// The control plane pins a tag to its digest at plan, so two hosts run the
// same bytes. The tag moved in the registry changes no running container;
// hatch plan shows the move; the apply rolls every replica to the new
// digest; hatch rollback runs the old digest again, though the tag is
// still at the new one.
func TestClusterPinsATagToItsDigestAndARollbackRunsTheOldBytesAfterTheTagMoved(t *testing.T) {
	c := newCluster(t, clusterOptions{})
	reg := registrytest.Start(t)
	c.keepSecret(reg.Password)
	env := []string{"REG_USER=" + reg.Username, "REG_PASS=" + reg.Password}
	one := dockertest.Image(t, dockertest.ImageSpec{Env: map[string]string{"APP_VERSION": "pin-1"}})
	two := dockertest.Image(t, dockertest.ImageSpec{Env: map[string]string{"APP_VERSION": "pin-2"}})
	imageID := func(ref string) string {
		in, err := c.scope.Client.ImageInspect(t.Context(), ref)
		if err != nil {
			t.Fatal(err)
		}
		return in.ID
	}
	repoPath := "hatchtest/pin-" + dockertest.RunID()
	repo := reg.Host + "/" + repoPath
	ref, first := reg.PushDigest(t, c.scope.Client, one, repoPath+":main")
	t.Cleanup(func() {
		for _, d := range []string{first} {
			_, _ = c.scope.Client.ImageRemove(context.WithoutCancel(t.Context()), repo+"@"+d, image.RemoveOptions{})
		}
	})
	file := pinProject(t, ref, reg.Host)

	c.mustHatch(env, "apply", "-f", file, "--yes")
	before := c.pinnedRun(t)
	if err := before.runsDigest(repo, first, imageID(one)); err != nil {
		t.Fatal(err)
	}

	// The tag moves: nothing running changes, over two converges of
	// every agent.
	_, second := reg.PushDigest(t, c.scope.Client, two, repoPath+":main")
	t.Cleanup(func() {
		_, _ = c.scope.Client.ImageRemove(context.WithoutCancel(t.Context()), repo+"@"+second, image.RemoveOptions{})
	})
	time.Sleep(2 * c.convergeInterval)
	if now := c.pinnedRun(t); strings.Join(now.ids, ",") != strings.Join(before.ids, ",") {
		t.Fatalf("the tag moved and web's containers changed: %v, were %v", now.ids, before.ids)
	}
	plan := c.mustHatch(env, "plan", "-f", file)
	moved := fmt.Sprintf("web: image %s moved %s… → %s…", ref, first[:19], second[:19])
	if !strings.Contains(plan, moved) || !strings.Contains(plan, "~ egg/web (digest)") {
		t.Fatalf("hatch plan after the tag moved:\n%s\nwant an update of web's digest and %q", plan, moved)
	}

	// The apply rolls both hosts to the new digest.
	began := time.Now()
	c.mustHatch(env, "apply", "-f", file, "--yes")
	dockertest.Eventually(t, time.Minute, 100*time.Millisecond, func() error {
		return c.pinnedRun(t).runsDigest(repo, second, imageID(two))
	})
	t.Logf("a moved tag's apply to every host running the new digest: %v", time.Since(began).Round(time.Millisecond))

	// A rollback: the first digest again, the tag still at the second.
	out := c.mustHatch(env, "rollback", "pin", "--yes")
	dockertest.Eventually(t, time.Minute, 100*time.Millisecond, func() error {
		return c.pinnedRun(t).runsDigest(repo, first, imageID(one))
	})
	again := c.mustHatch(env, "plan", "-f", file)
	if back := fmt.Sprintf("web: image %s moved %s… → %s…", ref, first[:19], second[:19]); !strings.Contains(again, back) {
		t.Fatalf("hatch rollback said:\n%s\nthen hatch plan:\n%s\nwant the tag shown at the second digest (%q)", out, again, back)
	}
}
