package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"pgregory.net/rapid"

	"github.com/hatchery/hatchery/internal/graph"
	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/reconciler/reconcilertest"
	"github.com/hatchery/hatchery/internal/resource"
)

// randomGraph builds a random DAG over a universe of names "n0".."n<size-1>"
// (a name's type is fixed by its index, so two graphs over one universe match
// by type and name): each name is present with some probability, depends on
// a few earlier present names, by reference or by condition, and carries a
// version input that differs between draws.
func randomGraph(rng *rand.Rand, size int) ([]*resource.Desired, []*resource.Dependency) {
	typeOf := func(i int) resource.Kind {
		if i%4 == 0 {
			return resource.Volume
		}
		return resource.Egg
	}
	var rs []*resource.Desired
	var deps []*resource.Dependency
	var present []int
	for i := range size {
		if rng.IntN(10) < 2 {
			continue
		}
		r := &resource.Desired{Type: typeOf(i), Name: fmt.Sprintf("n%d", i), Inputs: map[string]any{"version": rng.IntN(2)}}
		for p := 0; p < 3 && len(present) > 0; p++ {
			j := present[rng.IntN(len(present))]
			parent := resource.Key(typeOf(j), fmt.Sprintf("n%d", j))
			switch {
			case typeOf(j) == resource.Volume:
				r.Inputs[fmt.Sprintf("p%d", j)] = "${" + parent + ".name}"
			case rng.IntN(3) == 0 && r.Type == resource.Egg:
				deps = append(deps, &resource.Dependency{Parent: parent, Child: r.Key(), Condition: resource.ConditionHealthy})
			default:
				r.Inputs[fmt.Sprintf("p%d", j)] = "http://${" + parent + ".address}/"
			}
		}
		rs = append(rs, r)
		present = append(present, i)
	}
	return rs, deps
}

// fate is how a resource's provider calls behave in a property run.
type fate struct {
	transient int // attempts that fail before one succeeds
	permanent bool
	latency   time.Duration
}

func drawFates(rng *rand.Rand, size int) map[string]fate {
	fates := map[string]fate{}
	for i := range size {
		var f fate
		switch r := rng.IntN(100); {
		case r < 4:
			f.permanent = true
		case r < 14:
			f.transient = 1 + rng.IntN(2)
		}
		if rng.IntN(4) == 0 {
			f.latency = time.Duration(rng.IntN(300)) * time.Microsecond
		}
		fates[fmt.Sprintf("n%d", i)] = f
	}
	return fates
}

// hookFates makes every provider of e behave as the fates say.
func hookFates(e *env, fates map[string]fate) {
	var mu = make(chan struct{}, 1)
	failed := map[string]int{}
	hook := func(ctx context.Context, c reconcilertest.Call) error {
		_, name, _ := cutKey(c.Key)
		f := fates[name]
		time.Sleep(f.latency)
		if f.permanent && c.Op != reconcilertest.OpReady {
			return backoff.Permanent(errors.New("doomed"))
		}
		mu <- struct{}{}
		defer func() { <-mu }()
		if failed[c.Key+string(c.Op)] < f.transient {
			failed[c.Key+string(c.Op)]++
			return errors.New("flaky")
		}
		return nil
	}
	e.egg.Hook, e.volume.Hook = hook, hook
}

func cutKey(key string) (typ, name string, ok bool) {
	for i := range key {
		if key[i] == '/' {
			return key[:i], key[i+1:], true
		}
	}
	return "", key, false
}

// TestPropertyWalk checks the walk's invariants over random graphs, random
// concurrency limits, random transient and permanent failures and latencies,
// starting from a random earlier deployment (so creates, updates, deletes and
// unchanged resources all occur).
func TestPropertyWalk(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		size := rapid.IntRange(1, 200).Draw(rt, "size")
		seed := rapid.Uint64().Draw(rt, "seed")
		limit := rapid.IntRange(1, 12).Draw(rt, "concurrency")
		rng := rand.New(rand.NewPCG(seed, 1))

		e := quietEnv()
		r1, d1 := randomGraph(rng, size)
		e.apply(rt, mustGraph(rt, r1, d1...))
		r2, d2 := randomGraph(rng, size)
		g2 := mustGraph(rt, r2, d2...)

		e.world.ResetCalls()
		e.r.Concurrency = uint(limit)
		hookFates(e, drawFates(rng, size))
		res, err := e.r.Reconcile(context.Background(), project, g2)

		if m := e.world.MaxInflight(); m > limit {
			rt.Fatalf("%d provider calls in flight, limit %d", m, limit)
		}
		checkParentsFirst(rt, e.world, g2)
		troubled := res.Count(reconciler.ActionFailed) + res.Count(reconciler.ActionSkipped)
		if (troubled > 0) != (err != nil) {
			rt.Fatalf("%d failed or skipped, but error %v", troubled, err)
		}
		desiredTroubled := 0
		for _, r := range r2 {
			if rr, _ := res.Get(r.Key()); rr.Action == reconciler.ActionFailed || rr.Action == reconciler.ActionSkipped {
				desiredTroubled++
			}
		}
		if desiredTroubled > 0 && e.world.CountCalls(reconcilertest.OpDelete) > 0 {
			rt.Fatalf("deleted after a failure: %v", err)
		}
		for _, r := range g2.Resources() {
			rr, _ := res.Get(r.Key())
			if rr.Action != reconciler.ActionFailed && rr.Action != reconciler.ActionSkipped {
				continue
			}
			for _, child := range g2.Children(r.Key()) {
				if cr, _ := res.Get(child); cr.Action != reconciler.ActionSkipped {
					rt.Fatalf("%s is %s, but its parent %s is %s", child, cr.Action, r.Key(), rr.Action)
				}
			}
		}

		// Without the failures a re-run finishes the job; the next makes no call.
		e.egg.Hook, e.volume.Hook = nil, nil
		e.apply(rt, g2)
		checkDeployed(rt, e, r2)
		e.world.ResetCalls()
		e.apply(rt, g2)
		if n := e.world.CountCalls(); n != 0 {
			rt.Fatalf("a second run made %d provider calls", n)
		}
	})
}

// checkParentsFirst asserts that no resource's operation started before
// each of its parents' operations of the same run ended, nor before the last
// readiness check of a parent whose condition it waits for.
func checkParentsFirst(t *rapid.T, w *reconcilertest.World, g *graph.Graph) {
	start, opEnd, readyEnd := map[string]int{}, map[string]int{}, map[string]int{}
	for _, c := range w.Calls() {
		switch c.Op {
		case reconcilertest.OpDelete:
		case reconcilertest.OpReady:
			readyEnd[c.Key] = max(readyEnd[c.Key], c.End)
		default:
			if _, ok := start[c.Key]; !ok {
				start[c.Key] = c.Start
			}
			opEnd[c.Key] = max(opEnd[c.Key], c.End)
		}
	}
	for _, r := range g.Resources() {
		s, ok := start[r.Key()]
		if !ok {
			continue
		}
		for _, d := range g.DependenciesOf(r.Key()) {
			if opEnd[d.Parent] > s {
				t.Fatalf("%s started (tick %d) before its parent %s ended (tick %d)", r.Key(), s, d.Parent, opEnd[d.Parent])
			}
			if d.Condition != resource.ConditionCreated && readyEnd[d.Parent] > s {
				t.Fatalf("%s started (tick %d) before its parent %s was found %s (tick %d)", r.Key(), s, d.Parent, d.Condition, readyEnd[d.Parent])
			}
		}
	}
}

// checkDeployed asserts that storage and the world hold exactly the desired
// resources, each confirmed and made once.
func checkDeployed(t *rapid.T, e *env, rs []*resource.Desired) {
	recs := e.records(t, project)
	objs := map[string][]reconcilertest.Object{}
	for _, o := range e.world.Objects(project) {
		objs[o.Key()] = append(objs[o.Key()], o)
	}
	if len(recs) != len(rs) || len(objs) != len(rs) {
		t.Fatalf("%d records and %d objects for %d desired resources", len(recs), len(objs), len(rs))
	}
	for _, r := range rs {
		rec, ok := recs[r.Key()]
		if !ok || rec.Pending {
			t.Fatalf("%s: record %+v, want a confirmed one", r.Key(), rec)
		}
		if got := objs[r.Key()]; len(got) != 1 || got[0].ID != rec.ID || !resource.Equal(got[0].Inputs, rec.Inputs) {
			t.Fatalf("%s: objects %+v, want one matching record %+v", r.Key(), got, rec)
		}
	}
}

// deployedSet is what a deployment amounts to, IDs aside: each key's
// resolved inputs.
func deployedSet(t *rapid.T, e *env) map[string]string {
	out := map[string]string{}
	for key, rec := range e.records(t, project) {
		out[key] = fmt.Sprintf("pending=%v inputs=%v", rec.Pending, reconcilertest.Revision(rec.Inputs))
	}
	return out
}

// TestPropertyInterruptedRunThenRerun interrupts a run at a random point,
// either by cancelling its context or by crashing its storage (every write
// from a random one on fails, as if the process had died), re-runs it, and
// finds the same deployment as an uninterrupted run, with one object per
// resource: no duplicate, nothing forgotten.
func TestPropertyInterruptedRunThenRerun(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		size := rapid.IntRange(1, 200).Draw(rt, "size")
		seed := rapid.Uint64().Draw(rt, "seed")
		limit := rapid.IntRange(1, 12).Draw(rt, "concurrency")
		crash := rapid.Bool().Draw(rt, "crash")
		rng := rand.New(rand.NewPCG(seed, 2))
		r1, d1 := randomGraph(rng, size)
		r2, d2 := randomGraph(rng, size)

		reference := quietEnv()
		reference.apply(rt, mustGraph(rt, r1, d1...))
		reference.apply(rt, mustGraph(rt, r2, d2...))
		want := deployedSet(rt, reference)

		e := quietEnv()
		e.r.Concurrency = uint(limit)
		e.apply(rt, mustGraph(rt, r1, d1...))
		e.world.ResetCalls()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if crash {
			var writes atomic.Int64
			at := int64(rapid.IntRange(1, 2*size+1).Draw(rt, "crash at write"))
			e.r.Resources = &crashingStorage{
				Storage: e.store,
				crashAt: func(*resource.Deployed, bool) bool { return writes.Add(1) == at },
				crash:   cancel,
			}
		} else {
			var calls atomic.Int64
			at := int64(rapid.IntRange(1, size+1).Draw(rt, "cancel at call"))
			cancelling := func(context.Context, reconcilertest.Call) error {
				if calls.Add(1) == at {
					cancel()
				}
				return nil
			}
			e.egg.Hook, e.volume.Hook = cancelling, cancelling
		}
		_, _ = e.r.Reconcile(ctx, project, mustGraph(rt, r2, d2...))
		if m := e.world.MaxInflight(); m > limit {
			rt.Fatalf("%d provider calls in flight, limit %d", m, limit)
		}

		e.r.Resources = e.store
		e.egg.Hook, e.volume.Hook = nil, nil
		e.apply(rt, mustGraph(rt, r2, d2...))
		if got := deployedSet(rt, e); !reflect.DeepEqual(got, want) {
			rt.Fatalf("after the interruption and a re-run:\n got %v\nwant %v", got, want)
		}
		checkDeployed(rt, e, r2)
		e.world.ResetCalls()
		e.apply(rt, mustGraph(rt, r2, d2...))
		if n := e.world.CountCalls(); n != 0 {
			rt.Fatalf("a second run made %d provider calls", n)
		}
	})
}
