//go:build docker

package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// Compose end to end: an existing Docker Compose project, written as users
// write them, run with `hatch up -f compose.yaml` on the real engine. Its
// web service is built from the demo's front end (3 replicas, a published
// port, a Compose healthcheck, a start-first update_config), and its
// kv_store service is the demo's key-value store on a named volume, which
// web reaches by its Compose service name. Values come from .env.
//
// What Compose itself cannot do is what the test checks: a change in .env
// rolls web's three replicas under a steady load through the published
// port, and not one request fails; kv_store is left alone meanwhile, and
// when it is changed in turn, its data outlives its container.

const (
	composeNamespace = "default"
	composeFile      = "compose.yaml"
	// kvEgg is the Compose service kv_store once mapped to an egg name; web
	// still reaches it as kv_store, which stays an alias.
	kvEgg = "kv-store"
	// webHealthcheck and kvHealthcheck are the services' Compose
	// healthchecks: the test app's -check, copied into each image, since a
	// FROM scratch image has no curl. Their timeout is 5 s: an exec takes
	// over a second on a loaded 2-core machine, and a check that times out
	// restarts a healthy replica mid-roll.
	webHealthcheck = `["CMD", "/healthcheck", "-check"]`
	kvHealthcheck  = `["CMD", "/healthcheck", "-check", "-check-url", "http://127.0.0.1:8081/healthz"]`
)

// composeYAML is the project's compose.yaml; %s is its name, unique per
// run. WEB_PORT, WEB_VERSION and KV_LOG_LEVEL come from .env.
const composeYAML = `# A small shop: a front end with three replicas, and the key-value
# store that counts its visits, keeping them on a named volume.
name: %s

services:
  web:
    build: ./web
    environment:
      VERSION: ${WEB_VERSION:?set WEB_VERSION in .env}
      KV_URL: http://kv_store:8081
    ports:
      - "${WEB_PORT}:8080"
    healthcheck:
      test: ` + webHealthcheck + `
      interval: 1s
      timeout: 5s
      retries: 3
    depends_on:
      kv_store:
        condition: service_healthy
    deploy:
      replicas: 3
      update_config:
        parallelism: 1
        order: start-first

  kv_store:
    build: ./kv
    environment:
      DATA_DIR: /data
      LOG_LEVEL: ${KV_LOG_LEVEL:-info}
    expose: ["8081"]
    volumes:
      - visits:/data
    healthcheck:
      test: ` + kvHealthcheck + `
      interval: 1s
      timeout: 5s
    stop_grace_period: 5s

volumes:
  visits:
`

// composeRun is the Compose project in its directory, and the hatch up
// that runs it.
type composeRun struct {
	t       *testing.T
	u       *upRun
	name    string // the Compose project's name, and so Hatchery's
	webAddr string // web's published port, 127.0.0.1:<port>
	hostID  string // up's agent, once it runs
}

// newComposeRun writes the project: compose.yaml, .env, and a build
// context per service with its static binary and the test app as its
// healthcheck.
func newComposeRun(t *testing.T) *composeRun {
	t.Helper()
	name := "shop-" + dockertest.RunID() // the run's ID is unique to the test process
	port := clFreePort(t, "127.0.0.1")
	dir := writeProject(t, map[string]string{
		composeFile:      fmt.Sprintf(composeYAML, name),
		"web/Dockerfile": "FROM scratch\nCOPY web /web\nCOPY healthcheck /healthcheck\nENTRYPOINT [\"/web\"]\n",
		"kv/Dockerfile":  "FROM scratch\nCOPY kv /kv\nCOPY healthcheck /healthcheck\nENTRYPOINT [\"/kv\"]\n",
	})
	copyBinary(t, "./examples/demo/web", filepath.Join(dir, "web", "web"))
	copyBinary(t, "./examples/demo/kv", filepath.Join(dir, "kv", "kv"))
	for _, ctx := range []string{"web", "kv"} {
		copyBinary(t, "./test/app", filepath.Join(dir, ctx, "healthcheck"))
	}
	c := &composeRun{t: t, name: name, webAddr: net.JoinHostPort("127.0.0.1", port)}
	c.u = newUpRun(t, dir)
	c.u.file, c.u.publish = composeFile, "127.0.0.1"
	c.writeEnv(map[string]string{"WEB_PORT": port, "WEB_VERSION": "1", "KV_LOG_LEVEL": "info"})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("hatch up's log (last 80 lines):\n%s", c.logTail(80))
		}
	})
	return c
}

// logTail is the end of hatch up's log: what the control plane and the
// agent decided.
func (c *composeRun) logTail(n int) string {
	b, err := os.ReadFile(filepath.Join(c.u.dir, ".hatch", "hatch.log"))
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// copyBinary builds pkg (once per run) and copies it to path, executable.
func copyBinary(t testing.TB, pkg, path string) {
	t.Helper()
	bin, err := dockertest.Binary(pkg)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

// writeEnv writes the project's .env, as a user edits it.
func (c *composeRun) writeEnv(vars map[string]string) {
	c.t.Helper()
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		fmt.Fprintf(&b, "%s=%s\n", k, vars[k])
	}
	if err := os.WriteFile(filepath.Join(c.u.dir, ".env"), []byte(b.String()), 0o644); err != nil {
		c.t.Fatal(err)
	}
}

// setEnv changes one variable of .env, keeping the others.
func (c *composeRun) setEnv(key, value string) {
	c.t.Helper()
	data, err := os.ReadFile(filepath.Join(c.u.dir, ".env"))
	if err != nil {
		c.t.Fatal(err)
	}
	vars := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		vars[k] = v
	}
	vars[key] = value
	c.writeEnv(vars)
}

// readyLine is what hatch up and hatch apply print once every egg runs.
func (c *composeRun) readyLine() string {
	return composeNamespace + "/" + c.name + " is ready: " + kvEgg + " 1/1, web 3/3."
}

// readHostID reads the host ID of up's agent from its identity file.
func (c *composeRun) readHostID() {
	c.t.Helper()
	data, err := os.ReadFile(filepath.Join(c.u.dir, ".hatch", "agent", "identity.json"))
	if err != nil {
		c.t.Fatal(err)
	}
	var id struct {
		HostID string `json:"host_id"`
	}
	if err := json.Unmarshal(data, &id); err != nil || id.HostID == "" {
		c.t.Fatalf("identity.json: host_id %q, %v", id.HostID, err)
	}
	c.hostID = id.HostID
}

// running inspects the egg's running containers on up's host, by ID.
func (c *composeRun) running(egg string) []container.InspectResponse {
	c.t.Helper()
	cl := &cluster{t: c.t, scope: c.u.scope}
	var out []container.InspectResponse
	for _, s := range cl.projectContainers(composeNamespace, c.name, egg, c.hostID) {
		info, err := c.u.scope.Client.ContainerInspect(c.t.Context(), s.ID)
		switch {
		case cerrdefs.IsNotFound(err):
			continue // removed since the list: a roll's old container
		case err != nil:
			c.t.Fatal(err)
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b container.InspectResponse) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// checkOnlyRelaysCarryNames checks that each of the services' names is
// carried as a network alias, and by relays alone: Docker's DNS answers a
// name with every container carrying it, so a replica carrying one would be
// reached directly part of the time, booting or draining.
func (c *composeRun) checkOnlyRelaysCarryNames(names ...string) {
	c.t.Helper()
	carried := map[string]bool{}
	for _, ct := range c.running("") {
		egg := ct.Config.Labels[containers.LabelEgg]
		relay := strings.Contains(egg, ".relay-") // the agent's relays are "<egg>.relay-<network hash>"
		for network, ep := range ct.NetworkSettings.Networks {
			for _, a := range ep.Aliases {
				if !slices.Contains(names, a) {
					continue
				}
				carried[a] = true
				if !relay {
					c.t.Errorf("%s's container %s carries the name %q on %s: only relays may", egg, ct.ID[:12], a, network)
				}
			}
		}
	}
	for _, n := range names {
		if !carried[n] {
			c.t.Errorf("no relay carries the name %q", n)
		}
	}
}

func inspectedIDs(cs []container.InspectResponse) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}

// createForeign sets objects beside the project that Hatchery must leave
// alone, even `hatch destroy --volumes`: unlabelled ones named as up's agent
// would name the project's in another namespace, and ones labelled as
// another host's agent labels this very project's web.
func (c *composeRun) createForeign() *dockertest.Foreign {
	c.t.Helper()
	other := contract.WorkloadSpec{Namespace: composeNamespace, Project: c.name, Egg: "web", Image: "other", Replicas: 1}
	return c.u.scope.CreateForeign(dockertest.ForeignOptions{
		Image:           dockertest.Image(c.t, dockertest.ImageSpec{}),
		ContainerName:   contract.ContainerName("other-ns", c.name, "web", 0, c.hostID, "f00f00"),
		NetworkName:     contract.NetworkName(c.hostID, "other-ns", c.name, "default"),
		VolumeName:      contract.VolumeName(c.hostID, "other-ns", c.name, "visits"),
		OtherHostLabels: containers.Labels("h-other-"+c.hostID, other, 0, contract.SpecHash(other)),
	})
}

// webPage is what web's GET / says.
type webPage struct {
	replica, version string
	visits           int
}

// getPage asks web for its page on the published port and reads it; a page
// without a visit count (kv_store did not answer web) is an error.
func getPage(client *http.Client, addr string) (webPage, error) {
	body, err := send(client, http.MethodGet, "http://"+addr+"/", "", "")
	if err != nil {
		return webPage{}, err
	}
	return parsePage(body)
}

// parsePage reads web's page; one without a visit count (kv did not answer
// web) is an error.
func parsePage(body string) (webPage, error) {
	var p webPage
	var err error
	visits := ""
	for _, line := range strings.Split(body, "\n") {
		k, v, _ := strings.Cut(line, ": ")
		switch k {
		case "replica":
			p.replica = v
		case "version":
			p.version = v
		case "visits":
			visits = v
		}
	}
	if p.visits, err = strconv.Atoi(visits); err != nil {
		return p, fmt.Errorf("GET /: no visit count in %q", body)
	}
	return p, nil
}

// freshClient opens a new connection for every request, so that the
// published port's pick of a replica is made anew each time.
func freshClient() *http.Client {
	return &http.Client{Timeout: loadTimeout, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
}

// TestComposeProjectRollsUnderLoadWithoutAFailedRequest is the Compose end
// to end test: hatch up of a Compose project; web answers on its published
// port from its three replicas, each passing its Compose healthcheck as a
// Docker HEALTHCHECK, and counts visits in kv_store; a new WEB_VERSION in
// .env rolls web under load with no failed request and no lost or doubled
// visit, while kv_store keeps its container; a change of kv_store replaces
// its container and its data stays; hatch destroy --volumes removes the
// project and nothing else.
func TestComposeProjectRollsUnderLoadWithoutAFailedRequest(t *testing.T) {
	c := newComposeRun(t)
	up := c.u.start()
	up.waitLine(t, c.readyLine(), 3*time.Minute)
	c.readHostID()
	foreign := c.createForeign()

	web, kv := c.running("web"), c.running(kvEgg)
	if len(web) != 3 || len(kv) != 1 {
		t.Fatalf("%d web and %d %s containers run, want 3 and 1", len(web), len(kv), kvEgg)
	}
	c.checkHealthchecks(web, webHealthcheck)
	c.checkHealthchecks(kv, kvHealthcheck)
	c.checkOnlyRelaysCarryNames("web", kvEgg, "kv_store")

	// Web answers on the published port, from each replica, counting each
	// visit in kv_store, which it reaches by its Compose service name.
	_, last := c.checkEveryReplicaAnswers(web, "1")

	// Roll web: a new version in .env, applied from another terminal.
	c.setEnv("WEB_VERSION", "2")
	var out string
	report := underVisitLoad(c.webAddr, func() {
		out = c.u.hatch("apply", "-f", composeFile, "--yes")
		// The load goes on until the last old replica is drained and gone:
		// a request it cut would be a failure of the roll.
		dockertest.Eventually(t, time.Minute, 200*time.Millisecond, func() error {
			if now := c.running("web"); len(now) != 3 || slices.ContainsFunc(now, func(n container.InspectResponse) bool {
				return slices.Contains(inspectedIDs(web), n.ID)
			}) {
				return fmt.Errorf("web runs %v; want 3 containers, none of %v", inspectedIDs(now), inspectedIDs(web))
			}
			return nil
		})
	})
	report.log(t)
	if !strings.Contains(out, c.readyLine()) {
		t.Errorf("hatch apply did not end ready:\n%s", out)
	}
	report.check(t, []string{"1", "2"})

	rolled := c.running("web")
	c.checkHealthchecks(rolled, webHealthcheck)
	first, page := c.checkEveryReplicaAnswers(rolled, "2")
	// Every visit of the load was counted once: none was lost by a request
	// cut mid-way, and none was counted twice by a replay.
	if want := last.visits + report.visits.total + 1; report.visits.failed == 0 && first.visits != want {
		t.Errorf("visits: the first after the roll is %d; %d before it, the load's %d and this one make %d",
			first.visits, last.visits, report.visits.total, want)
	}
	if now := c.running(kvEgg); len(now) != 1 || now[0].ID != kv[0].ID || now[0].State.StartedAt != kv[0].State.StartedAt {
		t.Errorf("rolling web touched %s: it runs %v, was %s started at %s", kvEgg, inspectedIDs(now), kv[0].ID[:12], kv[0].State.StartedAt)
	}

	// Change kv_store: its container is replaced (stop-first, it has a
	// volume), web is left alone, and the visits are still counted on.
	// The kv app ignores LOG_LEVEL: what matters is that it is part of the
	// container's spec.
	c.setEnv("KV_LOG_LEVEL", "debug")
	if out := c.u.hatch("apply", "-f", composeFile, "--yes"); !strings.Contains(out, c.readyLine()) {
		t.Errorf("hatch apply of the kv_store change did not end ready:\n%s", out)
	}
	newKV := c.running(kvEgg)
	if len(newKV) != 1 || newKV[0].ID == kv[0].ID {
		t.Fatalf("%s runs %v after its change; want one new container, not %s", kvEgg, inspectedIDs(newKV), kv[0].ID[:12])
	}
	c.checkHealthchecks(newKV, kvHealthcheck)
	c.checkOnlyRelaysCarryNames("web", kvEgg, "kv_store")
	if got, want := volumeNames(newKV[0]), volumeNames(kv[0]); !slices.Equal(got, want) || len(got) != 1 {
		t.Errorf("the new %s container mounts %v, want the same named volume %v", kvEgg, got, want)
	}
	if now := c.running("web"); !slices.Equal(inspectedIDs(now), inspectedIDs(rolled)) {
		t.Errorf("changing %s rolled web: %v, was %v", kvEgg, inspectedIDs(now), inspectedIDs(rolled))
	}
	after, err := getPage(freshClient(), c.webAddr)
	if err != nil || after.visits != page.visits+1 {
		t.Errorf("after %s was replaced, a visit counted %d (%v); want %d, its data kept on the volume", kvEgg, after.visits, err, page.visits+1)
	}

	// Destroy from the directory: the project's containers, network and
	// volume go, and nothing else.
	c.u.hatch("destroy", c.name, "--yes", "--volumes")
	cl := &cluster{t: t, scope: c.u.scope}
	if cs, ns, vs := cl.projectObjectsOn(composeNamespace, c.name, c.hostID); cs+ns+vs != 0 {
		t.Errorf("after hatch destroy --volumes: %d containers, %d networks, %d volumes of the project left", cs, ns, vs)
	}
	foreign.AssertUntouched(t)
	interrupt(t, up)
	c.u.checkLogsHoldNoToken()
}

// checkHealthchecks checks that the containers run the Compose healthcheck
// as their Docker HEALTHCHECK, and that Docker finds them healthy.
func (c *composeRun) checkHealthchecks(cs []container.InspectResponse, test string) {
	c.t.Helper()
	var want []string
	if err := json.Unmarshal([]byte(test), &want); err != nil {
		c.t.Fatal(err)
	}
	for _, ct := range cs {
		if ct.Config.Healthcheck == nil || !slices.Equal(ct.Config.Healthcheck.Test, want) {
			c.t.Errorf("%s: HEALTHCHECK %+v, want %v", ct.ID[:12], ct.Config.Healthcheck, want)
		}
		if ct.State.Health == nil || ct.State.Health.Status != "healthy" {
			c.t.Errorf("%s: Docker's health %+v, want healthy", ct.ID[:12], ct.State.Health)
		}
	}
}

// checkEveryReplicaAnswers asks web's published port for its page on fresh
// connections until each of cs has answered, each answer at version and
// one visit more than the previous, and returns the first and last pages.
func (c *composeRun) checkEveryReplicaAnswers(cs []container.InspectResponse, version string) (first, last webPage) {
	c.t.Helper()
	want := map[string]bool{}
	for _, ct := range cs {
		want[ct.ID[:12]] = true // Docker names a container's host after its short ID
	}
	client := freshClient()
	seen := map[string]bool{}
	for i := 0; len(seen) < len(want) && i < 30; i++ {
		p, err := getPage(client, c.webAddr)
		switch {
		case err != nil:
			c.t.Fatalf("web on %s: %v", c.webAddr, err)
		case !want[p.replica]:
			c.t.Fatalf("web on %s answered from %q, not one of %v", c.webAddr, p.replica, slices.Sorted(maps.Keys(want)))
		case p.version != version:
			c.t.Fatalf("web on %s answered version %q, want %q", c.webAddr, p.version, version)
		case i > 0 && p.visits != last.visits+1:
			c.t.Fatalf("web on %s counted visit %d after %d: kv_store lost or doubled one", c.webAddr, p.visits, last.visits)
		}
		if i == 0 {
			first = p
		}
		seen[p.replica], last = true, p
	}
	if len(seen) < len(want) {
		c.t.Fatalf("in 30 requests on fresh connections, web answered from %v only, want each of %v", slices.Sorted(maps.Keys(seen)), slices.Sorted(maps.Keys(want)))
	}
	return first, last
}

// volumeNames lists the named volumes a container mounts.
func volumeNames(ct container.InspectResponse) []string {
	var out []string
	for _, m := range ct.Mounts {
		if m.Type == "volume" {
			out = append(out, m.Name)
		}
	}
	return out
}

// visitLoad is loadClients HTTP clients, each with its own keep-alive
// connection to web's published port (as a browser or an API client keeps
// one), sending one request after the other until stopped: alternately GET
// /version (the version that answered is kept) and GET /, a visit that web
// counts in kv_store. A non-2xx answer, a transport error and a page
// without a count are failures.
type visitLoad struct {
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	began    time.Time
	took     time.Duration

	versionGets, visits tally

	mu       sync.Mutex // guards versions
	versions map[string]int
}

// underVisitLoad runs action with the load on, then stops the load and
// returns what it saw.
func underVisitLoad(addr string, action func()) visitReport {
	l := &visitLoad{stop: make(chan struct{}), began: time.Now(), versions: map[string]int{}}
	deadline := l.began.Add(loadLimit)
	for range loadClients {
		l.wg.Go(func() { l.client(addr, deadline) })
	}
	defer l.finish()
	action()
	return l.finish()
}

func (l *visitLoad) client(addr string, deadline time.Time) {
	c := newLoadClient()
	defer c.CloseIdleConnections()
	for n := 0; n < loadMaxPerRun && time.Now().Before(deadline); n++ {
		select {
		case <-l.stop:
			return
		default:
		}
		if n%2 == 0 {
			v, err := send(c, http.MethodGet, "http://"+addr+"/version", "", "")
			if err == nil {
				l.mu.Lock()
				l.versions[v]++
				l.mu.Unlock()
			}
			l.versionGets.record(err)
		} else {
			_, err := getPage(c, addr)
			l.visits.record(err)
		}
		time.Sleep(loadPause)
	}
}

// finish stops the clients, waits for their last requests and returns the
// figures. It may be called more than once.
func (l *visitLoad) finish() visitReport {
	l.stopOnce.Do(func() {
		close(l.stop)
		l.wg.Wait()
		l.took = time.Since(l.began)
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	return visitReport{took: l.took, versionGets: l.versionGets.counts(), visits: l.visits.counts(), versions: maps.Clone(l.versions)}
}

// visitReport is what the load saw.
type visitReport struct {
	took                time.Duration
	versionGets, visits counts
	versions            map[string]int // GET /version answers, by version
}

func (r visitReport) log(t *testing.T) {
	t.Helper()
	t.Logf("roll of web: %s of load on its published port: %d requests (%d failed): %d GET /version (%d failed) answered %v, %d visits (%d failed)",
		r.took.Round(time.Millisecond), r.versionGets.total+r.visits.total, r.versionGets.failed+r.visits.failed,
		r.versionGets.total, r.versionGets.failed, r.versions, r.visits.total, r.visits.failed)
	for kind, c := range map[string]counts{"GET /version": r.versionGets, "visit": r.visits} {
		for _, f := range c.failures {
			t.Logf("roll of web: failed %s: %s", kind, f)
		}
	}
}

// check fails the test if a request failed, if the load hardly ran (a load
// that sent nothing would pass every other check), or if it did not see
// each of the versions.
func (r visitReport) check(t *testing.T, versions []string) {
	t.Helper()
	for kind, c := range map[string]counts{"GET /version": r.versionGets, "visit": r.visits} {
		if c.failed != 0 {
			t.Errorf("roll of web: %d of %d %s requests failed, want none", c.failed, c.total, kind)
		}
		if perSecond := float64(c.total) / r.took.Seconds(); perSecond < 20 {
			t.Errorf("roll of web: only %d %s requests in %s: the load did not run", c.total, kind, r.took.Round(time.Millisecond))
		}
	}
	for _, v := range versions {
		if r.versions[v] == 0 {
			t.Errorf("roll of web: the load never got version %s on the published port (got %v)", v, r.versions)
		}
	}
}
