//go:build docker

package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// rollbackProject writes a project of one egg, web, built from the test app
// (2 replicas behind the route and a published port for its line echo), and
// returns its directory.
func rollbackProject(t *testing.T, publish string) string {
	t.Helper()
	bin, err := dockertest.Binary("./test/app")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	dir := writeProject(t, map[string]string{
		"hatch.yaml": fmt.Sprintf(`project: rb
eggs:
  web:
    build: ./app
    replicas: 2
    port: 8080
    env: {APP_VERSION: "${env.APP_VERSION:-v1}", APP_ECHO_PORT: "%d", APP_COUNT_FILE: /count}
    health: {http: /healthz, interval: 1s, timeout: 1s, retries: 5}
    routes: [%s]
    ports: ["%s:%d"]
    stop_timeout: 5s
`, echoPort, routeHost, publish, echoPort),
		"app/Dockerfile": netAppImage.Dockerfile(),
	})
	if err := os.WriteFile(filepath.Join(dir, "app", "app"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// adminToken makes a named admin token and returns the environment that
// runs the CLI with it.
func (c *cluster) adminToken(name string) []string {
	c.t.Helper()
	out := c.hatchSecretly("token", "create", "--admin", "--name", name)
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "hatch-admin.") {
			tok := strings.TrimSpace(l)
			c.keepSecret(tokenSecret(tok))
			return []string{client.EnvToken + "=" + tok}
		}
	}
	c.t.Fatalf("hatch token create --admin printed no token:\n%s", out)
	return nil
}

func images(cs []container.Summary) []string {
	var out []string
	for _, ct := range cs {
		out = append(out, ct.Image)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// historyLine is a line of `hatch history`: apply, started, by, outcome,
// digest, changes.
var historyLine = regexp.MustCompile(`^(\d+)\s+\S+ \S+\s+(\S+)\s+(\S+)\s+(\S+)\s+(.*)$`)

// TestRollbackBringsAnEarlierSpecAndBuildBackWithoutAFailedRequest: alice
// applies v1, bob applies v2 (a new build and env); `hatch history` shows
// both with their names; alice's `hatch rollback` brings v1's image and env
// back under load through the ingress without one failed request, and the
// history shows it as a rollback to v1 by alice, with v1's digest.
func TestRollbackBringsAnEarlierSpecAndBuildBackWithoutAFailedRequest(t *testing.T) {
	c := newCluster(t, clusterOptions{agents: []string{"a"}})
	a := c.agents["a"]
	publish := clFreePort(t, a.ip)
	dir := rollbackProject(t, publish)
	file := filepath.Join(dir, "hatch.yaml")
	alice, bob := c.adminToken("alice"), c.adminToken("bob")

	c.mustHatch(append(alice, "APP_VERSION=v1"), "apply", "-f", file, "--yes")
	v1 := c.projectContainers("default", "rb", "web", a.hostID)
	// v2: another build (the Dockerfile changed) and another env.
	if err := os.WriteFile(filepath.Join(dir, "app", "Dockerfile"), []byte(netAppImage.Dockerfile()+"# v2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.mustHatch(append(bob, "APP_VERSION=v2"), "apply", "-f", file, "--yes")
	v2 := c.projectContainers("default", "rb", "web", a.hostID)
	if len(v1) != 2 || len(v2) != 2 || slices.Equal(images(v1), images(v2)) {
		t.Fatalf("web runs images %v at v1 and %v at v2: want 2 replicas each, from two builds", images(v1), images(v2))
	}

	out := c.mustHatch(nil, "history", "rb")
	var rows [][]string
	for _, l := range strings.Split(out, "\n") {
		if m := historyLine.FindStringSubmatch(l); m != nil {
			rows = append(rows, m[1:])
		}
	}
	if len(rows) != 2 || rows[0][1] != "bob" || rows[1][1] != "alice" || rows[0][2] != "succeeded" ||
		!strings.Contains(rows[0][4], "~ egg/web [env, source]") || rows[0][3] == rows[1][3] {
		t.Fatalf("hatch history rb:\n%s\nwant bob's apply of web's env and source over alice's, with different digests", out)
	}
	v1ID, v1Digest := rows[1][0], rows[1][3]

	// The roll back to v1, under load: 8 HTTP and 8 TCP clients through
	// the agent's ingress, until v2's containers are gone.
	target := ingressTarget{http: net.JoinHostPort(a.ip, a.ingressPort), tcp: net.JoinHostPort(a.ip, publish)}
	dockertest.Eventually(t, 30*time.Second, 100*time.Millisecond, func() error {
		if _, err := getThroughIngress(newLoadClient(), target.http, "/version"); err != nil {
			return err
		}
		return echo(target.tcp, "ready")
	})
	var rolled string
	report := underLoad(target, 5*time.Second, func() {
		rolled = c.mustHatch(alice, "rollback", "rb", "--yes")
		dockertest.Eventually(t, time.Minute, 200*time.Millisecond, func() error {
			now := c.projectContainers("default", "rb", "web", a.hostID)
			if len(now) != 2 || slices.ContainsFunc(now, func(ct container.Summary) bool { return slices.Contains(containerIDs(v2), ct.ID) }) {
				return fmt.Errorf("web runs %v, want 2 containers, none of v2's %v", containerIDs(now), containerIDs(v2))
			}
			return nil
		})
	})
	report.log(t, "rollback")
	report.requireTraffic(t, "rollback")
	for _, n := range []counts{report.gets, report.posts, report.echoes} {
		if n.failed != 0 {
			t.Errorf("rollback: %d of %d requests failed, want none", n.failed, n.total)
		}
	}
	if report.versions["v1"] == 0 || report.versions["v2"] == 0 {
		t.Errorf("the load got versions %v, want v2 then v1", report.versions)
	}
	if !strings.Contains(rolled, "Rolling default/rb back to apply "+v1ID) || !strings.Contains(rolled, "~ egg/web (env, source)") {
		t.Errorf("hatch rollback rb printed:\n%s\nwant the plan of web back to apply %s", rolled, v1ID)
	}
	if now := c.projectContainers("default", "rb", "web", a.hostID); !slices.Equal(images(now), images(v1)) {
		t.Errorf("after the rollback web runs %v, want v1's build %v", images(now), images(v1))
	}
	if v, err := getThroughIngress(newLoadClient(), target.http, "/version"); err != nil || v != "v1" {
		t.Errorf("after the rollback the ingress answers version %q (%v), want v1", v, err)
	}

	out = c.mustHatch(nil, "history", "rb")
	c.record(out)
	first := historyLine.FindStringSubmatch(strings.Split(out, "\n")[1])
	if first == nil || first[2] != "alice" || first[3] != "succeeded" || first[4] != v1Digest ||
		!strings.HasSuffix(first[5], "(rollback to "+v1ID+")") || strings.Count(out, "\n") != 5 {
		t.Fatalf("hatch history rb after the rollback:\n%s\nwant alice's rollback to %s on top, with its digest %s", out, v1ID, v1Digest)
	}
	if _, err := strconv.Atoi(first[1]); err != nil {
		t.Fatalf("history line %q", first[0])
	}
}
