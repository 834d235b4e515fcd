package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/graph"
	"github.com/hatchery/hatchery/internal/imageref/imagereftest"
	"github.com/hatchery/hatchery/internal/provider"
	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

const shopYAML = `
project: shop
eggs:
  web:
    image: web:1
    replicas: 2
    port: 8080
    routes: [shop.localhost]
`

func TestPlanThenApplyDeploysTheProjectAndStreamsItsProgress(t *testing.T) {
	h := newApplyHarness(t, applyOptions{})
	h.report("h1")
	h.report("h2")
	p := h.plan("default/shop", shopYAML, nil)
	if !p.HasChanges || p.Summary["create"] != 3 || !strings.HasPrefix(p.ID, "plan-") {
		t.Fatalf("plan %+v, want 3 creates", p)
	}
	for _, c := range p.Changes {
		if c.Action != "+" {
			t.Fatalf("change %+v, want +", c)
		}
	}
	if len(p.Hosts) != 2 || !slices.Contains(p.Hosts[0].Steps, "start web: 1 replica") {
		t.Fatalf("host steps %+v, want web started on both hosts", p.Hosts)
	}
	started := h.apply("default/shop", p.ID)
	steps := h.follow(started.Events)
	last := steps[len(steps)-1]
	wantSucceeded(t, last)
	var created []string
	for _, s := range steps {
		if s.Action == "create" && s.Status == "done" {
			created = append(created, s.Resource)
		}
	}
	slices.Sort(created)
	if !slices.Equal(created, []string{"egg/web", "network/default", "route/shop.localhost"}) {
		t.Fatalf("created %v", created)
	}
	for _, host := range []string{"h1", "h2"} {
		w, ok := h.desired(host).Workload("default/shop/web")
		if !ok || w.Replicas != 1 || len(w.Routes) != 1 {
			t.Fatalf("%s runs %+v, want one replica of web with its route", host, w)
		}
	}
	// The apply is in the history, with its progress.
	got := decode[struct {
		Apply    api.Apply      `json:"apply"`
		Progress []api.Progress `json:"progress"`
	}](t, h.do("GET", "/api/v1/projects/default/shop/applies/"+strconv.FormatInt(started.Apply.ID, 10), nil), http.StatusOK)
	if got.Apply.Outcome != "succeeded" || len(got.Progress) != len(steps) {
		t.Fatalf("GET apply = %+v with %d steps, want succeeded with %d", got.Apply, len(got.Progress), len(steps))
	}
	// Re-planning the same file changes nothing.
	again := h.plan("default/shop", shopYAML, nil)
	if again.HasChanges || again.Summary["unchanged"] != 3 || len(again.Hosts) != 0 {
		t.Fatalf("second plan %+v, want nothing to do", again)
	}
}

func TestAStalePlanIsRefusedAndAPlanIsUsedOnce(t *testing.T) {
	h := newApplyHarness(t, applyOptions{})
	h.report("h1")
	first := h.plan("default/shop", shopYAML, nil)
	second := h.plan("default/shop", strings.Replace(shopYAML, "web:1", "web:2", 1), nil)
	wantSucceeded(t, lastStep(h.follow(h.apply("default/shop", second.ID).Events)))
	wantError(t, h.applyResp("default/shop", first.ID), http.StatusConflict, "stale_plan", "plan again")
	wantError(t, h.applyResp("default/shop", second.ID), http.StatusNotFound, "not_found", second.ID)
	wantError(t, h.applyResp("default/other", first.ID), http.StatusBadRequest, "bad_request", "not of default/other")
	// A stale plan leaves the project unlocked.
	wantSucceeded(t, h.applyAndWait("default/shop", shopYAML, nil))
}

// pinnedByFake is image pinned to the digest the test servers' fake
// registry resolves its tag to.
func pinnedByFake(t *testing.T, image string) string {
	t.Helper()
	pinned, err := contract.PinImage(image, imagereftest.DigestOf(image))
	if err != nil {
		t.Fatal(err)
	}
	return pinned
}

func lastStep(steps []api.Progress) api.Progress { return steps[len(steps)-1] }

const waitingYAML = `
project: shop
eggs:
  db:
    image: db:1
    pull: missing
  web:
    image: web:1
    pull: missing
    depends_on: {db: {condition: healthy}}
`

func TestASecondApplyFailsAtOnceNamingTheHolderAndSinceWhen(t *testing.T) {
	h := newApplyHarness(t, applyOptions{})
	h.report("h1")
	first := h.plan("default/shop", waitingYAML, nil)
	other := h.plan("default/shop", waitingYAML, nil)
	started := h.apply("default/shop", first.ID) // waits for db to be healthy
	begun := time.Now()
	resp := h.applyResp("default/shop", other.ID)
	if took := time.Since(begun); took > 2*time.Second {
		t.Fatalf("the second apply took %v to be refused", took)
	}
	e := decode[api.Error](t, resp, http.StatusConflict)
	if e.Code != api.CodeLocked || !strings.Contains(e.Message, "apply of "+first.ID) || !strings.Contains(e.Message, "since "+time.Now().UTC().Format("2006-01-02T")) {
		t.Fatalf("error %+v, want locked by the first apply, with since when", e)
	}
	// A rollout restart waits for nobody either.
	wantError(t, h.do("POST", "/api/v1/projects/default/shop/eggs/db/restart", nil), http.StatusConflict, "locked", first.ID)
	// Other projects are not locked.
	wantSucceeded(t, h.applyAndWait("default/other", "project: other\neggs:\n  x: {image: x:1}\n", nil))
	h.waitPlaced("h1", "default/shop/db")
	h.healthy("h1") // db becomes healthy: the first apply goes on
	wantSucceeded(t, lastStep(h.follow(started.Events)))
	wantSucceeded(t, h.applyAndWait("default/shop", strings.Replace(waitingYAML, "web:1", "web:2", 1), nil))
}

// A server starting beside another server's apply in flight (its project's
// lease held by that server) leaves it running; once nobody holds the
// project, a start fails it as interrupted.
func TestAServerStartingBesideAnotherServersApplyLeavesItRunning(t *testing.T) {
	dir := t.TempDir()
	h := newApplyHarness(t, applyOptions{dir: dir, serverID: "srv-1"})
	ctx := context.Background()
	held, err := h.store.AcquireLease(ctx, store.Lease{Project: "default/shop", Token: "live", Holder: "apply of plan-live",
		Server: "srv-2", Since: time.Now(), Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.StartApply(ctx, store.NewApply{Project: "default/shop", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	h.stop()

	h = newApplyHarness(t, applyOptions{dir: dir, serverID: "srv-1"})
	applies, err := h.store.Applies(ctx, "default/shop")
	if err != nil || len(applies) != 1 || applies[0].Outcome != store.ApplyRunning {
		t.Fatalf("srv-2's apply after srv-1 started: %+v, %v; want it still running", applies, err)
	}
	if err := h.store.ReleaseLease(ctx, "default/shop", held.Token); err != nil {
		t.Fatal(err)
	}
	h.stop()

	h = newApplyHarness(t, applyOptions{dir: dir, serverID: "srv-1"})
	applies, err = h.store.Applies(ctx, "default/shop")
	if err != nil || len(applies) != 1 || applies[0].Outcome != store.ApplyFailed || !strings.Contains(applies[0].Message, "interrupted") {
		t.Fatalf("the apply once its project was free, after a start: %+v, %v; want it failed as interrupted", applies, err)
	}
	// The recovery's own lease is gone: the project is free.
	if _, err := h.store.AcquireLease(ctx, store.Lease{Project: "default/shop", Token: "next", Holder: "apply of plan-next",
		Server: "srv-1", Since: time.Now(), Expires: time.Now().Add(time.Minute)}); err != nil {
		t.Fatalf("the project after the recovery: %v, want it free", err)
	}
}

func TestAServerKilledMidApplyLeavesNothingLockedAndAReapplyCompletes(t *testing.T) {
	dir := t.TempDir()
	h := newApplyHarness(t, applyOptions{dir: dir, serverID: "srv-1"})
	h.report("h1")
	// The state a kill leaves: db created, web's create recorded pending and
	// cut short, the lease and the apply record as they were.
	ctx := context.Background()
	_, err := h.store.AcquireLease(ctx, store.Lease{Project: "default/shop", Token: "dead", Holder: "apply of plan-dead",
		Server: "srv-1", Since: time.Now(), Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.StartApply(ctx, store.NewApply{Project: "default/shop", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	killed := killDuring(t, h, "egg/web", waitingYAML)
	if web := findRecord(t, h, "default/shop", "egg/web"); web == nil || !web.Pending {
		t.Fatalf("egg/web after the kill: %+v, want a pending record", web)
	}
	wantError(t, h.applyResp("default/shop", h.plan("default/shop", waitingYAML, nil).ID), http.StatusConflict, "locked", "plan-dead")
	killed()
	h.stop()

	// The server restarts: its lease is released and the apply it ran is failed.
	h = newApplyHarness(t, applyOptions{dir: dir, serverID: "srv-1"})
	applies, err := h.store.Applies(ctx, "default/shop")
	if err != nil || len(applies) != 1 || applies[0].Outcome != store.ApplyFailed || !strings.Contains(applies[0].Message, "interrupted") {
		t.Fatalf("applies after the restart: %+v, %v", applies, err)
	}
	pendingID := findRecord(t, h, "default/shop", "egg/web").ID
	h.report("h1")
	h.healthy("h1")
	p := h.plan("default/shop", waitingYAML, nil)
	if p.Summary["create"] != 1 || p.Summary["unchanged"] != 2 {
		t.Fatalf("plan after the restart %+v, want web created again and the rest unchanged", p.Summary)
	}
	wantSucceeded(t, lastStep(h.follow(h.apply("default/shop", p.ID).Events)))
	web := findRecord(t, h, "default/shop", "egg/web")
	if web.Pending || web.ID != pendingID {
		t.Fatalf("egg/web %+v, want created with the pending record's ID %s", web, pendingID)
	}
	d := h.desired("h1")
	if len(d.Workloads) != 2 {
		t.Fatalf("h1 runs %d workloads, want db and web once each: %+v", len(d.Workloads), d.Workloads)
	}
}

// killDuring runs the project's apply on the harness's store directly and
// stops it in the middle of key's create, as a kill would: the create never
// returns, so nothing after it is recorded. It returns a function that lets
// the stuck goroutine go.
func killDuring(t *testing.T, h *applyHarness, key, yaml string) func() {
	t.Helper()
	var req api.PlanRequest
	if err := json.Unmarshal(planBody(t, yaml, nil), &req); err != nil {
		t.Fatal(err)
	}
	rs := make([]*resource.Desired, len(req.Resources))
	for i, d := range req.Resources {
		rs[i] = &resource.Desired{Type: d.Type, Name: d.Name, Inputs: d.Inputs, Source: d.Source}
	}
	ds := make([]*resource.Dependency, len(req.Dependencies))
	for i, d := range req.Dependencies {
		ds[i] = &resource.Dependency{Parent: d.Parent, Child: d.Child, Condition: resource.Condition(d.Condition)}
	}
	g, err := graph.New(rs, ds)
	if err != nil {
		t.Fatal(err)
	}
	reg := h.providers.Registry(provider.Options{})
	entered, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	typ, _, _ := resource.SplitKey(key)
	reg[typ] = &stuckProvider{Provider: readyProvider{reg[typ]}, only: key, entered: entered, release: release}
	rec := &reconciler.Reconciler{Resources: h.store, Registry: reg}
	go func() {
		defer close(done)
		_, _ = rec.Reconcile(context.Background(), "default/shop", g)
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the apply never reached " + key)
	}
	return func() { close(release); <-done }
}

// stuckProvider never returns from the create of one resource until released,
// and then fails it for good: a process killed in the middle of the call
// records nothing after it.
type stuckProvider struct {
	reconciler.Provider
	only             string
	entered, release chan struct{}
}

func (p *stuckProvider) Create(ctx context.Context, project string, r *resource.Deployed) (map[string]any, error) {
	if p.only != "" && r.Key() != p.only {
		return p.Provider.Create(ctx, project, r)
	}
	close(p.entered)
	<-p.release
	return nil, backoff.Permanent(context.Canceled)
}

// readyProvider reports every condition met, so the kill test does not wait
// for reports.
type readyProvider struct{ reconciler.Provider }

func (readyProvider) Ready(context.Context, string, *resource.Deployed, resource.Condition) (bool, string, error) {
	return true, "", nil
}

func findRecord(t *testing.T, h *applyHarness, project, key string) *resource.Deployed {
	t.Helper()
	recs, err := h.store.ListResources(t.Context(), project)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Key() == key {
			return r
		}
	}
	return nil
}

const revertYAML = `
project: shop
eggs:
  web:
    image: web:1
    rollout: {auto_revert: true}
  other:
    image: other:1
`

func TestAFailedRolloutIsRevertedWhenTheEggAsks(t *testing.T) {
	h := newApplyHarness(t, applyOptions{})
	h.report("h1")
	wantSucceeded(t, h.applyAndWait("default/shop", revertYAML, nil))
	h.healthy("h1")
	v2 := strings.NewReplacer("web:1", "web:2", "other:1", "other:2").Replace(revertYAML)
	wantSucceeded(t, h.applyAndWait("default/shop", v2, nil))
	// The agent reports both new specs failed.
	var cs []contract.ContainerStatus
	for _, w := range h.desired("h1").Workloads {
		cs = append(cs, contract.ContainerStatus{WorkloadID: w.ID(), Slot: 0, State: contract.StateRunning,
			SpecHash: contract.SpecHash(w), RolloutFailure: "not healthy within its progress deadline"})
	}
	h.report("h1", cs...)
	eventually(t, "web is reverted", func() bool { return len(h.eventsOf(store.EventRolloutReverted)) == 1 })
	d := h.desired("h1")
	if w, _ := d.Workload("default/shop/web"); w.Image != pinnedByFake(t, "web:1") {
		t.Fatalf("web runs %s after the revert, want web:1 pinned", w.Image)
	}
	if w, _ := d.Workload("default/shop/other"); w.Image != pinnedByFake(t, "other:2") {
		t.Fatalf("other (no auto_revert) runs %s, want other:2 (pinned) still", w.Image)
	}
	ev := h.eventsOf(store.EventRolloutReverted)[0]
	if ev.Resource != "egg/web" || ev.Host != "h1" || !strings.Contains(ev.Message, "not healthy within its progress deadline") {
		t.Fatalf("event %+v", ev)
	}
	// The deployed record says what runs, so a plan of the file shows the change again.
	p := h.plan("default/shop", v2, nil)
	for _, c := range p.Changes {
		if c.Key == "egg/web" && (c.Action != "~" || !slices.Contains(c.Changed, "image")) {
			t.Fatalf("plan shows %+v for web, want ~ image", c)
		}
	}
	h.revertsSettled() // no second revert follows
	if n := len(h.eventsOf(store.EventRolloutReverted)); n != 1 {
		t.Fatalf("%d reverts, want 1", n)
	}
}

func TestRolloutRestartBumpsTheRevisionAndNothingElse(t *testing.T) {
	h := newApplyHarness(t, applyOptions{})
	h.report("h1")
	wantSucceeded(t, h.applyAndWait("default/shop", revertYAML, nil))
	before := map[string]string{}
	for _, w := range h.desired("h1").Workloads {
		before[w.Egg] = contract.SpecHash(w)
	}
	got := decode[map[string]any](t, h.do("POST", "/api/v1/projects/default/shop/eggs/web/restart", nil), http.StatusOK)
	if got["revision"] != float64(1) {
		t.Fatalf("restart answered %v, want revision 1", got)
	}
	for _, w := range h.desired("h1").Workloads {
		if rolled := contract.SpecHash(w) != before[w.Egg]; rolled != (w.Egg == "web") || w.Egg == "web" && w.Revision != 1 {
			t.Fatalf("%s: rolled=%v revision=%d", w.Egg, rolled, w.Revision)
		}
	}
	if evs := h.eventsOf(store.EventRolloutRestarted); len(evs) != 1 || evs[0].Resource != "egg/web" {
		t.Fatalf("events %+v", evs)
	}
	if p := h.plan("default/shop", revertYAML, nil); p.HasChanges {
		t.Fatalf("after a restart the plan shows changes: %+v", p.Changes)
	}
	decode[map[string]any](t, h.do("POST", "/api/v1/projects/default/shop/eggs/web/restart", nil), http.StatusOK)
	if w, _ := h.desired("h1").Workload("default/shop/web"); w.Revision != 2 {
		t.Fatalf("revision %d after a second restart", w.Revision)
	}
	wantError(t, h.do("POST", "/api/v1/projects/default/shop/eggs/nope/restart", nil), http.StatusNotFound, "not_found", "egg/nope")
}

func TestStatelessReplicasMoveOffAHostDownPastTheDelay(t *testing.T) {
	clk := &clock{now: time.Now()}
	h := newApplyHarness(t, applyOptions{clock: clk})
	h.report("h1")
	h.report("h2")
	wantSucceeded(t, h.applyAndWait("default/shop", shopYAML, nil))
	if _, err := h.store.MarkHostDown(t.Context(), "h2", clk.Now().Add(time.Hour), clk.Now()); err != nil {
		t.Fatal(err)
	}
	h.reschedulePasses(3) // within the delay
	if w, _ := h.desired("h2").Workload("default/shop/web"); w.Replicas != 1 {
		t.Fatal("replicas moved before the reschedule delay passed")
	}
	clk.Set(clk.Now().Add(3 * time.Second))
	eventually(t, "web moves to h1, recorded", func() bool {
		w, _ := h.desired("h1").Workload("default/shop/web")
		_, onH2 := h.desired("h2").Workload("default/shop/web")
		return w.Replicas == 2 && !onH2 && len(h.eventsOf(store.EventEggRescheduled)) > 0
	})
	if w, _ := h.desired("h1").Workload("default/shop/web"); len(w.Routes) != 1 {
		t.Fatalf("the moved replicas lost their route: %+v", w.Routes)
	}
	evs := h.eventsOf(store.EventEggRescheduled)
	if len(evs) != 1 || evs[0].Resource != "egg/web" {
		t.Fatalf("rescheduled events %+v", evs)
	}
	// h2 comes back: nothing moves back.
	h.report("h2")
	h.reschedulePasses(3)
	if w, _ := h.desired("h1").Workload("default/shop/web"); w.Replicas != 2 {
		t.Fatalf("h1 runs %d replicas after h2 returned, want 2", w.Replicas)
	}
	if p := h.plan("default/shop", shopYAML, nil); p.HasChanges {
		t.Fatalf("the plan after a reschedule shows changes: %+v", p.Changes)
	}
}

func TestDestroyWithVolumesDeletesThemAndWithoutKeepsThem(t *testing.T) {
	h := newApplyHarness(t, applyOptions{})
	h.report("h1")
	yaml := "project: data\neggs:\n  db: {image: pg:1, volumes: [\"pgdata:/d\"]}\nvolumes:\n  pgdata: {}\n"
	wantSucceeded(t, h.applyAndWait("default/data", yaml, nil))
	destroy := func(body string) api.Plan {
		return decode[api.Plan](t, h.do("POST", "/api/v1/projects/default/data/destroy", strings.NewReader(body)), http.StatusCreated)
	}
	p := destroy(`{}`)
	if p.Summary["delete"] != 3 || !p.Destroy {
		t.Fatalf("destroy plan %+v", p)
	}
	wantSucceeded(t, lastStep(h.follow(h.apply("default/data", p.ID).Events)))
	if d := h.desired("h1"); len(d.Workloads) != 0 || len(d.Volumes) != 1 || d.Volumes[0].Delete {
		t.Fatalf("after destroy: %+v, want no workload and pgdata kept", d)
	}
	p = destroy(`{"volumes": true}`)
	if !p.HasChanges || len(p.Hosts) != 1 || !strings.Contains(strings.Join(p.Hosts[0].Steps, ";"), "delete volume pgdata") {
		t.Fatalf("destroy --volumes plan %+v, want pgdata deleted", p)
	}
	wantSucceeded(t, lastStep(h.follow(h.apply("default/data", p.ID).Events)))
	if d := h.desired("h1"); len(d.Volumes) != 1 || !d.Volumes[0].Delete {
		t.Fatalf("after destroy --volumes: %+v", d.Volumes)
	}
}

func TestBadPlanRequestsNameTheField(t *testing.T) {
	h := newApplyHarness(t, applyOptions{})
	post := func(path, body string) *http.Response {
		return h.do("POST", path, strings.NewReader(body))
	}
	const p = "/api/v1/projects/default/shop/plan"
	wantError(t, post(p, `{"resources":[{"type":"secret","name":"k","inputs":{"env":"K"}}]}`), 400, "bad_request", "secrets.k")
	wantError(t, post(p, `{"secrets":{"k":"v"}}`), 400, "bad_request", "secrets.k")
	wantError(t, post(p, `{"resources":[{"type":"egg","name":"w","inputs":{}}],"destroy":true}`), 400, "bad_request", "resources")
	wantError(t, post(p, `{"delete_volumes":true}`), 400, "bad_request", "delete_volumes")
	wantError(t, post(p, `{"resources":[{"type":"gadget","name":"w","inputs":{}}]}`), 400, "bad_request", "unknown type")
	wantError(t, post(p, `{"resources":[{"type":"egg","name":"w","inputs":{"build":{"context":"w"}},"source":"sha256:`+strings.Repeat("a", 64)+`"}]}`),
		400, "bad_request", "not uploaded")
	wantError(t, post("/api/v1/projects/Default/shop/plan", `{}`), 400, "bad_request", "path")
	wantError(t, post(p, `{"resources":[], "extra": 1}`), 400, "bad_request", "extra")
}

func TestAPlanKeepsItsBlobsFromCollection(t *testing.T) {
	h := newApplyHarness(t, applyOptions{})
	h.report("h1")
	content := []byte("FROM scratch\n")
	digest := digestOf(content)
	if resp := h.do("PUT", "/api/v1/blobs/"+digest, bytes.NewReader(content)); resp.StatusCode/100 != 2 {
		t.Fatalf("upload: %d", resp.StatusCode)
	}
	body := `{"resources":[{"type":"egg","name":"w","source":"` + digest + `","inputs":` + eggInputsJSON(t) + `}]}`
	resp := h.do("POST", "/api/v1/projects/default/shop/plan", strings.NewReader(body))
	plan := decode[api.Plan](t, resp, http.StatusCreated)
	refs, err := h.store.ReferencedBlobs(t.Context())
	if err != nil || !slices.Contains(refs, digest) {
		t.Fatalf("referenced blobs %v, want the plan's %s", refs, digest)
	}
	wantSucceeded(t, lastStep(h.follow(h.apply("default/shop", plan.ID).Events)))
	if w, _ := h.desired("h1").Workload("default/shop/w"); w.BlobID != digest {
		t.Fatalf("workload built from %q, want %s", w.BlobID, digest)
	}
}

// eggInputsJSON is an egg's inputs, built from a blob, as spec writes them.
func eggInputsJSON(t *testing.T) string {
	t.Helper()
	var req api.PlanRequest
	if err := json.Unmarshal(planBody(t, "project: shop\neggs:\n  w: {build: ./w}\n", nil), &req); err != nil {
		t.Fatal(err)
	}
	for _, r := range req.Resources {
		if r.Type == "egg" {
			r.Inputs["networks"] = []any{}
			b, _ := json.Marshal(r.Inputs)
			return string(b)
		}
	}
	t.Fatal("no egg")
	return ""
}

func TestHostsUnknownAfterARestartKeepTheirReplicas(t *testing.T) {
	dir, clk := t.TempDir(), &clock{now: time.Now()}
	h := newApplyHarness(t, applyOptions{dir: dir, clock: clk})
	h.report("h1")
	h.report("h2")
	wantSucceeded(t, h.applyAndWait("default/shop", shopYAML, nil))
	h.stop()

	h = newApplyHarness(t, applyOptions{dir: dir, clock: clk})
	h.report("h1") // h2 has not reported since the restart: unknown
	clk.Set(clk.Now().Add(5 * time.Second))
	h.reschedulePasses(3)
	if w, ok := h.desired("h2").Workload("default/shop/web"); !ok || w.Replicas != 1 {
		t.Fatalf("h2, unknown since the restart, runs %+v; want its replica kept", w)
	}
	if evs := h.eventsOf(store.EventEggRescheduled); len(evs) != 0 {
		t.Fatalf("rescheduled %+v", evs)
	}
}

func TestAnApplyGoesOnWhenItsClientLeaves(t *testing.T) {
	h := newApplyHarness(t, applyOptions{})
	h.report("h1")
	p := h.plan("default/shop", waitingYAML, nil)
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, "POST", h.http.URL+"/api/v1/projects/default/shop/apply",
		strings.NewReader(`{"plan":"`+p.ID+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+h.token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("apply with Accept: text/event-stream answered %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	if !strings.HasPrefix(line, "id: ") {
		t.Fatalf("the stream starts with %q", line)
	}
	cancel() // the client goes away while the apply waits for db
	resp.Body.Close()
	h.waitPlaced("h1", "default/shop/db")
	h.healthy("h1")
	eventually(t, "the apply succeeds without its client", func() bool {
		applies, err := h.store.Applies(t.Context(), "default/shop")
		return err == nil && len(applies) == 1 && applies[0].Outcome == store.ApplySucceeded
	})
	if _, ok := h.desired("h1").Workload("default/shop/web"); !ok {
		t.Fatal("web, created after the client left, is not in h1's desired state")
	}
}

// waitPlaced waits until the host's desired state holds the workload.
func (h *applyHarness) waitPlaced(host, workload string) {
	h.t.Helper()
	eventually(h.t, workload+" is placed on "+host, func() bool {
		stored, err := h.store.DesiredState(h.t.Context(), host)
		if err != nil || stored.Doc == nil {
			return false
		}
		d, err := contract.DecodeDesiredState(bytes.NewReader(stored.Doc))
		_, ok := d.Workload(workload)
		return err == nil && ok
	})
}

func TestAnApplyAndARestartRecordWhichAdminTokenRanThem(t *testing.T) {
	h := newApplyHarness(t, applyOptions{})
	h.report("h1")
	wantSucceeded(t, h.applyAndWait("default/shop", revertYAML, nil))
	decode[map[string]any](t, h.do("POST", "/api/v1/projects/default/shop/eggs/web/restart", nil), http.StatusOK)
	// The harness's admin token is the first one, named "admin"; the
	// resources are created on the apply's own life, after the request.
	for _, typ := range []store.EventType{store.EventApplyStarted, store.EventResourceCreated, store.EventRolloutRestarted} {
		evs := h.eventsOf(typ)
		if len(evs) == 0 {
			t.Fatalf("no %s event", typ)
		}
		for _, e := range evs {
			if e.Actor != "admin" {
				t.Fatalf("%s event %+v: actor %q, want admin", typ, e, e.Actor)
			}
		}
	}
	recs, err := h.store.Applies(t.Context(), "default/shop")
	if err != nil || len(recs) != 1 || recs[0].Actor != "admin" {
		t.Fatalf("apply records %+v (%v), want one by admin", recs, err)
	}
}

// A rollout.failed recorded while no server runs the loops (the holder
// stopped, or died, and the next has not taken them yet) is reverted by the
// server that takes them, once; and the next server to take them reads it
// again but leaves the egg alone: it is reverted already.
func TestAFailedRolloutRecordedBetweenTwoHoldersOfTheLoopsIsRevertedOnce(t *testing.T) {
	a := newApplyHarness(t, applyOptions{serverID: "srv-a"})
	a.report("h1")
	wantSucceeded(t, a.applyAndWait("default/shop", revertYAML, nil))
	a.healthy("h1")
	v2 := strings.ReplaceAll(revertYAML, "web:1", "web:2")
	wantSucceeded(t, a.applyAndWait("default/shop", v2, nil))
	w2, _ := a.desired("h1").Workload("default/shop/web")

	// The loops stop on srv-a; its API still records the host's report of
	// the failed rollout, with its rollout.failed event.
	a.srv.Close()
	a.report("h1", contract.ContainerStatus{WorkloadID: w2.ID(), Slot: 0, State: contract.StateRunning,
		SpecHash: contract.SpecHash(w2), RolloutFailure: "not healthy within its progress deadline"})
	if n := len(a.eventsOf(store.EventRolloutFailed)); n != 1 {
		t.Fatalf("%d rollout.failed events, want 1", n)
	}
	a.stop()

	b := newApplyHarness(t, applyOptions{dir: a.dir, serverID: "srv-b"})
	eventually(t, "web reverted by the loops' next holder", func() bool { return len(b.eventsOf(store.EventRolloutReverted)) == 1 })
	if w, _ := b.desired("h1").Workload("default/shop/web"); w.Image != pinnedByFake(t, "web:1") {
		t.Fatalf("web runs %s after the revert, want web:1 pinned", w.Image)
	}
	b.stop()

	c := newApplyHarness(t, applyOptions{dir: a.dir, serverID: "srv-c"})
	c.revertsSettled() // it has read the log again, and reverted nothing more
	if n := len(c.eventsOf(store.EventRolloutReverted)); n != 1 {
		t.Fatalf("%d reverts after a third server took the loops, want 1", n)
	}
	if w, _ := c.desired("h1").Workload("default/shop/web"); w.Image != pinnedByFake(t, "web:1") {
		t.Fatalf("web runs %s, want web:1 still", w.Image)
	}
}
