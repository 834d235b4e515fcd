package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

func digest(c string) string { return "sha256:" + hex64(c) }

// RunApplyHistory checks the apply records and their events.
func RunApplyHistory(t *testing.T, open Open) {
	t.Run("an apply is recorded running, then finished, with an event each", func(t *testing.T) {
		s := open(t)
		start := lastSeq(t, s)
		a, err := s.StartApply(ctx(t), store.NewApply{Project: "default/shop", Actor: "alice",
			Blobs: []string{digest("b"), digest("a"), digest("b")}, At: t0,
			Inputs: []byte(`{"resources":[]}`), Summary: "~ egg/web [env]", Digest: digest("spec"), RollbackOf: 7})
		if err != nil {
			t.Fatal(err)
		}
		if a.ID == 0 || a.Outcome != store.ApplyRunning || !slices.Equal(a.Blobs, []string{digest("a"), digest("b")}) ||
			!a.HasInputs || a.RollbackOf != 7 {
			t.Fatalf("StartApply = %+v", a)
		}
		if err := s.FinishApply(ctx(t), a.ID, store.ApplyFailed, "egg/web: image not found", t0.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		got, err := s.Applies(ctx(t), "default/shop")
		if err != nil {
			t.Fatal(err)
		}
		want := store.Apply{ID: a.ID, Project: "default/shop", Started: t0, Finished: t0.Add(time.Second),
			Outcome: store.ApplyFailed, Message: "egg/web: image not found", Actor: "alice", Blobs: []string{digest("a"), digest("b")},
			Summary: "~ egg/web [env]", Digest: digest("spec"), RollbackOf: 7, HasInputs: true}
		if len(got) != 1 || !applyEqual(got[0], want) {
			t.Fatalf("Applies = %+v, want [%+v]", got, want)
		}
		if in, err := s.ApplyInputs(ctx(t), "default/shop", a.ID); err != nil || string(in) != `{"resources":[]}` {
			t.Fatalf("ApplyInputs = %q, %v", in, err)
		}
		if _, err := s.ApplyInputs(ctx(t), "default/blog", a.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the inputs of another project's apply: %v, want ErrNotFound", err)
		}
		evs := eventsSince(t, s, start)
		if !slices.Equal(types(evs), []store.EventType{store.EventApplyStarted, store.EventApplyFinished}) ||
			evs[0].Project != "default/shop" || evs[1].Project != "default/shop" || evs[0].Actor != "alice" ||
			!strings.Contains(evs[0].Message, "a rollback to apply 7") {
			t.Fatalf("events %+v, want apply.started (a rollback to apply 7) by alice then apply.finished for default/shop", evs)
		}
	})

	t.Run("a record without inputs says so", func(t *testing.T) {
		s := open(t)
		a, err := s.StartApply(ctx(t), store.NewApply{Project: "default/shop", At: t0})
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Applies(ctx(t), "default/shop")
		if err != nil || len(got) != 1 || got[0].HasInputs {
			t.Fatalf("Applies = %+v, %v; want one without inputs", got, err)
		}
		if in, err := s.ApplyInputs(ctx(t), "default/shop", a.ID); err != nil || len(in) != 0 {
			t.Fatalf("ApplyInputs = %q, %v; want empty", in, err)
		}
	})

	t.Run("only a running apply can finish, with succeeded or failed", func(t *testing.T) {
		s := open(t)
		a, _ := s.StartApply(ctx(t), store.NewApply{Project: "default/shop", At: t0})
		if err := s.FinishApply(ctx(t), a.ID, store.ApplyRunning, "", t0); err == nil {
			t.Fatal("FinishApply with outcome running succeeded")
		}
		if err := s.FinishApply(ctx(t), a.ID, store.ApplySucceeded, "", t0); err != nil {
			t.Fatal(err)
		}
		if err := s.FinishApply(ctx(t), a.ID, store.ApplyFailed, "", t0); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("finishing twice: %v, want ErrNotFound", err)
		}
		if err := s.FinishApply(ctx(t), a.ID+1000, store.ApplyFailed, "", t0); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("finishing an unknown apply: %v, want ErrNotFound", err)
		}
	})

	t.Run("the last DefaultKeepApplies of each project are kept, newest first", func(t *testing.T) {
		s := open(t)
		var ids []int64
		for i := range store.DefaultKeepApplies + 3 {
			a, err := s.StartApply(ctx(t), store.NewApply{Project: "default/shop", Blobs: []string{digest(fmt.Sprint(i % 10))}, At: t0.Add(time.Duration(i) * time.Second)})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, a.ID)
		}
		other, _ := s.StartApply(ctx(t), store.NewApply{Project: "default/blog", At: t0})
		got, err := s.Applies(ctx(t), "default/shop")
		if err != nil {
			t.Fatal(err)
		}
		var gotIDs []int64
		for _, a := range got {
			gotIDs = append(gotIDs, a.ID)
		}
		want := slices.Clone(ids[3:])
		slices.Reverse(want)
		if !slices.Equal(gotIDs, want) {
			t.Fatalf("kept applies %v, want %v", gotIDs, want)
		}
		if blog, _ := s.Applies(ctx(t), "default/blog"); len(blog) != 1 || blog[0].ID != other.ID {
			t.Fatalf("another project's history was trimmed: %+v", blog)
		}
		if _, err := s.ApplyInputs(ctx(t), "default/shop", ids[0]); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the inputs of a dropped record: %v, want ErrNotFound", err)
		}
	})

	t.Run("Keep sets how many records the history keeps", func(t *testing.T) {
		s := open(t)
		var ids []int64
		for i := range 5 {
			a, err := s.StartApply(ctx(t), store.NewApply{Project: "default/shop", Keep: 3, Blobs: []string{digest(fmt.Sprint(i))},
				At: t0.Add(time.Duration(i) * time.Second)})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, a.ID)
		}
		got, err := s.Applies(ctx(t), "default/shop")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 || got[0].ID != ids[4] || got[2].ID != ids[2] {
			t.Fatalf("kept %+v, want the last 3 of %v", got, ids)
		}
		refs, err := s.ReferencedBlobs(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{digest("2"), digest("3"), digest("4")}; !slices.Equal(refs, sortedCopy(want)) {
			t.Fatalf("referenced blobs %v, want those of the kept records %v", refs, want)
		}
	})
}

func applyEqual(a, b store.Apply) bool {
	return a.ID == b.ID && a.Project == b.Project && a.Started.Equal(b.Started) && a.Finished.Equal(b.Finished) &&
		a.Outcome == b.Outcome && a.Message == b.Message && a.Actor == b.Actor && slices.Equal(a.Blobs, b.Blobs) &&
		a.Summary == b.Summary && a.Digest == b.Digest && a.RollbackOf == b.RollbackOf && a.HasInputs == b.HasInputs
}

func sortedCopy(in []string) []string {
	out := slices.Clone(in)
	slices.Sort(out)
	return out
}

// RunBlobRetention checks which blobs are referenced.
func RunBlobRetention(t *testing.T, open Open) {
	referenced := func(t *testing.T, s Store) []string {
		t.Helper()
		got, err := s.ReferencedBlobs(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		return got
	}

	t.Run("resources, apply records and owners reference blobs", func(t *testing.T) {
		s := open(t)
		if got := referenced(t, s); len(got) != 0 {
			t.Fatalf("an empty store references %v", got)
		}
		put(t, s, "default/shop", &resource.Deployed{ID: "1", Type: "egg", Name: "web", Source: digest("a")})
		put(t, s, "default/shop", &resource.Deployed{ID: "2", Type: "egg", Name: "db"}) // no source
		if _, err := s.StartApply(ctx(t), store.NewApply{Project: "default/shop", Blobs: []string{digest("a"), digest("b")}, At: t0}); err != nil {
			t.Fatal(err)
		}
		if err := s.RetainBlobs(ctx(t), "plan/42", []string{digest("c"), digest("c")}); err != nil {
			t.Fatal(err)
		}
		want := []string{digest("a"), digest("b"), digest("c")}
		if got := referenced(t, s); !slices.Equal(got, want) {
			t.Fatalf("ReferencedBlobs = %v, want %v", got, want)
		}
	})

	t.Run("retaining replaces an owner's set, and an empty set releases it", func(t *testing.T) {
		s := open(t)
		if err := s.RetainBlobs(ctx(t), "plan/1", []string{digest("a"), digest("b")}); err != nil {
			t.Fatal(err)
		}
		if err := s.RetainBlobs(ctx(t), "plan/2", []string{digest("b")}); err != nil {
			t.Fatal(err)
		}
		if err := s.RetainBlobs(ctx(t), "plan/1", []string{digest("c")}); err != nil {
			t.Fatal(err)
		}
		if got := referenced(t, s); !slices.Equal(got, []string{digest("b"), digest("c")}) {
			t.Fatalf("after replacing plan/1: %v", got)
		}
		if err := s.RetainBlobs(ctx(t), "plan/1", nil); err != nil {
			t.Fatal(err)
		}
		if got := referenced(t, s); !slices.Equal(got, []string{digest("b")}) {
			t.Fatalf("after releasing plan/1: %v", got)
		}
	})

	t.Run("a deleted resource and a dropped apply record release their blobs", func(t *testing.T) {
		s := open(t)
		web := &resource.Deployed{ID: "1", Type: "egg", Name: "web", Source: digest("a")}
		put(t, s, "default/shop", web)
		if _, err := s.StartApply(ctx(t), store.NewApply{Project: "default/shop", Blobs: []string{digest("old")}, At: t0}); err != nil {
			t.Fatal(err)
		}
		for i := range store.DefaultKeepApplies {
			if _, err := s.StartApply(ctx(t), store.NewApply{Project: "default/shop", At: t0.Add(time.Duration(i+1) * time.Second)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.DeleteResource(ctx(t), "default/shop", web); err != nil {
			t.Fatal(err)
		}
		if got := referenced(t, s); len(got) != 0 {
			t.Fatalf("still referenced: %v", got)
		}
	})
}

// RunProjects checks the project list.
func RunProjects(t *testing.T, open Open) {
	t.Run("a project is listed while it has resources or apply records", func(t *testing.T) {
		s := open(t)
		put(t, s, "staging/shop", &resource.Deployed{ID: "1", Type: "egg", Name: "web"})
		put(t, s, "default/shop", &resource.Deployed{ID: "2", Type: "egg", Name: "web"})
		put(t, s, "default/shop", &resource.Deployed{ID: "3", Type: "egg", Name: "db"})
		if _, err := s.StartApply(ctx(t), store.NewApply{Project: "default/blog", At: t0}); err != nil {
			t.Fatal(err)
		}
		got, err := s.ListProjects(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"default/blog", "default/shop", "staging/shop"}; !slices.Equal(got, want) {
			t.Fatalf("ListProjects = %v, want %v", got, want)
		}
	})
}
