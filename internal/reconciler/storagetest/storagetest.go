// Package storagetest is the conformance suite for reconciler.ResourceStorage:
// the behaviours the reconciler relies on, to be run against every
// implementation (the in-memory one in reconcilertest, SQLite, PostgreSQL).
package storagetest

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"testing"

	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/resource"
)

// Run runs the suite. newStorage must return an empty storage each time it is
// called (each subtest takes its own).
func Run(t *testing.T, newStorage func(t *testing.T) reconciler.ResourceStorage) {
	ctx := context.Background()
	const project = "default/shop"

	t.Run("an unknown project lists nothing", func(t *testing.T) {
		s := newStorage(t)
		if got := list(t, s, project); len(got) != 0 {
			t.Fatalf("listed %v", got)
		}
	})

	t.Run("a record round-trips with every field", func(t *testing.T) {
		s := newStorage(t)
		want := sample(resource.Egg, "web")
		put(t, s, project, want)
		got := list(t, s, project)
		if len(got) != 1 {
			t.Fatalf("listed %d records, want 1", len(got))
		}
		assertSame(t, got[0], want)
	})

	t.Run("a pending record round-trips, and its confirmation replaces it", func(t *testing.T) {
		s := newStorage(t)
		pending := &resource.Deployed{ID: "id-1", Type: resource.Egg, Name: "web", Inputs: map[string]any{"image": "a"}, Pending: true}
		put(t, s, project, pending)
		if got := list(t, s, project); len(got) != 1 || !got[0].Pending {
			t.Fatalf("listed %+v, want the pending record", got)
		}
		confirmed := sample(resource.Egg, "web")
		confirmed.ID = "id-1"
		put(t, s, project, confirmed)
		got := list(t, s, project)
		if len(got) != 1 {
			t.Fatalf("listed %d records, want 1", len(got))
		}
		assertSame(t, got[0], confirmed)
	})

	t.Run("put replaces the record with the same type and name", func(t *testing.T) {
		s := newStorage(t)
		put(t, s, project, sample(resource.Egg, "web"))
		second := sample(resource.Egg, "web")
		second.ID, second.Inputs = "id-2", map[string]any{"image": "web:2"}
		put(t, s, project, second)
		got := list(t, s, project)
		if len(got) != 1 {
			t.Fatalf("listed %d records, want 1", len(got))
		}
		assertSame(t, got[0], second)
	})

	t.Run("same name, different type: two records", func(t *testing.T) {
		s := newStorage(t)
		put(t, s, project, sample(resource.Egg, "data"))
		put(t, s, project, sample(resource.Volume, "data"))
		if got := keys(list(t, s, project)); !reflect.DeepEqual(got, []string{"egg/data", "volume/data"}) {
			t.Fatalf("listed %v", got)
		}
	})

	t.Run("names may hold dots and slashes", func(t *testing.T) {
		s := newStorage(t)
		put(t, s, project, sample(resource.Route, "api.localhost/v1"))
		put(t, s, project, sample(resource.Route, "api.localhost"))
		if got := keys(list(t, s, project)); !reflect.DeepEqual(got, []string{"route/api.localhost", "route/api.localhost/v1"}) {
			t.Fatalf("listed %v", got)
		}
		del(t, s, project, sample(resource.Route, "api.localhost/v1"))
		if got := keys(list(t, s, project)); !reflect.DeepEqual(got, []string{"route/api.localhost"}) {
			t.Fatalf("after delete listed %v", got)
		}
	})

	t.Run("delete removes that record only", func(t *testing.T) {
		s := newStorage(t)
		put(t, s, project, sample(resource.Egg, "web"))
		put(t, s, project, sample(resource.Egg, "db"))
		del(t, s, project, sample(resource.Egg, "web"))
		if got := keys(list(t, s, project)); !reflect.DeepEqual(got, []string{"egg/db"}) {
			t.Fatalf("listed %v", got)
		}
	})

	t.Run("deleting an absent record is not an error", func(t *testing.T) {
		s := newStorage(t)
		del(t, s, project, sample(resource.Egg, "ghost"))
		put(t, s, project, sample(resource.Egg, "web"))
		del(t, s, project, sample(resource.Egg, "web"))
		del(t, s, project, sample(resource.Egg, "web"))
	})

	t.Run("projects and namespaces are kept apart", func(t *testing.T) {
		s := newStorage(t)
		projects := []string{"staging/shop", "production/shop", "staging/shop-2", "a-b/c", "a/b-c"}
		for i, p := range projects {
			r := sample(resource.Egg, "web")
			r.ID = fmt.Sprintf("id-%d", i)
			put(t, s, p, r)
		}
		del(t, s, "staging/shop", sample(resource.Egg, "web"))
		for i, p := range projects {
			got := list(t, s, p)
			if i == 0 {
				if len(got) != 0 {
					t.Fatalf("%s: listed %v after its delete", p, keys(got))
				}
				continue
			}
			if len(got) != 1 || got[0].ID != fmt.Sprintf("id-%d", i) {
				t.Fatalf("%s: listed %+v, want its own record id-%d", p, got, i)
			}
		}
	})

	t.Run("records are stored and listed by value", func(t *testing.T) {
		s := newStorage(t)
		r := sample(resource.Egg, "web")
		put(t, s, project, r)
		r.Inputs["image"] = "changed after put"
		r.Outputs["address"] = "changed after put"
		r.Parents[0] = "changed after put"
		listed := list(t, s, project)[0]
		assertSame(t, listed, sample(resource.Egg, "web"))
		listed.Inputs["image"] = "changed after list"
		listed.Inputs["env"].(map[string]any)["A"] = "changed after list"
		assertSame(t, list(t, s, project)[0], sample(resource.Egg, "web"))
	})

	t.Run("concurrent writes all land", func(t *testing.T) {
		s := newStorage(t)
		const n = 50
		var wg sync.WaitGroup
		errs := make(chan error, 2*n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- s.PutResource(ctx, project, sample(resource.Egg, fmt.Sprintf("e%02d", i)))
				if i%2 == 0 {
					errs <- s.DeleteResource(ctx, project, sample(resource.Egg, fmt.Sprintf("e%02d", i)))
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if got := len(list(t, s, project)); got != n/2 {
			t.Fatalf("listed %d records, want %d", got, n/2)
		}
	})
}

// sample is a record with every field set, values of every JSON kind.
func sample(typ resource.Kind, name string) *resource.Deployed {
	return &resource.Deployed{
		ID:   "id-" + string(typ) + "-" + name,
		Type: typ,
		Name: name,
		Inputs: map[string]any{
			"image":    "web:1",
			"replicas": 3,
			"ratio":    0.5,
			"on":       true,
			"none":     nil,
			"command":  []any{"/app", "--port", "8080"},
			"env":      map[string]any{"A": "1", "DB": "postgres://db.address/shop"},
		},
		Source:  "sha256:0123abcd",
		Outputs: map[string]any{"address": "web:8080", "hosts": []any{"host-a", "host-b"}},
		Parents: []string{"egg/db", "volume/data"},
	}
}

func assertSame(t *testing.T, got, want *resource.Deployed) {
	t.Helper()
	if got.ID != want.ID || got.Type != want.Type || got.Name != want.Name || got.Source != want.Source || got.Pending != want.Pending {
		t.Fatalf("record %+v, want %+v", got, want)
	}
	if !resource.Equal(got.Inputs, want.Inputs) || !resource.Equal(got.Outputs, want.Outputs) {
		t.Fatalf("values: inputs %v outputs %v, want inputs %v outputs %v", got.Inputs, got.Outputs, want.Inputs, want.Outputs)
	}
	gp, wp := append([]string(nil), got.Parents...), append([]string(nil), want.Parents...)
	sort.Strings(gp)
	sort.Strings(wp)
	if len(gp) != len(wp) || (len(gp) > 0 && !reflect.DeepEqual(gp, wp)) {
		t.Fatalf("parents %v, want %v", got.Parents, want.Parents)
	}
}

func put(t *testing.T, s reconciler.ResourceStorage, project string, r *resource.Deployed) {
	t.Helper()
	if err := s.PutResource(context.Background(), project, r); err != nil {
		t.Fatalf("put %s: %v", r.Key(), err)
	}
}

func del(t *testing.T, s reconciler.ResourceStorage, project string, r *resource.Deployed) {
	t.Helper()
	if err := s.DeleteResource(context.Background(), project, r); err != nil {
		t.Fatalf("delete %s: %v", r.Key(), err)
	}
}

func list(t *testing.T, s reconciler.ResourceStorage, project string) []*resource.Deployed {
	t.Helper()
	rs, err := s.ListResources(context.Background(), project)
	if err != nil {
		t.Fatalf("list %s: %v", project, err)
	}
	return rs
}

func keys(rs []*resource.Deployed) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Key()
	}
	sort.Strings(out)
	return out
}
