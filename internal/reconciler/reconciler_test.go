package reconciler_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/hatchery/hatchery/internal/graph"
	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/reconciler/reconcilertest"
	"github.com/hatchery/hatchery/internal/resource"
)

// shop is a small project: a volume, a database egg using it, a web egg
// reaching the database by its address, and an independent worker.
func shop(webImage string) []*resource.Desired {
	return []*resource.Desired{
		volume("pgdata"),
		egg("db", map[string]any{"image": "postgres:16", "volumes": []any{"${volume/pgdata.name}:/data"}}),
		egg("web", map[string]any{"image": webImage, "env": map[string]any{"DB": "postgres://${egg/db.address}/shop"}}),
		egg("worker", map[string]any{"image": "worker:1"}),
	}
}

func TestReconcileCreatesUpdatesAndLeavesExactMatches(t *testing.T) {
	e := newEnv(t)
	first := e.apply(t, mustGraph(t, shop("web:1")))
	for key, a := range actions(first) {
		if a != reconciler.ActionCreate {
			t.Errorf("first apply: %s %s, want create", key, a)
		}
	}
	before := e.records(t, project)
	web := before["egg/web"]
	wantDB := "postgres://" + before["egg/db"].Outputs["address"].(string) + "/shop"
	if got := web.Inputs["env"].(map[string]any)["DB"]; got != wantDB {
		t.Fatalf("web's DB = %v, want the db's address resolved: %v", got, wantDB)
	}
	if !reflect.DeepEqual(web.Parents, []string{"egg/db"}) || web.Pending {
		t.Fatalf("web's record: parents %v pending %v", web.Parents, web.Pending)
	}

	e.world.ResetCalls()
	second := e.apply(t, mustGraph(t, shop("web:2")))
	want := map[string]reconciler.Action{
		"volume/pgdata": reconciler.ActionUnchanged,
		"egg/db":        reconciler.ActionUnchanged,
		"egg/web":       reconciler.ActionUpdate,
		"egg/worker":    reconciler.ActionUnchanged,
	}
	if got := actions(second); !reflect.DeepEqual(got, want) {
		t.Fatalf("second apply: %v, want %v", got, want)
	}
	if got := callsOf(e.world, reconcilertest.OpUpdate); !reflect.DeepEqual(got, []string{"egg/web"}) {
		t.Fatalf("updates = %v, want only egg/web", got)
	}
	if n := e.world.CountCalls(); n != 1 {
		t.Fatalf("%d provider calls, want 1: exact matches must not call the provider", n)
	}
	rr, _ := second.Get("egg/web")
	if !reflect.DeepEqual(rr.Changed, []string{"image"}) {
		t.Fatalf("web's changed fields = %v, want [image]", rr.Changed)
	}
	after := e.records(t, project)
	if after["egg/web"].ID != web.ID {
		t.Fatalf("update changed web's ID from %s to %s", web.ID, after["egg/web"].ID)
	}
	if got := after["egg/web"].Inputs["image"]; got != "web:2" {
		t.Fatalf("web's recorded image = %v, want web:2", got)
	}
}

func TestReferencesResolveFromParentsCurrentOutputs(t *testing.T) {
	e := newEnv(t)
	e.apply(t, mustGraph(t, shop("web:1")))
	webBefore := e.records(t, project)["egg/web"]

	// A new db image changes db's outputs (the fake derives them from the
	// inputs), so web's resolved DB changes too and web is updated, although
	// its own inputs as written are the same.
	rs := shop("web:1")
	rs[1].Inputs["image"] = "postgres:17"
	e.world.ResetCalls()
	res := e.apply(t, mustGraph(t, rs))
	if got := callsOf(e.world, reconcilertest.OpUpdate); !reflect.DeepEqual(got, []string{"egg/db", "egg/web"}) {
		t.Fatalf("updates = %v, want db then web", got)
	}
	rr, _ := res.Get("egg/web")
	if !reflect.DeepEqual(rr.Changed, []string{"env"}) {
		t.Fatalf("web changed = %v, want [env]", rr.Changed)
	}
	webAfter := e.records(t, project)["egg/web"]
	dbAddress := e.records(t, project)["egg/db"].Outputs["address"].(string)
	if got := webAfter.Inputs["env"].(map[string]any)["DB"]; got != "postgres://"+dbAddress+"/shop" {
		t.Fatalf("web's DB = %v, want db's new address %s", got, dbAddress)
	}
	if webAfter.Inputs["env"].(map[string]any)["DB"] == webBefore.Inputs["env"].(map[string]any)["DB"] {
		t.Fatal("web's DB did not change with db's address")
	}
}

// "$${" is how a literal "${" is written in inputs. A resource without any
// reference must reach its provider unescaped too, like one with references.
func TestEscapesAreUndoneWithoutReferences(t *testing.T) {
	e := newEnv(t)
	e.apply(t, mustGraph(t, []*resource.Desired{
		{Type: resource.Egg, Name: "plain", Inputs: map[string]any{"image": "app:1", "env": map[string]any{"PS1": "$${HOME}>"}}},
	}))
	got := e.records(t, project)["egg/plain"].Inputs["env"].(map[string]any)["PS1"]
	if got != "${HOME}>" {
		t.Fatalf("PS1 = %q, want the escape undone: ${HOME}>", got)
	}
}

func TestNamespacesNeverInterfere(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, p := range []string{"staging/shop", "production/shop"} {
		if _, err := e.r.Reconcile(ctx, p, mustGraph(t, shop("web:1"))); err != nil {
			t.Fatal(err)
		}
	}
	staging, prod := e.records(t, "staging/shop"), e.records(t, "production/shop")
	if len(staging) != 4 || len(prod) != 4 {
		t.Fatalf("records: staging %d, production %d, want 4 each", len(staging), len(prod))
	}
	if staging["egg/web"].ID == prod["egg/web"].ID {
		t.Fatal("the two namespaces share egg/web's ID")
	}
	// Emptying staging deletes staging's resources only.
	if _, err := e.r.Reconcile(ctx, "staging/shop", mustGraph(t, nil)); err != nil {
		t.Fatal(err)
	}
	if n := len(e.records(t, "staging/shop")); n != 0 {
		t.Fatalf("staging keeps %d records after emptying it", n)
	}
	if got := e.records(t, "production/shop"); !reflect.DeepEqual(got, prod) {
		t.Fatal("emptying staging changed production's records")
	}
	if n := len(e.world.Objects("production/shop")); n != 4 {
		t.Fatalf("production has %d objects, want 4", n)
	}
}

func TestProjectMustNameItsNamespace(t *testing.T) {
	e := newEnv(t)
	for _, p := range []string{"shop", "/shop", "default/", "a/b/c", ""} {
		if _, err := e.r.Reconcile(context.Background(), p, mustGraph(t, shop("web:1"))); err == nil {
			t.Errorf("project %q accepted", p)
		}
	}
	if n := e.world.CountCalls(); n != 0 {
		t.Fatalf("%d provider calls for refused projects", n)
	}
}

func TestSameTypeAndNameOnlyMatch(t *testing.T) {
	e := newEnv(t)
	e.apply(t, mustGraph(t, []*resource.Desired{egg("data", map[string]any{"image": "a"})}))
	// volume/data is a different resource from egg/data: created, and egg/data deleted.
	res := e.apply(t, mustGraph(t, []*resource.Desired{volume("data")}))
	want := map[string]reconciler.Action{"volume/data": reconciler.ActionCreate, "egg/data": reconciler.ActionDelete}
	if got := actions(res); !reflect.DeepEqual(got, want) {
		t.Fatalf("actions = %v, want %v", got, want)
	}
}

func TestApplyingTwiceMakesNoProviderCalls(t *testing.T) {
	e := newEnv(t)
	g := mustGraph(t, shop("web:1"), dep("egg/db", "egg/worker", resource.ConditionHealthy))
	e.apply(t, g)
	before := e.records(t, project)
	e.world.ResetCalls()
	res := e.apply(t, g)
	if n := e.world.CountCalls(); n != 0 {
		t.Fatalf("second apply made %d provider calls: %v", n, e.world.Calls())
	}
	if n := res.Count(reconciler.ActionUnchanged); n != 4 {
		t.Fatalf("%d unchanged, want 4", n)
	}
	if after := e.records(t, project); !reflect.DeepEqual(after, before) {
		t.Fatal("second apply changed the records")
	}
}

func TestIDsComeFromIDGen(t *testing.T) {
	e := newEnv(t)
	e.r.IDGen = reconciler.IDGeneratorFunc(func() string { return "fixed-" + time.Now().Format("150405.000000000") })
	e.apply(t, mustGraph(t, []*resource.Desired{egg("a", nil)}))
	rec := e.records(t, project)["egg/a"]
	if !strings.HasPrefix(rec.ID, "fixed-") {
		t.Fatalf("ID %q not from IDGen", rec.ID)
	}
	if objs := e.world.Objects(project); len(objs) != 1 || objs[0].ID != rec.ID {
		t.Fatalf("objects %+v, want one with ID %s", objs, rec.ID)
	}
}

// crashingStorage passes records through until a chosen write, which it
// turns into a crash: that write and every later one fail, and the run's
// context is cancelled, as if the process had died there.
type crashingStorage struct {
	*reconcilertest.Storage
	crashAt func(r *resource.Deployed, deleting bool) bool
	crash   func()
	crashed atomic.Bool
}

func (s *crashingStorage) PutResource(ctx context.Context, project string, r *resource.Deployed) error {
	if s.dies(r, false) {
		return errors.New("crashed")
	}
	return s.Storage.PutResource(ctx, project, r)
}

func (s *crashingStorage) DeleteResource(ctx context.Context, project string, r *resource.Deployed) error {
	if s.dies(r, true) {
		return errors.New("crashed")
	}
	return s.Storage.DeleteResource(ctx, project, r)
}

func (s *crashingStorage) dies(r *resource.Deployed, deleting bool) bool {
	if s.crashed.Load() {
		return true
	}
	if s.crashAt(r, deleting) {
		s.crashed.Store(true)
		s.crash()
		return true
	}
	return false
}

func TestCrashBetweenCreateAndItsRecordLeavesNoDuplicate(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	crashing := &crashingStorage{
		Storage: e.store,
		// The record of web's success: the provider has made the object.
		crashAt: func(r *resource.Deployed, _ bool) bool { return r.Key() == "egg/web" && !r.Pending },
		crash:   cancel,
	}
	e.r.Resources = crashing
	if _, err := e.r.Reconcile(ctx, project, mustGraph(t, shop("web:1"))); err == nil {
		t.Fatal("the crashed run reported success")
	}
	pending := e.records(t, project)["egg/web"]
	if pending == nil || !pending.Pending {
		t.Fatalf("after the crash web's record is %+v, want pending", pending)
	}
	if n := countObjects(e.world, "egg/web"); n != 1 {
		t.Fatalf("after the crash %d web objects, want the 1 the provider made", n)
	}

	e.r.Resources = e.store
	e.apply(t, mustGraph(t, shop("web:1")))
	rec := e.records(t, project)["egg/web"]
	if rec.Pending || rec.ID != pending.ID {
		t.Fatalf("re-run recorded %+v, want web confirmed with the pending ID %s", rec, pending.ID)
	}
	for _, key := range []string{"volume/pgdata", "egg/db", "egg/web", "egg/worker"} {
		if n := countObjects(e.world, key); n != 1 {
			t.Errorf("%d objects for %s, want 1", n, key)
		}
	}
}

func countObjects(w *reconcilertest.World, key string) int {
	n := 0
	for _, o := range w.Objects(project) {
		if o.Key() == key {
			n++
		}
	}
	return n
}

func TestChildWaitsForParentReadinessWithoutHoldingASlot(t *testing.T) {
	e := newEnv(t)
	e.r.Concurrency = 1
	e.r.Backoff = func() backoff.BackOff {
		return backoff.WithMaxRetries(backoff.NewConstantBackOff(5*time.Millisecond), 20)
	}
	var polls atomic.Int32
	e.egg.ReadyFunc = func(c reconcilertest.Call, cond resource.Condition) (bool, string, error) {
		if c.Key != "egg/db" || cond != resource.ConditionHealthy {
			t.Errorf("ready asked of %s for %q", c.Key, cond)
		}
		if polls.Add(1) < 4 {
			return false, "0/1 replicas healthy", nil
		}
		return true, "", nil
	}
	// Independent resources keep the single slot busy while web waits: they
	// must run between db's readiness polls.
	rs := []*resource.Desired{egg("db", nil), egg("web", nil)}
	for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
		rs = append(rs, &resource.Desired{Type: resource.Network, Name: n})
	}
	e.egg.Hook = func(ctx context.Context, c reconcilertest.Call) error {
		time.Sleep(2 * time.Millisecond)
		return nil
	}
	e.network.Hook = e.egg.Hook
	e.apply(t, mustGraph(t, rs, dep("egg/db", "egg/web", resource.ConditionHealthy)))

	calls := e.world.Calls()
	var firstPoll, lastPoll, webCreate = -1, -1, -1
	for i, c := range calls {
		switch {
		case c.Op == reconcilertest.OpReady:
			if firstPoll < 0 {
				firstPoll = i
			}
			lastPoll = i
		case c.Key == "egg/web":
			webCreate = i
		}
	}
	if polls.Load() != 4 {
		t.Fatalf("%d polls, want 4", polls.Load())
	}
	if webCreate < lastPoll {
		t.Fatalf("web created (call %d) before db was ready (call %d)", webCreate, lastPoll)
	}
	between := 0
	for _, c := range calls[firstPoll:lastPoll] {
		if c.Op == reconcilertest.OpCreate {
			between++
		}
	}
	if between == 0 {
		t.Fatalf("no create ran while web waited for db: the wait held the only slot\n%v", calls)
	}
	if e.world.MaxInflight() > 1 {
		t.Fatalf("max in flight %d, want 1", e.world.MaxInflight())
	}
}

func TestParentNeverReadyFailsChildWithReason(t *testing.T) {
	tests := []struct {
		name      string
		cond      resource.Condition
		ready     func() (bool, string, error)
		wantPolls int32
		wantIn    string
	}{
		{
			name:      "unhealthy until the backoff gives up",
			cond:      resource.ConditionHealthy,
			ready:     func() (bool, string, error) { return false, "1/3 replicas healthy at the new spec", nil },
			wantPolls: 4, // the first check and 3 retries
			wantIn:    "egg/db is not healthy: not ready: 1/3 replicas healthy at the new spec",
		},
		{
			name:      "a job that failed is never completed",
			cond:      resource.ConditionCompleted,
			ready:     func() (bool, string, error) { return false, "", backoff.Permanent(errors.New("exited with status 1")) },
			wantPolls: 1,
			wantIn:    "egg/db is not completed: exited with status 1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			var polls atomic.Int32
			e.egg.ReadyFunc = func(reconcilertest.Call, resource.Condition) (bool, string, error) {
				polls.Add(1)
				return tt.ready()
			}
			g := mustGraph(t, []*resource.Desired{egg("db", nil), egg("web", nil), egg("edge", map[string]any{"up": "${egg/web.address}"}), egg("other", nil)},
				dep("egg/db", "egg/web", tt.cond))
			res, err := e.r.Reconcile(context.Background(), project, g)
			if err == nil {
				t.Fatal("reconcile succeeded though web's parent never became ready")
			}
			want := map[string]reconciler.Action{
				"egg/db": reconciler.ActionCreate, "egg/web": reconciler.ActionFailed,
				"egg/edge": reconciler.ActionSkipped, "egg/other": reconciler.ActionCreate,
			}
			if got := actions(res); !reflect.DeepEqual(got, want) {
				t.Fatalf("actions = %v, want %v", got, want)
			}
			web, _ := res.Get("egg/web")
			if !strings.Contains(web.Err.Error(), tt.wantIn) {
				t.Fatalf("web's error %q does not say %q", web.Err, tt.wantIn)
			}
			if polls.Load() != tt.wantPolls {
				t.Fatalf("%d polls, want %d", polls.Load(), tt.wantPolls)
			}
			if n := countObjects(e.world, "egg/web"); n != 0 {
				t.Fatalf("web was created anyway")
			}
		})
	}
}

func TestResourceStartsAsSoonAsItsParentsSucceed(t *testing.T) {
	// slow and fast are roots; after fast comes child. With no level barrier,
	// child runs while slow is still running.
	e := newEnv(t)
	slow := newGate()
	e.egg.Hook = func(ctx context.Context, c reconcilertest.Call) error {
		if c.Key == "egg/slow" {
			select {
			case <-slow.wait():
			case <-time.After(5 * time.Second):
				return errors.New("slow was never released")
			}
		}
		if c.Key == "egg/child" {
			slow.open()
		}
		return nil
	}
	e.apply(t, mustGraph(t, []*resource.Desired{egg("slow", nil), egg("fast", nil), egg("child", map[string]any{"x": "${egg/fast.address}"})}))
	start, end := firstStartAndLastEnd(e.world)
	if start["egg/child"] > end["egg/slow"] {
		t.Fatal("child waited for slow, which it does not depend on")
	}
}

func TestCriticalPathStartsFirst(t *testing.T) {
	// Leaves a1..a5 are listed (and ready) before the chain z1 -> z2 -> z3;
	// with one slot, the chain's head must go first all the same.
	rs := []*resource.Desired{}
	for _, n := range []string{"a1", "a2", "a3", "a4", "a5"} {
		rs = append(rs, egg(n, nil))
	}
	rs = append(rs, egg("z1", nil), egg("z2", map[string]any{"p": "${egg/z1.address}"}), egg("z3", map[string]any{"p": "${egg/z2.address}"}))
	tests := []struct {
		fifo bool
		want string
	}{
		{fifo: false, want: "egg/z1"},
		{fifo: true, want: "egg/a1"}, // readiness order: shows the priority is what decides
	}
	for _, tt := range tests {
		e := newEnv(t)
		e.r.Concurrency = 1
		reconciler.SetFIFO(e.r, tt.fifo)
		e.apply(t, mustGraph(t, rs))
		if got := callsOf(e.world, reconcilertest.OpCreate)[0]; got != tt.want {
			t.Errorf("fifo=%v: first create %s, want %s", tt.fifo, got, tt.want)
		}
	}
}

func TestFailureSkipsDescendantsAndIndependentBranchesCarryOn(t *testing.T) {
	e := newEnv(t)
	e.apply(t, mustGraph(t, []*resource.Desired{egg("old", nil)}))
	e.world.ResetCalls()
	boom := errors.New("image not found")
	e.egg.Hook = func(ctx context.Context, c reconcilertest.Call) error {
		if c.Key == "egg/db" {
			return backoff.Permanent(boom)
		}
		return nil
	}
	res, err := e.r.Reconcile(context.Background(), project, mustGraph(t,
		append(shop("web:1"), egg("edge", map[string]any{"u": "${egg/web.address}"}))))
	if err == nil || !errors.Is(err, boom) {
		t.Fatalf("reconcile error %v, want it to carry db's failure", err)
	}
	want := map[string]reconciler.Action{
		"volume/pgdata": reconciler.ActionCreate, // independent of db: carries on
		"egg/db":        reconciler.ActionFailed,
		"egg/web":       reconciler.ActionSkipped,
		"egg/edge":      reconciler.ActionSkipped,
		"egg/worker":    reconciler.ActionCreate,
		"egg/old":       reconciler.ActionSkipped,
	}
	if got := actions(res); !reflect.DeepEqual(got, want) {
		t.Fatalf("actions = %v, want %v", got, want)
	}
	db, _ := res.Get("egg/db")
	if db.Attempts != 1 || !errors.Is(db.Err, boom) || db.Planned != reconciler.ActionCreate {
		t.Fatalf("db: attempts %d, planned %s, err %v; want 1 attempt of a create failing with %v", db.Attempts, db.Planned, db.Err, boom)
	}
	edge, _ := res.Get("egg/edge")
	if !errors.Is(edge.Err, reconciler.ErrSkipped) || !strings.Contains(edge.Err.Error(), "egg/db failed") {
		t.Fatalf("edge's cause %q does not name egg/db", edge.Err)
	}
	old, _ := res.Get("egg/old")
	if old.Planned != reconciler.ActionDelete || !strings.Contains(old.Err.Error(), "nothing is deleted") {
		t.Fatalf("old: %+v, want a skipped delete saying why", old)
	}
	if n := e.world.CountCalls(reconcilertest.OpDelete); n != 0 {
		t.Fatalf("%d deletes after a failure", n)
	}
	if countObjects(e.world, "egg/old") != 1 {
		t.Fatal("egg/old is gone although the run failed")
	}
}

func TestDeletesRunLastChildrenFirst(t *testing.T) {
	e := newEnv(t)
	e.apply(t, mustGraph(t, []*resource.Desired{
		volume("olddata"),
		egg("olddb", map[string]any{"v": "${volume/olddata.name}"}),
		egg("oldweb", map[string]any{"db": "${egg/olddb.address}"}),
		egg("keep", nil),
	}))
	e.world.ResetCalls()
	res := e.apply(t, mustGraph(t, []*resource.Desired{egg("keep", nil), egg("new", nil)}))
	if got, want := callsOf(e.world, reconcilertest.OpDelete), []string{"egg/oldweb", "egg/olddb", "volume/olddata"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("deletes in order %v, want %v", got, want)
	}
	start, end := firstStartAndLastEnd(e.world)
	if start["egg/oldweb"] < end["egg/new"] {
		t.Fatal("a delete started before the create phase was over")
	}
	for _, key := range []string{"egg/oldweb", "egg/olddb", "volume/olddata"} {
		if rr, _ := res.Get(key); rr.Action != reconciler.ActionDelete {
			t.Errorf("%s: %s, want delete", key, rr.Action)
		}
	}
	if recs := e.records(t, project); len(recs) != 2 {
		t.Fatalf("records left: %v", sortedKeys(recs))
	}
	if objs := e.world.Objects(project); len(objs) != 2 {
		t.Fatalf("objects left: %+v", objs)
	}
}

func TestDeletesRunConcurrentlyWithinTheLimit(t *testing.T) {
	e := newEnv(t)
	var rs []*resource.Desired
	for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
		rs = append(rs, egg(n, nil))
	}
	e.apply(t, mustGraph(t, rs))
	e.r.Concurrency = 3
	var inflight, peak atomic.Int32
	e.egg.Hook = func(ctx context.Context, c reconcilertest.Call) error {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(10 * time.Millisecond)
		return nil
	}
	e.world.ResetCalls()
	e.apply(t, mustGraph(t, nil))
	if p := peak.Load(); p != 3 {
		t.Fatalf("peak of %d concurrent deletes, want the limit 3", p)
	}
}

func TestFailedDeleteKeepsItsParents(t *testing.T) {
	e := newEnv(t)
	e.apply(t, mustGraph(t, []*resource.Desired{volume("data"), egg("db", map[string]any{"v": "${volume/data.name}"})}))
	e.egg.Hook = func(ctx context.Context, c reconcilertest.Call) error {
		return backoff.Permanent(errors.New("container will not stop"))
	}
	res, err := e.r.Reconcile(context.Background(), project, mustGraph(t, nil))
	if err == nil {
		t.Fatal("a failed delete reported success")
	}
	want := map[string]reconciler.Action{"egg/db": reconciler.ActionFailed, "volume/data": reconciler.ActionSkipped}
	if got := actions(res); !reflect.DeepEqual(got, want) {
		t.Fatalf("actions = %v, want %v", got, want)
	}
	if countObjects(e.world, "volume/data") != 1 {
		t.Fatal("the volume was deleted while its egg still exists")
	}
}

func TestRetries(t *testing.T) {
	tests := []struct {
		name         string
		failures     int // failing attempts before success
		permanent    bool
		wantAction   reconciler.Action
		wantAttempts int
	}{
		{name: "transient errors are retried", failures: 2, wantAction: reconciler.ActionCreate, wantAttempts: 3},
		{name: "the backoff gives up", failures: 10, wantAction: reconciler.ActionFailed, wantAttempts: 4},
		{name: "permanent errors are not retried", failures: 10, permanent: true, wantAction: reconciler.ActionFailed, wantAttempts: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			var attempts atomic.Int32
			e.egg.Hook = func(ctx context.Context, c reconcilertest.Call) error {
				if int(attempts.Add(1)) <= tt.failures {
					err := errors.New("engine busy")
					if tt.permanent {
						return backoff.Permanent(err)
					}
					return err
				}
				return nil
			}
			res, _ := e.r.Reconcile(context.Background(), project, mustGraph(t, []*resource.Desired{egg("web", nil)}))
			rr, _ := res.Get("egg/web")
			if rr.Action != tt.wantAction || rr.Attempts != tt.wantAttempts {
				t.Fatalf("web: %s after %d attempts, want %s after %d", rr.Action, rr.Attempts, tt.wantAction, tt.wantAttempts)
			}
			if n := countObjects(e.world, "egg/web"); n > 1 {
				t.Fatalf("%d web objects after retries", n)
			}
		})
	}
}

func TestBackoffDelayDoesNotHoldASlot(t *testing.T) {
	e := newEnv(t)
	e.r.Concurrency = 1
	e.r.Backoff = func() backoff.BackOff {
		return backoff.WithMaxRetries(backoff.NewConstantBackOff(50*time.Millisecond), 1)
	}
	var failed atomic.Bool
	e.egg.Hook = func(ctx context.Context, c reconcilertest.Call) error {
		if c.Key == "egg/flaky" && failed.CompareAndSwap(false, true) {
			return errors.New("once")
		}
		return nil
	}
	// flaky has the longest chain, so it goes first; its retry delay must let
	// the others through.
	e.apply(t, mustGraph(t, []*resource.Desired{
		egg("flaky", nil), egg("after", map[string]any{"x": "${egg/flaky.address}"}), egg("b", nil), egg("c", nil),
	}))
	got := callsOf(e.world, reconcilertest.OpCreate)
	want := []string{"egg/flaky", "egg/b", "egg/c", "egg/flaky", "egg/after"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("creates in order %v, want %v", got, want)
	}
}

func TestCancelStopsRetriesPromptly(t *testing.T) {
	e := newEnv(t)
	e.r.Backoff = func() backoff.BackOff { return backoff.NewConstantBackOff(time.Hour) }
	ctx, cancel := context.WithCancel(context.Background())
	e.egg.Hook = func(ctx context.Context, c reconcilertest.Call) error {
		if c.Key == "egg/web" {
			time.AfterFunc(10*time.Millisecond, cancel)
			return errors.New("not yet")
		}
		return nil
	}
	e.egg.ReadyFunc = func(reconcilertest.Call, resource.Condition) (bool, string, error) { return false, "booting", nil }
	done := make(chan struct{})
	var res reconciler.Result
	var err error
	go func() {
		defer close(done)
		res, err = e.r.Reconcile(ctx, project, mustGraph(t,
			[]*resource.Desired{egg("web", nil), egg("db", nil), egg("api", nil)},
			dep("egg/db", "egg/api", resource.ConditionHealthy)))
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Reconcile still waiting 5s after the cancel")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want it to say the context was cancelled", err)
	}
	web, _ := res.Get("egg/web")
	if web.Action != reconciler.ActionFailed || !strings.Contains(web.Err.Error(), "not yet") {
		t.Fatalf("web: %s %v, want failed, naming the last attempt's error", web.Action, web.Err)
	}
	api, _ := res.Get("egg/api")
	if api.Action == reconciler.ActionCreate {
		t.Fatal("api was created though db never became ready")
	}
}

func TestCancelledRunIsFinishedByARerun(t *testing.T) {
	e := newEnv(t)
	e.r.Concurrency = 1
	ctx, cancel := context.WithCancel(context.Background())
	var creates atomic.Int32
	e.egg.Hook = func(_ context.Context, c reconcilertest.Call) error {
		if creates.Add(1) == 2 {
			cancel() // mid-walk: this call still lands and is recorded
		}
		return nil
	}
	if _, err := e.r.Reconcile(ctx, project, mustGraph(t, shop("web:1"))); !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	done := len(e.records(t, project))
	if done == 0 || done == 4 {
		t.Fatalf("%d records after the cancel; the test wants a run cut midway", done)
	}
	e.world.ResetCalls()
	e.apply(t, mustGraph(t, shop("web:1")))
	if n := e.world.CountCalls(reconcilertest.OpCreate); n != 4-done {
		t.Fatalf("re-run made %d creates, want the %d left", n, 4-done)
	}
	if len(e.records(t, project)) != 4 || len(e.world.Objects(project)) != 4 {
		t.Fatal("re-run did not finish the job")
	}
}

func TestSourceIsCheckedBeforeTheProvider(t *testing.T) {
	e := newEnv(t)
	web := egg("web", map[string]any{"image": "built"})
	web.Source = "sha256:aaaa"
	res, err := e.r.Reconcile(context.Background(), project, mustGraph(t, []*resource.Desired{web}))
	if !errors.Is(err, reconciler.ErrSourceMissing) {
		t.Fatalf("error %v, want ErrSourceMissing", err)
	}
	if rr, _ := res.Get("egg/web"); rr.Attempts != 1 || rr.Action != reconciler.ActionFailed {
		t.Fatalf("web: %+v, want one failed attempt (permanent)", rr)
	}
	if n := e.world.CountCalls(); n != 0 {
		t.Fatalf("%d provider calls for a resource without its source", n)
	}

	e.sources.Add("sha256:aaaa")
	e.apply(t, mustGraph(t, []*resource.Desired{web}))
	if objs := e.world.Objects(project); len(objs) != 1 || objs[0].Source != "sha256:aaaa" {
		t.Fatalf("objects %+v, want web built from sha256:aaaa", objs)
	}
	// A new source alone is an update.
	e.sources.Add("sha256:bbbb")
	web2 := egg("web", map[string]any{"image": "built"})
	web2.Source = "sha256:bbbb"
	res = e.apply(t, mustGraph(t, []*resource.Desired{web2}))
	if rr, _ := res.Get("egg/web"); rr.Action != reconciler.ActionUpdate || !reflect.DeepEqual(rr.Changed, []string{"source"}) {
		t.Fatalf("web: %s changed %v, want update of [source]", rr.Action, rr.Changed)
	}
}

func TestBadGraphsAreRefusedBeforeAnythingRuns(t *testing.T) {
	web := egg("web", map[string]any{"db": "${egg/api.address}"})
	api := egg("api", map[string]any{"w": "${egg/web.address}"})
	tests := []struct {
		name  string
		graph reconciler.Graph
		want  []string
		as    any
	}{
		{
			name: "cycle, with its path",
			graph: &fakeGraph{
				leaves:  []*resource.Desired{egg("edge", map[string]any{"u": "${egg/web.address}"})},
				parents: map[string][]*resource.Desired{"egg/edge": {web}, "egg/web": {api}, "egg/api": {web}},
			},
			want: []string{"egg/api -> egg/web -> egg/api"},
			as:   new(*graph.CycleError),
		},
		{
			name: "cycle no leaf reaches, seen in the graph's list of resources",
			graph: listingGraph{&fakeGraph{
				leaves:  []*resource.Desired{egg("alone", nil)},
				parents: map[string][]*resource.Desired{"egg/web": {api}, "egg/api": {web}},
			}, []*resource.Desired{egg("alone", nil), web, api}},
			want: []string{"egg/api -> egg/web -> egg/api"},
			as:   new(*graph.CycleError),
		},
		{
			name: "duplicate type and name",
			graph: &fakeGraph{
				leaves:  []*resource.Desired{egg("web", map[string]any{"image": "a"}), egg("web", map[string]any{"image": "b"})},
				parents: map[string][]*resource.Desired{},
			},
			want: []string{"egg/web is defined twice"},
			as:   new(*graph.DuplicateError),
		},
		{
			name: "nil parent",
			graph: &fakeGraph{
				leaves:  []*resource.Desired{egg("web", nil)},
				parents: map[string][]*resource.Desired{"egg/web": {nil}},
			},
			want: []string{"egg/web: graph holds a nil parent"},
			as:   new(error),
		},
		{
			name: "parent listed twice",
			graph: &fakeGraph{
				leaves:  []*resource.Desired{egg("web", nil)},
				parents: map[string][]*resource.Desired{"egg/web": {volume("data"), volume("data")}},
			},
			want: []string{"volume/data is defined twice"},
			as:   new(*graph.DuplicateError),
		},
		{
			name:  "unknown type, listing the known ones",
			graph: mustGraph(t, []*resource.Desired{{Type: "eg", Name: "web"}}),
			want:  []string{`eg/web: unknown type "eg" (known types: egg, network, volume)`},
			as:    new(*reconciler.UnknownTypeError),
		},
		{
			name: "reference to a missing resource",
			graph: &fakeGraph{
				leaves: []*resource.Desired{egg("web", map[string]any{"db": "${egg/db.address}"})},
			},
			want: []string{"egg/web references ${egg/db.address}, but egg/db is not defined"},
			as:   new(*graph.MissingError),
		},
		{
			name: "dependency on a missing resource",
			graph: &fakeGraph{
				leaves: []*resource.Desired{egg("web", nil)},
				deps:   map[string][]*resource.Dependency{"egg/web": {dep("egg/db", "egg/web", "")}},
			},
			want: []string{"egg/web depends on egg/db, which is not defined"},
			as:   new(*graph.MissingError),
		},
		{
			name: "reference to an output the type does not declare",
			graph: mustGraph(t, []*resource.Desired{volume("data"),
				egg("db", map[string]any{"v": "${volume/data.size}"})}),
			want: []string{"egg/db references ${volume/data.size}, an output its type does not declare (declared: host, name)"},
			as:   new(*reconciler.UnknownOutputError),
		},
		{
			name: "condition the parent's type cannot report",
			graph: mustGraph(t, []*resource.Desired{volume("data"), egg("db", nil)},
				dep("volume/data", "egg/db", resource.ConditionHealthy)),
			want: []string{`egg/db depends on volume/data with condition "healthy", which volume/data cannot report (supported: created)`},
			as:   new(*reconciler.ConditionError),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			_, err := e.r.Reconcile(context.Background(), project, tt.graph)
			if !errors.Is(err, reconciler.ErrInvalidGraph) {
				t.Fatalf("error %v, want ErrInvalidGraph", err)
			}
			if !errors.As(err, tt.as) {
				t.Errorf("error %v is not a %T", err, tt.as)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if _, perr := e.r.Plan(context.Background(), project, tt.graph); !errors.Is(perr, reconciler.ErrInvalidGraph) {
				t.Errorf("Plan accepted the graph: %v", perr)
			}
			if n := e.world.CountCalls(); n != 0 {
				t.Fatalf("%d provider calls for a refused graph", n)
			}
			if n := len(e.records(t, project)); n != 0 {
				t.Fatalf("%d records written for a refused graph", n)
			}
		})
	}
}

func TestRefusedRunDeletesNothing(t *testing.T) {
	e := newEnv(t)
	e.apply(t, mustGraph(t, []*resource.Desired{egg("web", nil)}))
	e.world.ResetCalls()
	if _, err := e.r.Reconcile(context.Background(), project, mustGraph(t, []*resource.Desired{{Type: "eg", Name: "x"}})); err == nil {
		t.Fatal("accepted a graph with an unknown type")
	}
	if n := e.world.CountCalls(); n != 0 {
		t.Fatalf("%d provider calls", n)
	}
}

func TestResultAndLogsDescribeEachOperation(t *testing.T) {
	e := newEnv(t)
	core, logs := observer.New(zap.InfoLevel)
	e.r.Logger = zap.New(core)
	var failedOnce atomic.Bool
	e.egg.Hook = func(ctx context.Context, c reconcilertest.Call) error {
		time.Sleep(time.Millisecond)
		if c.Key == "egg/web" && failedOnce.CompareAndSwap(false, true) {
			return errors.New("busy")
		}
		return nil
	}
	res := e.apply(t, mustGraph(t, shop("web:1")))
	web, _ := res.Get("egg/web")
	if web.Attempts != 2 || web.Duration < 2*time.Millisecond || web.ID == "" || web.Err != nil {
		t.Fatalf("web's result %+v, want 2 attempts of at least 1ms each, an ID and no error", web)
	}
	if res.Project != project || len(res.Resources) != 4 || res.Duration < web.Duration {
		t.Fatalf("result %+v", res)
	}
	created := logs.FilterMessage("create").FilterField(zap.String("resource", "egg/web"))
	if created.Len() != 1 {
		t.Fatalf("want one 'create' log line for egg/web, got %d of %v", created.Len(), logs.All())
	}
	if got := created.All()[0].ContextMap()["project"]; got != project {
		t.Fatalf("log line's project = %v", got)
	}
	if logs.FilterMessage("retrying create").Len() != 1 {
		t.Fatalf("want one retry logged, got %v", logs.All())
	}
}

func TestNilLoggerDiscards(t *testing.T) {
	e := newEnv(t)
	e.r.Logger = nil
	e.apply(t, mustGraph(t, shop("web:1")))
}

func TestCancelledRunDeletesNothing(t *testing.T) {
	e := newEnv(t)
	e.apply(t, mustGraph(t, []*resource.Desired{egg("old", nil)}))
	ctx, cancel := context.WithCancel(context.Background())
	e.egg.Hook = func(_ context.Context, c reconcilertest.Call) error {
		if c.Key == "egg/new" {
			cancel() // the create still lands; the deletes must not start
		}
		return nil
	}
	res, _ := e.r.Reconcile(ctx, project, mustGraph(t, []*resource.Desired{egg("new", nil)}))
	old, _ := res.Get("egg/old")
	if old.Action != reconciler.ActionSkipped || !errors.Is(old.Err, context.Canceled) || !errors.Is(old.Err, reconciler.ErrSkipped) {
		t.Fatalf("old: %s %v, want skipped because of the cancel", old.Action, old.Err)
	}
	if n := e.world.CountCalls(reconcilertest.OpDelete); n != 0 {
		t.Fatalf("%d deletes after the cancel", n)
	}
	if nw, _ := res.Get("egg/new"); nw.Action != reconciler.ActionCreate {
		t.Fatalf("new: %s, want the create that landed before the cancel recorded", nw.Action)
	}
	e.egg.Hook = nil
	res = e.apply(t, mustGraph(t, []*resource.Desired{egg("new", nil)}))
	if got := actions(res); !reflect.DeepEqual(got, map[string]reconciler.Action{"egg/new": reconciler.ActionUnchanged, "egg/old": reconciler.ActionDelete}) {
		t.Fatalf("re-run: %v", got)
	}
}
