package storetest

import (
	"cmp"
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"pgregory.net/rapid"

	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

// RunResourceStorage checks the reconciler's ResourceStorage contract, and the
// resource events a store records with it.
func RunResourceStorage(t *testing.T, open Open) {
	t.Run("put then list returns the records sorted by key", func(t *testing.T) {
		s := open(t)
		web := &resource.Deployed{ID: "id-web", Type: "egg", Name: "web",
			Inputs:  map[string]any{"replicas": 3, "env": map[string]any{"A": "1"}, "ports": []any{"80:8080"}},
			Outputs: map[string]any{"address": "web:8080", "hosts": []any{"h1"}},
			Source:  "sha256:" + hex64("a"), Parents: []string{"network/default", "volume/data"}}
		db := &resource.Deployed{ID: "id-db", Type: "egg", Name: "db", Pending: true}
		net := &resource.Deployed{ID: "id-net", Type: "network", Name: "default", Outputs: map[string]any{"name": "n"}}
		for _, r := range []*resource.Deployed{web, net, db} {
			if err := s.PutResource(ctx(t), "default/shop", r); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.ListResources(ctx(t), "default/shop")
		if err != nil {
			t.Fatal(err)
		}
		assertRecords(t, got, []*resource.Deployed{db, web, net})
	})

	t.Run("put replaces the record with the same type and name", func(t *testing.T) {
		s := open(t)
		put(t, s, "default/shop", &resource.Deployed{ID: "1", Type: "egg", Name: "web", Inputs: map[string]any{"replicas": 1}})
		next := &resource.Deployed{ID: "1", Type: "egg", Name: "web", Inputs: map[string]any{"replicas": 2}, Outputs: map[string]any{"address": "x"}}
		put(t, s, "default/shop", next)
		got, err := s.ListResources(ctx(t), "default/shop")
		if err != nil {
			t.Fatal(err)
		}
		assertRecords(t, got, []*resource.Deployed{next})
	})

	t.Run("projects and namespaces never meet", func(t *testing.T) {
		s := open(t)
		a := &resource.Deployed{ID: "a", Type: "egg", Name: "web"}
		b := &resource.Deployed{ID: "b", Type: "egg", Name: "web"}
		put(t, s, "staging/shop", a)
		put(t, s, "production/shop", b)
		if err := s.DeleteResource(ctx(t), "staging/shop", a); err != nil {
			t.Fatal(err)
		}
		got, _ := s.ListResources(ctx(t), "production/shop")
		assertRecords(t, got, []*resource.Deployed{b})
		got, _ = s.ListResources(ctx(t), "staging/shop")
		assertRecords(t, got, nil)
	})

	t.Run("deleting an absent record is a success", func(t *testing.T) {
		s := open(t)
		if err := s.DeleteResource(ctx(t), "default/shop", &resource.Deployed{Type: "egg", Name: "nope"}); err != nil {
			t.Fatalf("DeleteResource of an absent record: %v", err)
		}
	})

	t.Run("records are stored by value", func(t *testing.T) {
		s := open(t)
		r := &resource.Deployed{ID: "1", Type: "egg", Name: "web", Inputs: map[string]any{"env": map[string]any{"A": "1"}}, Parents: []string{"x/y"}}
		put(t, s, "default/shop", r)
		r.Inputs["env"].(map[string]any)["A"] = "changed after put"
		r.Parents[0] = "changed/too"
		got, _ := s.ListResources(ctx(t), "default/shop")
		got[0].Inputs["env"].(map[string]any)["A"] = "changed after list"
		again, _ := s.ListResources(ctx(t), "default/shop")
		want := &resource.Deployed{ID: "1", Type: "egg", Name: "web", Inputs: map[string]any{"env": map[string]any{"A": "1"}}, Parents: []string{"x/y"}}
		assertRecords(t, again, []*resource.Deployed{want})
	})

	t.Run("a cancelled context writes nothing", func(t *testing.T) {
		s := open(t)
		c, cancel := context.WithCancel(t.Context())
		cancel()
		if err := s.PutResource(c, "default/shop", &resource.Deployed{ID: "1", Type: "egg", Name: "web"}); err == nil {
			t.Fatal("PutResource with a cancelled context succeeded")
		}
		got, _ := s.ListResources(ctx(t), "default/shop")
		assertRecords(t, got, nil)
	})

	t.Run("concurrent puts all land", func(t *testing.T) {
		s := open(t)
		var wg sync.WaitGroup
		errs := make(chan error, 20)
		for i := range 20 {
			wg.Go(func() {
				errs <- s.PutResource(ctx(t), "default/shop", &resource.Deployed{ID: fmt.Sprint(i), Type: "egg", Name: fmt.Sprintf("e%02d", i)})
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		got, _ := s.ListResources(ctx(t), "default/shop")
		if len(got) != 20 {
			t.Fatalf("%d records after 20 concurrent puts", len(got))
		}
	})

	t.Run("created, updated and deleted are recorded as events", func(t *testing.T) {
		s := open(t)
		const p = "default/shop"
		start := lastSeq(t, s)
		r := &resource.Deployed{ID: "1", Type: "egg", Name: "web", Pending: true, Inputs: map[string]any{"replicas": 1}}
		put(t, s, p, r) // pending: nothing happened yet
		r.Pending, r.Outputs = false, map[string]any{"address": "web:80"}
		put(t, s, p, r) // confirmed: created
		put(t, s, p, r) // the same again: nothing
		r.Inputs = map[string]any{"replicas": 2}
		put(t, s, p, r) // changed: updated
		direct := &resource.Deployed{ID: "2", Type: "volume", Name: "data"}
		put(t, s, p, direct) // confirmed at once: created
		if err := s.DeleteResource(ctx(t), p, r); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteResource(ctx(t), p, r); err != nil { // absent: nothing
			t.Fatal(err)
		}
		evs := eventsSince(t, s, start)
		want := []store.EventType{store.EventResourceCreated, store.EventResourceUpdated, store.EventResourceCreated, store.EventResourceDeleted}
		if !slices.Equal(types(evs), want) {
			t.Fatalf("events %v, want %v", types(evs), want)
		}
		for i, key := range []string{"egg/web", "egg/web", "volume/data", "egg/web"} {
			if evs[i].Project != p || evs[i].Resource != key || evs[i].Message == "" || evs[i].Time.IsZero() {
				t.Errorf("event %d = %+v, want project %s, resource %s, a message and a time", i, evs[i], p, key)
			}
		}
	})

	t.Run("behaves like a map under any sequence of puts and deletes", func(t *testing.T) {
		s := open(t)
		run := 0
		rapid.Check(t, func(rt *rapid.T) {
			run++
			projects := []string{fmt.Sprintf("ns%d/a", run), fmt.Sprintf("ns%d/b", run)}
			model := map[string]map[string]*resource.Deployed{}
			names := rapid.SampledFrom([]string{"web", "db", "api.localhost/v1"})
			typ := rapid.SampledFrom([]resource.Kind{resource.Egg, resource.Route})
			for range rapid.IntRange(1, 30).Draw(rt, "ops") {
				p := rapid.SampledFrom(projects).Draw(rt, "project")
				r := &resource.Deployed{Type: typ.Draw(rt, "type"), Name: names.Draw(rt, "name")}
				if rapid.Bool().Draw(rt, "delete") {
					if err := s.DeleteResource(ctx(t), p, r); err != nil {
						rt.Fatal(err)
					}
					delete(model[p], r.Key())
					continue
				}
				r.ID = rapid.StringMatching(`[a-f0-9]{1,8}`).Draw(rt, "id")
				r.Pending = rapid.Bool().Draw(rt, "pending")
				r.Inputs = map[string]any{"replicas": rapid.IntRange(0, 5).Draw(rt, "replicas")}
				if err := s.PutResource(ctx(t), p, r); err != nil {
					rt.Fatal(err)
				}
				if model[p] == nil {
					model[p] = map[string]*resource.Deployed{}
				}
				model[p][r.Key()] = r
			}
			for _, p := range projects {
				got, err := s.ListResources(ctx(t), p)
				if err != nil {
					rt.Fatal(err)
				}
				var want []*resource.Deployed
				for _, r := range model[p] {
					want = append(want, r)
				}
				slices.SortFunc(want, cmpKeys)
				if msg := diffRecords(got, want); msg != "" {
					rt.Fatalf("project %s: %s", p, msg)
				}
			}
		})
	})
}

func put(t *testing.T, s ResourceStorage, project string, r *resource.Deployed) {
	t.Helper()
	if err := s.PutResource(ctx(t), project, r); err != nil {
		t.Fatalf("PutResource %s: %v", r.Key(), err)
	}
}

func cmpKeys(a, b *resource.Deployed) int {
	return cmp.Or(cmp.Compare(a.Type, b.Type), strings.Compare(a.Name, b.Name))
}

func assertRecords(t *testing.T, got, want []*resource.Deployed) {
	t.Helper()
	if msg := diffRecords(got, want); msg != "" {
		t.Fatal(msg)
	}
}

// diffRecords compares records field by field, inputs and outputs by value
// (numbers come back from JSON as float64).
func diffRecords(got, want []*resource.Deployed) string {
	if len(got) != len(want) {
		return fmt.Sprintf("got %d records, want %d: %v", len(got), len(want), keys(got))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.ID != w.ID || g.Type != w.Type || g.Name != w.Name || g.Source != w.Source || g.Pending != w.Pending ||
			!resource.Equal(g.Inputs, w.Inputs) || !resource.Equal(g.Outputs, w.Outputs) ||
			!(len(g.Parents) == 0 && len(w.Parents) == 0 || reflect.DeepEqual(g.Parents, w.Parents)) {
			return fmt.Sprintf("record %d = %+v, want %+v", i, *g, *w)
		}
	}
	return ""
}

func keys(rs []*resource.Deployed) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Key()
	}
	return out
}

func hex64(c string) string { return strings.Repeat(c, 64) }
