//go:build docker

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// The end-to-end scenarios of the CLI on a whole cluster: one
// server and two agents on the one Docker Engine (cluster_harness_test.go).
// What needs hosts apart (spreading over hosts, losing one) is tested on
// hosts of their own, in netcluster_test.go.

// spreadProject is an egg of the test app that references nothing, so it
// may go anywhere.
func spreadProject(t testing.TB, project string, replicas int, extra string) string {
	t.Helper()
	image := dockertest.Image(t, dockertest.ImageSpec{})
	return writeProject(t, map[string]string{"hatch.yaml": fmt.Sprintf(`project: %s
eggs:
  app:
    image: %s
    pull: missing
    replicas: %d
    port: 8080
    env: {APP_VERSION: v1}
    health: {http: /healthz, interval: 1s, timeout: 1s}
%s`, project, image, replicas, extra)})
}

func TestClusterRunsTheDemoAndAChangeOfWebRollsOnlyWeb(t *testing.T) {
	c := newCluster(t, clusterOptions{})
	dir := demoProject(t, "")
	file := filepath.Join(dir, "hatch.yaml")
	c.mustHatch(nil, "apply", "-f", file, "--yes")

	// web references kv's address but no longer runs beside it: its
	// replicas spread over both hosts, and those on the host without kv
	// reach it through that host's relay and the mesh.
	kv := c.projectContainers("default", "demo", "kv", "")
	if len(kv) != 1 {
		t.Fatalf("%d kv containers, want 1", len(kv))
	}
	webBefore := containerIDs(c.projectContainers("default", "demo", "web", ""))
	if len(webBefore) != 3 {
		t.Fatalf("%d web containers, want 3", len(webBefore))
	}
	kvHost := c.agentOf(kv[0].Labels)
	for _, a := range c.agents {
		if n := len(c.projectContainers("default", "demo", "web", a.hostID)); n == 0 {
			t.Fatalf("no web replica on %s: web should spread over both hosts", a.name)
		}
	}
	// Every host's ingress serves the demo, and the page it gets has kv's
	// count, whichever host's web replica made it.
	for _, a := range c.agents {
		page := c.demoPageWithVisits(a)
		if !strings.Contains(page, "version: 1\n") {
			t.Fatalf("the demo answered %q via %s", page, a.name)
		}
	}

	out := c.mustHatch([]string{"DEMO_VERSION=2"}, "apply", "-f", file, "--yes")
	if !strings.Contains(out, "~ egg/web (env)") || strings.Contains(out, "egg/kv (") {
		t.Fatalf("the plan of a new version of web:\n%s", out)
	}
	// The last replaced container may still be stopping when apply returns.
	dockertest.Eventually(t, 20*time.Second, 200*time.Millisecond, func() error {
		webAfter := containerIDs(c.projectContainers("default", "demo", "web", ""))
		if len(webAfter) != 3 || slices.ContainsFunc(webAfter, func(id string) bool { return slices.Contains(webBefore, id) }) {
			return fmt.Errorf("web containers %v after the roll, want 3 new ones (before: %v)", webAfter, webBefore)
		}
		return nil
	})
	if ids := containerIDs(c.projectContainers("default", "demo", "kv", "")); len(ids) != 1 || ids[0] != kv[0].ID {
		t.Fatalf("kv is now %v, want it untouched (%s)", ids, kv[0].ID)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if code, body, err := viaIngress(ctx, kvHost, "demo.localhost", "/version"); err != nil || code != 200 || body != "2\n" {
		t.Fatalf("/version after the roll = %d %q %v, want 2", code, body, err)
	}
	for _, a := range c.agents {
		if page := c.demoPageWithVisits(a); !strings.Contains(page, "version: 2\n") {
			t.Fatalf("the demo answered %q via %s after the roll", page, a.name)
		}
	}
}

func TestClusterDestroyRemovesEverythingButVolumesUnlessAsked(t *testing.T) {
	c := newCluster(t, clusterOptions{})
	dir := demoProject(t, "")
	c.mustHatch(nil, "apply", "-f", filepath.Join(dir, "hatch.yaml"), "--yes")
	// The project's containers are its 4 replicas and the relays that stand
	// for kv beside the web replicas of each host (one network per host).
	web, kv := len(c.projectContainers("default", "demo", "web", "")), len(c.projectContainers("default", "demo", "kv", ""))
	if cs, ns, vs := c.projectObjects("default", "demo"); web != 3 || kv != 1 || cs < 4 || ns != 2 || vs != 1 {
		t.Fatalf("deployed: %d web, %d kv, %d containers in all, %d networks, %d volumes; want 3, 1, 4 and relays, 2, 1", web, kv, cs, ns, vs)
	}
	out := c.mustHatch(nil, "destroy", "demo", "--yes")
	if !strings.Contains(out, "Every container of default/demo is gone.") {
		t.Fatalf("destroy:\n%s", out)
	}
	dockertest.Eventually(t, 30*time.Second, 250*time.Millisecond, func() error {
		if cs, ns, vs := c.projectObjects("default", "demo"); cs != 0 || ns != 0 || vs != 1 {
			return fmt.Errorf("%d containers, %d networks, %d volumes left; want only the volume", cs, ns, vs)
		}
		return nil
	})
	c.mustHatch(nil, "destroy", "demo", "--yes", "--volumes")
	dockertest.Eventually(t, 30*time.Second, 250*time.Millisecond, func() error {
		if cs, ns, vs := c.projectObjects("default", "demo"); cs+ns+vs != 0 {
			return fmt.Errorf("%d containers, %d networks, %d volumes left after --volumes", cs, ns, vs)
		}
		return nil
	})
}

func TestClusterNamespacesOfOneProjectRunSideBySide(t *testing.T) {
	c := newCluster(t, clusterOptions{})
	file := filepath.Join(spreadProject(t, "twin", 1, ""), "hatch.yaml")
	c.mustHatch(nil, "apply", "-f", file, "--yes", "-n", "staging")
	c.mustHatch(nil, "apply", "-f", file, "--yes", "-n", "production")
	production := containerIDs(c.projectContainers("production", "twin", "app", ""))
	if len(production) != 1 || len(c.projectContainers("staging", "twin", "app", "")) != 1 {
		t.Fatal("each namespace should run its own replica")
	}
	c.mustHatch(nil, "destroy", "twin", "--yes", "-n", "staging")
	if n := len(c.projectContainers("staging", "twin", "app", "")); n != 0 {
		t.Fatalf("staging still runs %d containers", n)
	}
	if ids := containerIDs(c.projectContainers("production", "twin", "app", "")); !slices.Equal(ids, production) {
		t.Fatalf("destroying staging touched production: %v, was %v", ids, production)
	}

	// A route is the host's: the second namespace's claim on it is refused
	// at plan, naming who holds it.
	routed := filepath.Join(spreadProject(t, "routed", 1, "    routes: [twin.localhost]\n    placement: {hosts: [a]}\n"), "hatch.yaml")
	c.mustHatch(nil, "apply", "-f", routed, "--yes", "-n", "staging")
	out, err := c.hatch(nil, "apply", "-f", routed, "--yes", "-n", "production")
	if err == nil || !strings.Contains(out, "twin.localhost") || !strings.Contains(out, "staging") {
		t.Fatalf("a route another namespace holds was not refused (err %v):\n%s", err, out)
	}
	if n := len(c.projectContainers("production", "routed", "app", "")); n != 0 {
		t.Fatalf("the refused plan started %d containers", n)
	}
}

func TestClusterKeepsSecretsOutOfLogsEventsAndAnswers(t *testing.T) {
	c := newCluster(t, clusterOptions{})
	value := "s3cret-" + randomWord()
	c.keepSecret(value)
	dir := writeProject(t, map[string]string{"hatch.yaml": fmt.Sprintf(`project: vault
eggs:
  app:
    image: %s
    pull: missing
    port: 8080
    env: {APP_VERSION: v1, KEY_IN_ENV: "${secret.key}"}
    health: {http: /healthz, interval: 1s, timeout: 1s}
    secrets: [key]
secrets:
  key: {env: VAULT_KEY}
`, dockertest.Image(t, dockertest.ImageSpec{}))})
	file := filepath.Join(dir, "hatch.yaml")
	env := []string{"VAULT_KEY=" + value}
	c.mustHatch(env, "plan", "-f", file)
	c.mustHatch(env, "apply", "-f", file, "--yes")
	// The value did reach the container (read there, not through the API).
	if got := c.readInContainer("vault", "/file?path=/run/secrets/key"); got != value {
		t.Fatalf("the container's /run/secrets/key holds %q, want the secret's value", got)
	}
	if got := c.readInContainer("vault", "/env/KEY_IN_ENV"); got != value {
		t.Fatalf("the container's KEY_IN_ENV holds %q, want the secret's value", got)
	}
	c.mustHatch(nil, "rollout", "restart", "vault/app")
	c.mustHatch([]string{"VAULT_KEY=" + value + "-rotated"}, "apply", "-f", file, "--yes")
	c.keepSecret(value + "-rotated")
	c.mustHatch(nil, "status")
	c.mustHatch(nil, "events")
	c.mustHatch(nil, "hosts")
	c.getJSON("/api/v1/events?limit=1000", nil)
	c.getJSON("/api/v1/hosts", nil)
	for _, a := range c.agents {
		c.getJSON("/api/v1/hosts/"+a.hostID, nil)
	}
	c.getJSON("/api/v1/projects", nil)
	var project struct {
		Applies []struct {
			ID int64 `json:"id"`
		} `json:"applies"`
	}
	c.getJSON("/api/v1/projects/default/vault", &project)
	for _, a := range project.Applies {
		c.getJSON(fmt.Sprintf("/api/v1/projects/default/vault/applies/%d", a.ID), nil)
	}
	c.mustHatch(nil, "destroy", "vault", "--yes", "--volumes")
	// The check itself runs when the test ends (newCluster's cleanup), over
	// everything recorded here and every log line of the run.
	if leaks := c.secretsFound(); len(leaks) > 0 {
		t.Fatalf("secrets found:\n%s", strings.Join(leaks, "\n"))
	}
}

func TestFindSecretsNamesEachSecretFound(t *testing.T) {
	found := findSecrets([]string{"a log line", `{"token": "hatch-host.SECRET1.ab"}`}, []string{"SECRET1", "SECRET2"})
	if len(found) != 1 || !strings.HasPrefix(found[0], "SECRET... found in: ") {
		t.Fatalf("found = %q, want SECRET1 alone", found)
	}
}

// readInContainer asks the test app in the project's one container of egg
// "app" for path: its GET /file?path= or /env/NAME endpoints.
func (c *cluster) readInContainer(project, path string) string {
	c.t.Helper()
	list := c.projectContainers("default", project, "app", "")
	if len(list) != 1 {
		c.t.Fatalf("%d containers of %s, want 1", len(list), project)
	}
	for _, n := range list[0].NetworkSettings.Networks {
		ctx, cancel := context.WithTimeout(c.t.Context(), 5*time.Second)
		defer cancel()
		code, body, err := dockertest.Get(ctx, "http://"+n.IPAddress+":8080"+path)
		if err != nil || code != 200 {
			c.t.Fatalf("read %s in the container: %d %v", path, code, err)
		}
		return body
	}
	c.t.Fatal("the container has no network")
	return ""
}

// demoPage GETs the demo's page through a host's ingress.
func (c *cluster) demoPage(a *clAgent) string {
	c.t.Helper()
	var page string
	dockertest.Eventually(c.t, 30*time.Second, 200*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(c.t.Context(), 5*time.Second)
		defer cancel()
		code, body, err := viaIngress(ctx, a, "demo.localhost", "/")
		if err != nil || code != 200 {
			return fmt.Errorf("GET demo.localhost via %s: %d %v", a.name, code, err)
		}
		page = body
		return nil
	})
	return page
}

// demoPageWithVisits is demoPage once every web replica behind a's ingress
// reaches kv: a few pages in a row, each with a visit count.
func (c *cluster) demoPageWithVisits(a *clAgent) string {
	c.t.Helper()
	var page string
	dockertest.Eventually(c.t, 30*time.Second, 200*time.Millisecond, func() error {
		for range 6 {
			page = c.demoPage(a)
			if !regexp.MustCompile(`visits: [0-9]+\n`).MatchString(page) {
				return fmt.Errorf("via %s the demo answered %q, without a visit count", a.name, page)
			}
		}
		return nil
	})
	return page
}

// agentOf is the agent whose host a container's labels name.
func (c *cluster) agentOf(labels map[string]string) *clAgent {
	c.t.Helper()
	for _, a := range c.agents {
		if labels["io.hatchery.host"] == a.hostID {
			return a
		}
	}
	c.t.Fatalf("no agent for host %q", labels["io.hatchery.host"])
	return nil
}

func randomWord() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// containerIDs returns the containers' IDs, sorted.
func containerIDs(list []container.Summary) []string {
	ids := make([]string, len(list))
	for i, s := range list {
		ids[i] = s.ID
	}
	slices.Sort(ids)
	return ids
}

// A job that restarts on failure and exited 0 is done: the apply walks on
// to the egg that waits for it, `hatch apply`'s follow ends, and `hatch
// status` says done. (The apply and the rollout status once read readiness
// by two rules: the first walked on, the second said progressing 0/1 for
// ever, so the follow never ended.)
func TestClusterAFinishedOnFailureJobIsDoneForTheApplyAndTheStatus(t *testing.T) {
	c := newCluster(t, clusterOptions{agents: []string{"a"}})
	image := dockertest.Image(t, dockertest.ImageSpec{})
	file := filepath.Join(writeProject(t, map[string]string{"hatch.yaml": fmt.Sprintf(`project: jobs
eggs:
  report:
    image: %[1]s
    pull: missing
    restart: on-failure
    env: {APP_JOB: "1"}
  web:
    image: %[1]s
    pull: missing
    port: 8080
    env: {APP_VERSION: v1}
    health: {http: /healthz, interval: 1s, timeout: 1s}
    depends_on: {report: {condition: completed}}
`, image)}), "hatch.yaml")

	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, "apply", "-f", file, "--yes")
	cmd.Dir, cmd.Env = c.dir, c.cliEnv()
	out, err := cmd.CombinedOutput()
	c.record(string(out))
	if ctx.Err() != nil {
		t.Fatalf("hatch apply still followed the rollouts after 90 s:\n%s", out)
	}
	if err != nil || !strings.Contains(string(out), "default/jobs is ready") {
		t.Fatalf("hatch apply: %v\n%s", err, out)
	}
	status := c.mustHatch(nil, "status", "jobs")
	for _, egg := range []string{"report", "web"} {
		if !regexp.MustCompile(`(?m)^\s*` + egg + `\s+1/1\s+done\b`).MatchString(status) {
			t.Errorf("hatch status does not say %s is done:\n%s", egg, status)
		}
	}
	c.mustHatch(nil, "destroy", "jobs", "--yes")
}
