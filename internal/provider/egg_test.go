package provider

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/desired"
	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

const webYAML = `
project: shop
eggs:
  web:
    image: web:1
    replicas: 3
    port: 8080
    env: {MODE: prod}
    resources: {memory: 64Mi, cpus: 0.25}
    networks: [backend]
networks:
  backend: {}
`

func TestEggSpreadsItsReplicasAndWritesOneWorkloadPerHost(t *testing.T) {
	e := newEnv(t, "h1", "h2", "h3")
	res := e.apply("default/shop", webYAML, nil)
	if res.Count(reconciler.ActionCreate) != 2 {
		t.Fatalf("result %+v, want 2 creates", res)
	}
	got := e.slots("default/shop/web", "h1", "h2", "h3")
	if !maps.Equal(got, map[string]int{"h1": 1, "h2": 1, "h3": 1}) {
		t.Fatalf("slots %v, want one replica on each host", got)
	}
	w, _ := e.state("h2").Workload("default/shop/web")
	want := contract.WorkloadSpec{
		Namespace: "default", Project: "shop", Egg: "web", Image: "web:1", Replicas: 1, Port: 8080,
		Env:        map[string]string{"MODE": "prod"},
		Networks:   []string{contract.NetworkName("h2", "default", "shop", "backend")},
		Resources:  contract.Resources{MemoryBytes: 64 << 20, NanoCPUs: 250_000_000},
		Restart:    contract.RestartAlways,
		StopSignal: "SIGTERM", StopTimeout: 10 * time.Second,
		Rollout: contract.Rollout{Order: contract.StartFirst, MaxSurge: 1, DrainTimeout: 10 * time.Second,
			ProgressDeadline: 5 * time.Minute},
	}
	if contract.SpecHash(w) != contract.SpecHash(want) || w.Rollout != want.Rollout || w.Port != 8080 {
		t.Fatalf("workload on h2 = %+v\nwant %+v", w, want)
	}
	rec := e.record("default/shop", "egg/web")
	if rec.Outputs["address"] != "web:8080" || !slices.Equal(desired.HostsOf(rec.Outputs), []string{"h1", "h2", "h3"}) {
		t.Fatalf("outputs %v, want address web:8080 and the three hosts", rec.Outputs)
	}
}

func TestReapplyingAnUnchangedProjectWritesNothing(t *testing.T) {
	e := newEnv(t, "h1", "h2")
	e.apply("default/shop", webYAML, nil)
	before := []string{e.version("h1"), e.version("h2")}
	res := e.apply("default/shop", webYAML, nil)
	if res.Count(reconciler.ActionUnchanged) != 2 {
		t.Fatalf("second apply %+v, want everything unchanged", res)
	}
	// Even calling the provider again (a retried create) moves nothing.
	rec := e.record("default/shop", "egg/web")
	if _, err := (eggProvider{e.set}).Create(t.Context(), "default/shop", rec); err != nil {
		t.Fatal(err)
	}
	if after := []string{e.version("h1"), e.version("h2")}; !slices.Equal(before, after) {
		t.Fatalf("versions moved from %v to %v", before, after)
	}
}

// Each desired-state write carries the time it was written, and a write
// that changes nothing keeps the time of the last one: what the delay to a
// host's agent is measured from.
func TestADesiredStateWriteCarriesItsTime(t *testing.T) {
	e := newEnv(t, "h1")
	e.apply("default/shop", webYAML, nil)
	written := func() time.Time {
		stored, err := e.st.DesiredState(t.Context(), "h1")
		if err != nil {
			t.Fatal(err)
		}
		return stored.UpdatedAt
	}
	if got := written(); !got.Equal(t0) {
		t.Fatalf("the first write is stamped %v, want %v", got, t0)
	}
	e.clock.Advance(time.Minute)
	e.apply("default/shop", webYAML, nil)
	if got := written(); !got.Equal(t0) {
		t.Fatalf("an unchanged apply moved the stamp to %v", got)
	}
	e.apply("default/shop", strings.Replace(webYAML, "web:1", "web:2", 1), nil)
	if got := written(); !got.Equal(t0.Add(time.Minute)) {
		t.Fatalf("the second write is stamped %v, want %v", got, t0.Add(time.Minute))
	}
}

func TestScalingRollsNothingAndKeepsSlotsWhereTheyAre(t *testing.T) {
	e := newEnv(t, "h1", "h2")
	e.apply("default/shop", webYAML, nil)
	hashes := map[string]string{}
	for _, h := range []string{"h1", "h2"} {
		w, _ := e.state(h).Workload("default/shop/web")
		hashes[h] = contract.SpecHash(w)
	}
	e.apply("default/shop", strings.Replace(webYAML, "replicas: 3", "replicas: 4", 1), nil)
	got := e.slots("default/shop/web", "h1", "h2")
	if got["h1"]+got["h2"] != 4 || got["h1"] < 1 || got["h2"] < 1 {
		t.Fatalf("slots %v, want 4 spread over both hosts", got)
	}
	for _, h := range []string{"h1", "h2"} {
		w, _ := e.state(h).Workload("default/shop/web")
		if contract.SpecHash(w) != hashes[h] {
			t.Fatalf("scaling changed the spec hash on %s", h)
		}
	}
}

const secretsYAML = `
project: shop
eggs:
  mounts:
    image: app:1
    secrets: [api_key]
  envs:
    image: app:1
    env: {KEY: "${secret.api_key}"}
  plain:
    image: app:1
secrets:
  api_key: {env: API_KEY}
`

func TestSecretRotationRollsExactlyTheEggsUsingIt(t *testing.T) {
	e := newEnv(t, "h1")
	e.apply("default/shop", secretsYAML, map[string]string{"api_key": "first-value-1"})
	hashes := func() map[string]string {
		out := map[string]string{}
		for _, w := range e.state("h1").Workloads {
			out[w.Egg] = contract.SpecHash(w)
		}
		return out
	}
	before := hashes()
	res := e.apply("default/shop", secretsYAML, map[string]string{"api_key": "second-value-2"})
	if r, _ := res.Get("secret/api_key"); r.Action != reconciler.ActionUpdate {
		t.Fatalf("secret/api_key %+v, want an update", r)
	}
	after := hashes()
	for egg, rolls := range map[string]bool{"mounts": true, "envs": true, "plain": false} {
		if (before[egg] != after[egg]) != rolls {
			t.Errorf("egg %s: hash %s -> %s, want rolled=%v", egg, before[egg], after[egg], rolls)
		}
	}
	d := e.state("h1")
	for _, egg := range []string{"mounts", "envs"} {
		w, _ := d.Workload("default/shop/" + egg)
		if len(w.Secrets) != 1 || w.Secrets[0].Name != "api_key" || w.Secrets[0].Value != "second-value-2" {
			t.Fatalf("%s carries secrets %+v, want api_key with the new value", egg, w.Secrets)
		}
	}
	if w, _ := d.Workload("default/shop/plain"); len(w.Secrets) != 0 {
		t.Fatalf("plain carries secrets %+v", w.Secrets)
	}
	w, _ := d.Workload("default/shop/envs")
	if !strings.HasPrefix(w.Env["KEY"], "hatch-secret:api_key:") || strings.Contains(w.Env["KEY"], "second-value") {
		t.Fatalf("env KEY = %q, want the handle, never the value", w.Env["KEY"])
	}
	stored, _ := e.st.DesiredState(t.Context(), "h1")
	if strings.Contains(string(stored.Doc), "value-") {
		t.Fatal("the stored desired state holds a secret value in clear")
	}
	handle := e.record("default/shop", "secret/api_key").Outputs["handle"].(string)
	if strings.Contains(handle, "value") || !strings.HasPrefix(handle, "hatch-secret:api_key:") {
		t.Fatalf("handle %q", handle)
	}
}

const statefulYAML = `
project: data
eggs:
  db:
    image: postgres:16
    port: 5432
    volumes: ["pgdata:/var/lib/data"]
  app:
    image: app:1
    replicas: 2
    env: {DB: "${db.address}"}
volumes:
  pgdata: {}
`

// A stateful egg stays with its volume; an egg using its address is not
// placed by it and spreads over every host like any stateless egg.
func TestAStatefulEggRunsOnItsVolumesHostAndAnEggUsingItsAddressSpreads(t *testing.T) {
	e := newEnv(t, "h1", "h2", "h3")
	e.apply("default/data", strings.Replace(statefulYAML, "replicas: 2", "replicas: 3", 1), nil)
	host := e.record("default/data", "volume/pgdata").Outputs["host"].(string)
	if got := e.slots("default/data/db", "h1", "h2", "h3"); !maps.Equal(got, map[string]int{host: 1}) {
		t.Fatalf("db slots %v, want 1 on the volume's host %s", got, host)
	}
	if got := e.slots("default/data/app", "h1", "h2", "h3"); !maps.Equal(got, map[string]int{"h1": 1, "h2": 1, "h3": 1}) {
		t.Fatalf("app slots %v, want one on every host, wherever db runs", got)
	}
	d := e.state(host)
	w, _ := d.Workload("default/data/db")
	if len(w.Volumes) != 1 || w.Volumes[0].DockerName != contract.VolumeName(host, "default", "data", "pgdata") || !w.Stateful() {
		t.Fatalf("db volumes %+v", w.Volumes)
	}
	if len(d.Volumes) != 1 || d.Volumes[0].Name != "pgdata" || d.Volumes[0].Delete {
		t.Fatalf("host %s lists volumes %+v, want pgdata kept", host, d.Volumes)
	}
	for _, h := range []string{"h1", "h2", "h3"} {
		app, _ := e.state(h).Workload("default/data/app")
		if app.Env["DB"] != "db:5432" || !slices.Equal(app.Uses, []string{"db"}) {
			t.Fatalf("app on %s: env DB = %q, uses %v", h, app.Env["DB"], app.Uses)
		}
	}
}

func TestARemovedVolumeIsRetainedAndComesBackOnItsHost(t *testing.T) {
	e := newEnv(t, "h1", "h2")
	e.apply("default/data", statefulYAML, nil)
	host := e.record("default/data", "volume/pgdata").Outputs["host"].(string)
	e.apply("default/data", "project: data\neggs:\n  app: {image: app:1}\n", nil)
	if d := e.state(host); len(d.Volumes) != 1 || d.Volumes[0].Delete {
		t.Fatalf("after removal host %s lists %+v, want pgdata kept", host, d.Volumes)
	}
	if evs := e.events(store.EventVolumeRetained); len(evs) != 1 || !strings.Contains(evs[0].Message, "destroy --volumes") {
		t.Fatalf("retained events %+v", evs)
	}
	if _, err := e.st.ListResources(t.Context(), "default/data"); err != nil {
		t.Fatal(err)
	}
	// Whatever is least loaded now, the volume comes back where its data is.
	e.apply("default/other", "project: other\neggs:\n  big: {image: big:1, replicas: 4, resources: {memory: 1Gi}}\n", nil)
	e.apply("default/data", statefulYAML, nil)
	if again := e.record("default/data", "volume/pgdata").Outputs["host"]; again != host {
		t.Fatalf("re-added volume on %v, want its old host %s", again, host)
	}
	// Destroy with volumes deletes it.
	e.destroy("default/data", Options{DeleteVolumes: true})
	if d := e.state(host); len(d.Volumes) != 1 || !d.Volumes[0].Delete {
		t.Fatalf("after destroy --volumes host %s lists %+v, want pgdata marked for deletion", host, d.Volumes)
	}
}

func TestDeleteVolumesMarksRetainedVolumesToo(t *testing.T) {
	e := newEnv(t, "h1")
	e.apply("default/data", statefulYAML, nil)
	e.destroy("default/data", Options{}) // pgdata is retained
	names, err := e.set.DeleteVolumes(t.Context(), "default/data")
	if err != nil || !slices.Equal(names, []string{"pgdata"}) {
		t.Fatalf("DeleteVolumes = %v, %v", names, err)
	}
	if d := e.state("h1"); len(d.Volumes) != 1 || !d.Volumes[0].Delete {
		t.Fatalf("h1 lists %+v", d.Volumes)
	}
}

const routeYAML = `
project: %s
eggs:
  web:
    image: web:1
    port: 8080
    ports: ["8088:8080"]
    routes: [shop.localhost, "api.localhost/v1"]
`

// Routes and published ports are claims on the whole cluster (every host's
// ingress serves them all): another project may not take them on any host.
func TestRoutesAndPortsHeldByAnotherProjectAreRefusedNamingTheHolder(t *testing.T) {
	e := newEnv(t, "h1", "h2")
	e.apply("default/a", strings.Replace(routeYAML, "%s", "a", 1), nil)
	w, _ := e.state("h1").Workload("default/a/web")
	if !slices.Equal(w.Routes, []contract.Route{{Host: "api.localhost", PathPrefix: "/v1"}, {Host: "shop.localhost"}}) {
		t.Fatalf("routes on h1 %+v", w.Routes)
	}
	for name, yaml := range map[string]string{
		"the same port on the same host":      "project: b\neggs:\n  other: {image: o:1, ports: [\"8088:80\"], placement: {hosts: [h1]}}\n",
		"the same port on another host":       "project: b\neggs:\n  other: {image: o:1, ports: [\"8088:80\"], placement: {hosts: [h2]}}\n",
		"the same route on the same host":     "project: b\neggs:\n  other: {image: o:1, port: 80, routes: [shop.localhost], placement: {hosts: [h1]}}\n",
		"the same route on another host":      "project: b\neggs:\n  other: {image: o:1, port: 80, routes: [shop.localhost], placement: {hosts: [h2]}}\n",
		"the same route with its own timeout": "project: b\neggs:\n  other: {image: o:1, port: 80, routes: [{host: shop.localhost, upstream_timeout: 5s}]}\n",
		"the same port of a cold egg":         "project: b\neggs:\n  other: {image: o:1, replicas: 0, ports: [\"8088:80\"]}\n",
		"the same route, placed after apply":  "project: b\neggs:\n  other: {image: o:1, port: 80, routes: [\"api.localhost/v1\"]}\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := e.reconciler(Options{}).Reconcile(t.Context(), "staging/b", e.project("staging/b", yaml, nil))
			var conflict *desired.ConflictError
			if !errors.As(err, &conflict) || conflict.Holder != "default/a/web" {
				t.Fatalf("apply of staging/b: %v, want a conflict held by default/a/web", err)
			}
			if msg := err.Error(); !strings.Contains(msg, "held by egg default/a/web") || !strings.Contains(msg, "pick another") {
				t.Fatalf("message %q does not name the holder and the fix", msg)
			}
			for _, h := range []string{"h1", "h2"} {
				if w, ok := e.state(h).Workload("staging/b/other"); ok && (len(w.Routes) > 0 || len(w.Ports) > 0) {
					t.Fatalf("b's egg holds %v %v on %s", w.Routes, w.Ports, h)
				}
			}
			e.destroy("staging/b", Options{}) // clean up the part that landed
		})
	}
}

func TestRoutesFollowTheirEggAndLeaveWithTheirResource(t *testing.T) {
	e := newEnv(t, "h1", "h2")
	e.apply("default/a", strings.Replace(routeYAML, "%s", "a", 1), nil)
	host := desired.HostsOf(e.record("default/a", "egg/web").Outputs)[0]
	other := map[string]string{"h1": "h2", "h2": "h1"}[host]
	e.clock.Advance(time.Second)
	e.down(host)
	e.clock.Advance(3 * time.Second)
	changed, err := e.set.Reschedule(t.Context(), "default/a", mustList(t, e, "default/a"))
	if err != nil || len(changed) != 1 {
		t.Fatalf("Reschedule = %d changed, %v", len(changed), err)
	}
	w, ok := e.state(other).Workload("default/a/web")
	if !ok || len(w.Routes) != 2 {
		t.Fatalf("on %s after the move: %+v, want web with its two routes", other, w)
	}
	e.apply("default/a", "project: a\neggs:\n  web: {image: web:1, port: 8080, routes: [shop.localhost]}\n", nil)
	w, _ = e.state(other).Workload("default/a/web")
	if !slices.Equal(w.Routes, []contract.Route{{Host: "shop.localhost"}}) {
		t.Fatalf("routes after removing one: %+v", w.Routes)
	}
	// A new timeout on a route replaces it, not adds a second one.
	e.apply("default/a", "project: a\neggs:\n  web: {image: web:1, port: 8080, routes: [{host: shop.localhost, upstream_timeout: 90s}]}\n", nil)
	w, _ = e.state(other).Workload("default/a/web")
	if !slices.Equal(w.Routes, []contract.Route{{Host: "shop.localhost", UpstreamTimeout: 90 * time.Second}}) {
		t.Fatalf("routes after setting a timeout: %+v", w.Routes)
	}
}

func mustList(t *testing.T, e *env, project string) []*resource.Deployed {
	t.Helper()
	recs, err := e.st.ListResources(t.Context(), project)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestRescheduleMovesStatelessReplicasOffAHostDownPastTheDelayOnly(t *testing.T) {
	e := newEnv(t, "h1", "h2", "h3")
	e.apply("default/shop", webYAML, nil)
	e.apply("default/data", "project: data\neggs:\n  db: {image: pg:1, volumes: [\"d:/d\"], placement: {hosts: [h2]}}\nvolumes:\n  d: {}\n", nil)
	recs := func() []*resource.Deployed {
		return append(mustList(t, e, "default/shop"), mustList(t, e, "default/data")...)
	}
	e.down("h2")
	hosts, _ := e.set.Hosts(t.Context())
	e.clock.Advance(time.Second)
	if e.set.NeedsPlacing(recs(), hosts, e.clock.Now()) {
		t.Fatal("a host down for 1s (less than the delay) already asks for placing")
	}
	e.clock.Advance(2 * time.Second)
	if !e.set.NeedsPlacing(recs(), hosts, e.clock.Now()) {
		t.Fatal("a host down past the delay does not ask for placing")
	}
	for _, p := range []string{"default/shop", "default/data"} {
		changed, err := e.set.Reschedule(t.Context(), p, mustList(t, e, p))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range changed {
			if err := e.st.PutResource(t.Context(), p, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := e.slots("default/shop/web", "h1", "h2", "h3"); got["h2"] != 0 || got["h1"]+got["h3"] != 3 {
		t.Fatalf("web slots %v, want all 3 off h2", got)
	}
	if got := e.slots("default/data/db", "h1", "h2", "h3"); !maps.Equal(got, map[string]int{"h2": 1}) {
		t.Fatalf("stateful db slots %v, want it waiting on h2", got)
	}
	if why, _ := e.record("default/data", "egg/db").Outputs["waiting"].(string); !strings.Contains(why, "h2") {
		t.Fatalf("db's waiting output %q does not say it waits for h2", why)
	}
	// h2 comes back: nothing moves back, nothing exceeds the replica count.
	e.up("h2")
	versions := []string{e.version("h1"), e.version("h2"), e.version("h3")}
	changed, err := e.set.Reschedule(t.Context(), "default/shop", mustList(t, e, "default/shop"))
	if err != nil || len(changed) != 0 {
		t.Fatalf("Reschedule after h2 returned: %d changed, %v", len(changed), err)
	}
	if after := []string{e.version("h1"), e.version("h2"), e.version("h3")}; !slices.Equal(versions, after) {
		t.Fatalf("a returning host moved replicas: versions %v -> %v", versions, after)
	}
}

func TestNoLiveHostIsRetriedAndAnImpossiblePlacementIsNot(t *testing.T) {
	e := newEnv(t)
	e.up("h1")
	e.down("h1")
	p := eggProvider{e.set}
	desired, _ := e.project("default/shop", webYAML, nil).Resource("egg/web")
	rec := &resource.Deployed{ID: "x", Type: resource.Egg, Name: "web", Inputs: resource.Clone(desired.Inputs)}
	rec.Inputs["networks"] = []any{} // unresolved here
	_, err := p.Create(t.Context(), "default/shop", rec)
	var perm *backoff.PermanentError
	if err == nil || errors.As(err, &perm) || !strings.Contains(err.Error(), "no host is live") {
		t.Fatalf("create with no live host: %v, want a retryable error saying so", err)
	}
	e.up("h1")
	rec.Inputs["placement"] = map[string]any{"hosts": []any{"nowhere"}, "volume": "", "volume_host": ""}
	_, err = p.Create(t.Context(), "default/shop", rec)
	if !errors.As(err, &perm) || !strings.Contains(err.Error(), "nowhere") {
		t.Fatalf("create on an unknown host name: %v, want a permanent error naming it", err)
	}
}

func TestRestartBumpsTheRevisionOfOneEggOnly(t *testing.T) {
	e := newEnv(t, "h1")
	e.apply("default/shop", secretsYAML, map[string]string{"api_key": "v"})
	before := map[string]string{}
	for _, w := range e.state("h1").Workloads {
		before[w.Egg] = contract.SpecHash(w)
	}
	next, err := e.set.RestartEgg(t.Context(), "default/shop", e.record("default/shop", "egg/plain"))
	if err != nil {
		t.Fatal(err)
	}
	if desired.RevisionOf(next.Outputs) != 1 {
		t.Fatalf("revision %v, want 1", next.Outputs["revision"])
	}
	for _, w := range e.state("h1").Workloads {
		if changed := contract.SpecHash(w) != before[w.Egg]; changed != (w.Egg == "plain") {
			t.Errorf("egg %s: hash changed=%v", w.Egg, changed)
		}
		if w.Egg == "plain" && w.Revision != 1 {
			t.Errorf("plain's workload has revision %d", w.Revision)
		}
	}
	// The revision survives the next apply of an unchanged spec, and of a changed one.
	if err := e.st.PutResource(t.Context(), "default/shop", next); err != nil {
		t.Fatal(err)
	}
	e.apply("default/shop", strings.Replace(secretsYAML, "plain:\n    image: app:1", "plain:\n    image: app:2", 1), map[string]string{"api_key": "v"})
	if w, _ := e.state("h1").Workload("default/shop/plain"); w.Revision != 1 || w.Image != "app:2" {
		t.Fatalf("after an update plain has revision %d, image %s", w.Revision, w.Image)
	}
}

func TestRevertPutsThePreviousSpecBackOnce(t *testing.T) {
	e := newEnv(t, "h1")
	e.apply("default/shop", webYAML, nil)
	w1, _ := e.state("h1").Workload("default/shop/web")
	e.apply("default/shop", strings.Replace(webYAML, "web:1", "web:2", 1), nil)
	rec := e.record("default/shop", "egg/web")
	if desired.PreviousOf(rec.Outputs) == nil {
		t.Fatal("an update of the image did not keep the previous spec")
	}
	next, ok, err := e.set.Revert(t.Context(), "default/shop", rec)
	if err != nil || !ok {
		t.Fatalf("Revert = %v, %v", ok, err)
	}
	w, _ := e.state("h1").Workload("default/shop/web")
	if w.Image != "web:1" || contract.SpecHash(w) != contract.SpecHash(w1) {
		t.Fatalf("after revert the workload runs %s", w.Image)
	}
	if next.Inputs["image"] != "web:1" || desired.PreviousOf(next.Outputs) != nil {
		t.Fatalf("reverted record: image %v, previous %v", next.Inputs["image"], next.Outputs["previous"])
	}
	if _, ok, _ := e.set.Revert(t.Context(), "default/shop", next); ok {
		t.Fatal("a reverted egg was reverted again")
	}
	// A change that rolls nothing (replicas) keeps the previous spec it had.
	e.apply("default/shop", strings.NewReplacer("web:1", "web:2", "replicas: 3", "replicas: 2").Replace(webYAML), nil)
	prev := desired.PreviousOf(e.record("default/shop", "egg/web").Outputs)
	if prev == nil || prev.Inputs["image"] != "web:1" {
		t.Fatalf("previous after a scale-only update: %+v", prev)
	}
}

// An egg carries its routes wherever it is placed, and a route another
// project took meanwhile stops it there: on any host, not only those it would
// share with the holder.
func TestAnEggDoesNotTakeItsRoutesWhereAnotherProjectHoldsThem(t *testing.T) {
	e := newEnv(t, "h1", "h2")
	e.apply("staging/b", "project: b\neggs:\n  web: {image: w:1, port: 80, replicas: 0, routes: [shop.localhost]}\n", nil)
	// A cold egg runs nowhere, so its route is served nowhere: a takes it.
	e.apply("default/a", "project: a\neggs:\n  web: {image: w:1, port: 80, routes: [shop.localhost], placement: {hosts: [h1]}}\n", nil)
	_, err := e.reconciler(Options{}).Reconcile(t.Context(), "staging/b",
		e.project("staging/b", "project: b\neggs:\n  web: {image: w:1, port: 80, placement: {hosts: [h2]}, routes: [shop.localhost]}\n", nil))
	var conflict *desired.ConflictError
	if !errors.As(err, &conflict) || conflict.Holder != "default/a/web" || conflict.Claim != "route shop.localhost" {
		t.Fatalf("placing b's routed egg on h2: %v, want a conflict on route shop.localhost held by default/a/web", err)
	}
	if _, ok := e.state("h2").Workload("staging/b/web"); ok {
		t.Fatal("b's egg landed on h2 with a's route")
	}
}
