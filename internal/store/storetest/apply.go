package storetest

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

// ApplyStore is what the apply protocol's suites exercise. Leases are
// taken over from a server that left the live server list, so the suites
// register servers too.
type ApplyStore interface {
	store.Leases
	store.ServerRegistry
	store.Plans
	store.SecretValues
	store.BlobRetention
}

// OpenApply returns a new, empty store for one test.
type OpenApply func(t *testing.T) ApplyStore

// RunApply runs the suites of the apply protocol's interfaces.
func RunApply(t *testing.T, open OpenApply) {
	t.Run("Leases", func(t *testing.T) { RunLeases(t, open) })
	t.Run("Plans", func(t *testing.T) { RunPlans(t, open) })
	t.Run("SecretValues", func(t *testing.T) { RunSecretValues(t, open) })
	t.Run("Fencing", func(t *testing.T) { RunFencing(t, open) })
	t.Run("LoopsLease", func(t *testing.T) { RunLoopsLease(t, open) })
}

// RunFencing checks writes made under leases (store.WithFence): they land
// while every lease is held with its token and unexpired by the store's
// clock, and are refused, changing nothing, once another holder took one
// over, it was released, or it expired (even if nobody took it over).
//
// Expiry is measured by the store's clock (the database's now() on
// PostgreSQL), so these leases are taken at the wall clock's now.
func RunFencing(t *testing.T, open OpenApply) {
	value := func(fp string) store.SecretValue {
		return store.SecretValue{Project: "default/shop", Name: "key", Fingerprint: fp, Sealed: "sealed-" + fp, Created: t0}
	}
	t.Run("a write under a lease held lands; once taken over it is refused and changes nothing", func(t *testing.T) {
		s := open(t)
		now := time.Now()
		if _, err := s.AcquireLease(ctx(t), lease("default/shop", "tok-a", "apply 1", "srv-a", now, time.Minute)); err != nil {
			t.Fatal(err)
		}
		fenced := store.WithFence(ctx(t), store.Fence{Project: "default/shop", Token: "tok-a"})
		if err := s.PutSecretValue(fenced, value("fp-1")); err != nil {
			t.Fatalf("a write under the lease held: %v", err)
		}
		// srv-a is paused past its lease; srv-b takes the project over.
		if _, err := s.AcquireLease(ctx(t), lease("default/shop", "tok-b", "apply 2", "srv-b", now.Add(2*time.Minute), time.Minute)); err != nil {
			t.Fatal(err)
		}
		err := s.PutSecretValue(fenced, value("fp-2"))
		if !errors.Is(err, store.ErrFenced) {
			t.Fatalf("a write under a lease taken over: %v, want ErrFenced", err)
		}
		if _, err := s.SecretValue(ctx(t), "default/shop", "key", "fp-2"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the refused write was kept: %v", err)
		}
		// Renewing or releasing with the old token changes nothing either.
		if err := s.RenewLease(fenced, "default/shop", "tok-a", now.Add(time.Hour)); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("renewing a lease taken over: %v", err)
		}
		if err := s.ReleaseLease(fenced, "default/shop", "tok-a"); err != nil {
			t.Fatal(err)
		}
		// The new holder's writes, and unfenced ones, land.
		if err := s.PutSecretValue(store.WithFence(ctx(t), store.Fence{Project: "default/shop", Token: "tok-b"}), value("fp-3")); err != nil {
			t.Fatalf("the new holder's write: %v", err)
		}
		if err := s.PutSecretValue(ctx(t), value("fp-4")); err != nil {
			t.Fatalf("an unfenced write: %v", err)
		}
	})

	t.Run("a write under a released lease is refused", func(t *testing.T) {
		s := open(t)
		if _, err := s.AcquireLease(ctx(t), lease("default/shop", "tok-a", "apply 1", "srv-a", time.Now(), time.Minute)); err != nil {
			t.Fatal(err)
		}
		fenced := store.WithFence(ctx(t), store.Fence{Project: "default/shop", Token: "tok-a"})
		if err := s.ReleaseLease(fenced, "default/shop", "tok-a"); err != nil {
			t.Fatal(err)
		}
		if err := s.RetainBlobs(fenced, "plan:x", []string{digest("a")}); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("a write under a released lease: %v, want ErrFenced", err)
		}
		if got, _ := s.ReferencedBlobs(ctx(t)); len(got) != 0 {
			t.Fatalf("the refused write was kept: %v", got)
		}
	})

	t.Run("a write under a lease expired by the store's clock is refused though nobody took it over", func(t *testing.T) {
		s := open(t)
		// Taken two seconds ago for one: its holder was paused past it.
		if _, err := s.AcquireLease(ctx(t), lease("default/shop", "tok-a", "apply 1", "srv-a", time.Now().Add(-2*time.Second), time.Second)); err != nil {
			t.Fatal(err)
		}
		fenced := store.WithFence(ctx(t), store.Fence{Project: "default/shop", Token: "tok-a"})
		if err := s.PutSecretValue(fenced, value("fp-1")); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("a write under an expired lease: %v, want ErrFenced", err)
		}
		if _, err := s.SecretValue(ctx(t), "default/shop", "key", "fp-1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the refused write was kept: %v", err)
		}
		// Renewed by its holder (nobody took it), it fences no more.
		if err := s.RenewLease(ctx(t), "default/shop", "tok-a", time.Now().Add(time.Minute)); err != nil {
			t.Fatalf("renewing an expired lease nobody took: %v", err)
		}
		if err := s.PutSecretValue(fenced, value("fp-2")); err != nil {
			t.Fatalf("a write under the renewed lease: %v", err)
		}
	})

	t.Run("a write under two leases lands only while both are held", func(t *testing.T) {
		s := open(t)
		now := time.Now()
		if _, err := s.AcquireLease(ctx(t), lease(store.LoopsLease, "loops-a", "background loops", "srv-a", now, time.Minute)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AcquireLease(ctx(t), lease("default/shop", "tok-a", "reschedule", "srv-a", now, time.Minute)); err != nil {
			t.Fatal(err)
		}
		loops := store.WithFence(ctx(t), store.Fence{Project: store.LoopsLease, Token: "loops-a"})
		both := store.WithFence(loops, store.Fence{Project: "default/shop", Token: "tok-a"})
		if got := store.Fences(both); len(got) != 2 || got[0].Project != store.LoopsLease || got[1].Project != "default/shop" {
			t.Fatalf("Fences = %+v, want the loops' then the project's", got)
		}
		if err := s.PutSecretValue(both, value("fp-1")); err != nil {
			t.Fatalf("a write under both leases held: %v", err)
		}
		// srv-a lost the loops (paused past them); srv-b took them over.
		if _, err := s.AcquireLease(ctx(t), lease(store.LoopsLease, "loops-b", "background loops", "srv-b", now.Add(2*time.Minute), time.Minute)); err != nil {
			t.Fatal(err)
		}
		if err := s.PutSecretValue(both, value("fp-2")); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("a write under a project's lease held but the loops' taken over: %v, want ErrFenced", err)
		}
		if _, err := s.SecretValue(ctx(t), "default/shop", "key", "fp-2"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the refused write was kept: %v", err)
		}
		// The project's own fence alone still holds.
		if err := s.PutSecretValue(store.WithFence(ctx(t), store.Fence{Project: "default/shop", Token: "tok-a"}), value("fp-3")); err != nil {
			t.Fatalf("a write under the project's lease alone: %v", err)
		}
	})
}

// RunLoopsLease checks the lease of the background loops (store.LoopsLease),
// kept beside the projects' leases: one server holds it at a time, another
// takes it over once it expired, and its release on a restart frees it.
func RunLoopsLease(t *testing.T, open OpenApply) {
	t.Run("one server holds the loops; another takes them over once expired", func(t *testing.T) {
		s := open(t)
		if _, err := s.AcquireLease(ctx(t), lease(store.LoopsLease, "a", "background loops", "srv-a", t0, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		_, err := s.AcquireLease(ctx(t), lease(store.LoopsLease, "b", "background loops", "srv-b", t0.Add(time.Second), 5*time.Second))
		var locked *store.LockedError
		if !errors.As(err, &locked) || locked.Held.Server != "srv-a" {
			t.Fatalf("a second server took the loops held: %v", err)
		}
		// A project's lease is apart from the loops'.
		if _, err := s.AcquireLease(ctx(t), lease("default/shop", "b", "apply 1", "srv-b", t0.Add(time.Second), 5*time.Second)); err != nil {
			t.Fatalf("a project's lease beside the loops': %v", err)
		}
		if _, err := s.AcquireLease(ctx(t), lease(store.LoopsLease, "b", "background loops", "srv-b", t0.Add(5*time.Second), 5*time.Second)); err != nil {
			t.Fatalf("the loops expired were not taken over: %v", err)
		}
		if err := s.RenewLease(ctx(t), store.LoopsLease, "a", t0.Add(time.Minute)); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the old holder renewed the loops taken over: %v", err)
		}
		// srv-b restarts: its previous life's loops are freed at once.
		released, err := s.ReleaseServerLeases(ctx(t), "srv-b")
		if err != nil || len(released) != 2 {
			t.Fatalf("ReleaseServerLeases = %v, %v; want the loops' and the project's", released, err)
		}
		if _, err := s.AcquireLease(ctx(t), lease(store.LoopsLease, "c", "background loops", "srv-c", t0.Add(6*time.Second), 5*time.Second)); err != nil {
			t.Fatalf("the loops released were not free: %v", err)
		}
	})
}

func lease(project, token, holder, server string, since time.Time, term time.Duration) store.Lease {
	return store.Lease{Project: project, Token: token, Holder: holder, Server: server, Since: since, Expires: since.Add(term)}
}

// RunLeases checks the per-project lock.
func RunLeases(t *testing.T, open OpenApply) {
	t.Run("a held lease refuses others at once, naming its holder and since when", func(t *testing.T) {
		s := open(t)
		first, err := s.AcquireLease(ctx(t), lease("default/shop", "tok-1", "apply 7", "srv-a", t0, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if !first.Since.Equal(t0) || first.Holder != "apply 7" {
			t.Fatalf("AcquireLease = %+v", first)
		}
		_, err = s.AcquireLease(ctx(t), lease("default/shop", "tok-2", "apply 8", "srv-a", t0.Add(time.Second), time.Minute))
		var locked *store.LockedError
		if !errors.As(err, &locked) || !errors.Is(err, store.ErrLocked) {
			t.Fatalf("second acquire: %v, want a *LockedError", err)
		}
		if locked.Held.Holder != "apply 7" || !locked.Held.Since.Equal(t0) || locked.Held.Server != "srv-a" {
			t.Fatalf("LockedError names %+v, want apply 7 on srv-a since t0", locked.Held)
		}
		// Other projects, and the same project in another namespace, are apart.
		for _, p := range []string{"default/other", "staging/shop"} {
			if _, err := s.AcquireLease(ctx(t), lease(p, "tok-3", "apply 9", "srv-a", t0, time.Minute)); err != nil {
				t.Fatalf("acquire %s: %v", p, err)
			}
		}
	})

	t.Run("an expired lease is taken over; the old token can no longer renew or release it", func(t *testing.T) {
		s := open(t)
		if _, err := s.AcquireLease(ctx(t), lease("default/shop", "old", "apply 1", "srv-dead", t0, time.Minute)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AcquireLease(ctx(t), lease("default/shop", "new", "apply 2", "srv-b", t0.Add(time.Minute), time.Minute)); err != nil {
			t.Fatalf("acquire at the expiry: %v", err)
		}
		if err := s.RenewLease(ctx(t), "default/shop", "old", t0.Add(time.Hour)); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("renew with the old token: %v, want ErrNotFound", err)
		}
		if err := s.ReleaseLease(ctx(t), "default/shop", "old"); err != nil {
			t.Fatal(err)
		}
		_, err := s.AcquireLease(ctx(t), lease("default/shop", "third", "apply 3", "srv-b", t0.Add(time.Minute+time.Second), time.Minute))
		if !errors.Is(err, store.ErrLocked) {
			t.Fatalf("the old token's release freed the new holder's lease: %v", err)
		}
	})

	t.Run("a lease whose server left the live server list is taken over at once; a live or unregistered one's is not", func(t *testing.T) {
		s := open(t)
		for _, srv := range []string{"srv-dead", "srv-live"} {
			if err := s.RegisterServer(ctx(t), srv, "https://"+srv, 15*time.Second, t0); err != nil {
				t.Fatal(err)
			}
		}
		for _, l := range []store.Lease{
			lease("default/dead", "d", "apply 1", "srv-dead", t0, time.Minute),
			lease("default/live", "l", "apply 2", "srv-live", t0, time.Minute),
			lease("default/unlisted", "u", "apply 3", "srv-unlisted", t0, time.Minute),
		} {
			if _, err := s.AcquireLease(ctx(t), l); err != nil {
				t.Fatal(err)
			}
		}
		// srv-live renews its registration; srv-dead does not.
		if err := s.RegisterServer(ctx(t), "srv-live", "https://srv-live", 15*time.Second, t0.Add(10*time.Second)); err != nil {
			t.Fatal(err)
		}
		at := t0.Add(16 * time.Second) // srv-dead's registration ran out; no lease expired
		if _, err := s.AcquireLease(ctx(t), lease("default/dead", "new", "apply 4", "srv-b", at, time.Minute)); err != nil {
			t.Fatalf("the lease of a server gone from the list: %v, want it taken over", err)
		}
		if err := s.RenewLease(ctx(t), "default/dead", "d", at.Add(time.Minute)); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the dead server's token still renews: %v", err)
		}
		for _, p := range []string{"default/live", "default/unlisted"} {
			if _, err := s.AcquireLease(ctx(t), lease(p, "new", "apply 5", "srv-b", at, time.Minute)); !errors.Is(err, store.ErrLocked) {
				t.Fatalf("%s: %v, want it still locked", p, err)
			}
		}
	})

	t.Run("renewing keeps a lease held past its first term; acquiring again with the token renews it", func(t *testing.T) {
		s := open(t)
		if _, err := s.AcquireLease(ctx(t), lease("default/shop", "tok", "apply 1", "srv", t0, time.Minute)); err != nil {
			t.Fatal(err)
		}
		if err := s.RenewLease(ctx(t), "default/shop", "tok", t0.Add(3*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AcquireLease(ctx(t), lease("default/shop", "other", "apply 2", "srv", t0.Add(2*time.Minute), time.Minute)); !errors.Is(err, store.ErrLocked) {
			t.Fatalf("a renewed lease was taken over: %v", err)
		}
		again, err := s.AcquireLease(ctx(t), lease("default/shop", "tok", "apply 1", "srv", t0.Add(2*time.Minute), 5*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if !again.Since.Equal(t0) {
			t.Fatalf("re-acquiring moved Since to %v, want the first %v", again.Since, t0)
		}
	})

	t.Run("released leases are free at once, and a restarted server releases its own only", func(t *testing.T) {
		s := open(t)
		for _, l := range []store.Lease{
			lease("default/a", "a", "apply 1", "srv-1", t0, time.Hour),
			lease("default/b", "b", "apply 2", "srv-1", t0, time.Hour),
			lease("default/c", "c", "apply 3", "srv-2", t0, time.Hour),
		} {
			if _, err := s.AcquireLease(ctx(t), l); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.ReleaseLease(ctx(t), "default/a", "a"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AcquireLease(ctx(t), lease("default/a", "a2", "apply 4", "srv-2", t0, time.Hour)); err != nil {
			t.Fatalf("a released lease is still held: %v", err)
		}
		released, err := s.ReleaseServerLeases(ctx(t), "srv-1")
		if err != nil {
			t.Fatal(err)
		}
		if len(released) != 1 || released[0].Project != "default/b" || released[0].Holder != "apply 2" {
			t.Fatalf("ReleaseServerLeases(srv-1) = %+v, want default/b's", released)
		}
		if _, err := s.AcquireLease(ctx(t), lease("default/b", "b2", "apply 5", "srv-1", t0, time.Hour)); err != nil {
			t.Fatalf("default/b after its server's release: %v", err)
		}
		for _, p := range []string{"default/a", "default/c"} {
			if _, err := s.AcquireLease(ctx(t), lease(p, "x", "apply 6", "srv-1", t0, time.Hour)); !errors.Is(err, store.ErrLocked) {
				t.Fatalf("%s, held by srv-2, was released with srv-1's: %v", p, err)
			}
		}
	})

	t.Run("of concurrent acquirers exactly one wins", func(t *testing.T) {
		s := open(t)
		const n = 8
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				_, errs[i] = s.AcquireLease(ctx(t), lease("default/shop", string(rune('a'+i)), "apply", "srv", t0, time.Minute))
			})
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, store.ErrLocked):
				t.Fatalf("acquire: %v", err)
			}
		}
		if won != 1 {
			t.Fatalf("%d acquirers won the lease, want 1", won)
		}
	})
}

// RunPlans checks pending plans and the blobs they retain.
func RunPlans(t *testing.T, open OpenApply) {
	t.Run("a plan is kept with its document and retains its blobs until deleted", func(t *testing.T) {
		s := open(t)
		p := store.StoredPlan{ID: "p1", Project: "default/shop", Created: t0, Expires: t0.Add(time.Hour),
			Blobs: []string{digest("b"), digest("a"), digest("b")}, Doc: []byte(`{"changes":[]}`)}
		if err := s.PutPlan(ctx(t), p); err != nil {
			t.Fatal(err)
		}
		got, err := s.Plan(ctx(t), "p1")
		if err != nil {
			t.Fatal(err)
		}
		if got.Project != p.Project || !got.Created.Equal(t0) || !got.Expires.Equal(p.Expires) || string(got.Doc) != string(p.Doc) ||
			!slices.Equal(got.Blobs, []string{digest("a"), digest("b")}) {
			t.Fatalf("Plan = %+v", got)
		}
		if refs, _ := s.ReferencedBlobs(ctx(t)); !slices.Equal(refs, []string{digest("a"), digest("b")}) {
			t.Fatalf("ReferencedBlobs = %v, want the plan's blobs", refs)
		}
		if err := s.PutPlan(ctx(t), p); !errors.Is(err, store.ErrExists) {
			t.Fatalf("a second put of p1: %v, want ErrExists", err)
		}
		if err := s.DeletePlan(ctx(t), "p1"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Plan(ctx(t), "p1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a deleted plan: %v, want ErrNotFound", err)
		}
		if refs, _ := s.ReferencedBlobs(ctx(t)); len(refs) != 0 {
			t.Fatalf("blobs of a deleted plan still referenced: %v", refs)
		}
		if err := s.DeletePlan(ctx(t), "p1"); err != nil {
			t.Fatalf("deleting again: %v", err)
		}
	})

	t.Run("expired plans are forgotten with their blobs, the others kept", func(t *testing.T) {
		s := open(t)
		for _, p := range []store.StoredPlan{
			{ID: "old", Project: "default/shop", Created: t0, Expires: t0.Add(time.Minute), Blobs: []string{digest("a")}, Doc: []byte("{}")},
			{ID: "new", Project: "default/shop", Created: t0, Expires: t0.Add(time.Hour), Blobs: []string{digest("b")}, Doc: []byte("{}")},
		} {
			if err := s.PutPlan(ctx(t), p); err != nil {
				t.Fatal(err)
			}
		}
		n, err := s.DeleteExpiredPlans(ctx(t), t0.Add(time.Minute))
		if err != nil || n != 1 {
			t.Fatalf("DeleteExpiredPlans = %d, %v; want 1", n, err)
		}
		if _, err := s.Plan(ctx(t), "old"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("expired plan: %v", err)
		}
		if _, err := s.Plan(ctx(t), "new"); err != nil {
			t.Fatalf("unexpired plan: %v", err)
		}
		if refs, _ := s.ReferencedBlobs(ctx(t)); !slices.Equal(refs, []string{digest("b")}) {
			t.Fatalf("ReferencedBlobs = %v, want only the live plan's", refs)
		}
	})
}

// RunSecretValues checks the sealed values of secrets.
func RunSecretValues(t *testing.T, open OpenApply) {
	val := func(name, fp string, at time.Time) store.SecretValue {
		return store.SecretValue{Project: "default/shop", Name: name, Fingerprint: fp, Sealed: "sealed:" + fp, Created: at}
	}
	t.Run("values are found by fingerprint; a second put of one keeps the first", func(t *testing.T) {
		s := open(t)
		if err := s.PutSecretValue(ctx(t), val("api", "f1", t0)); err != nil {
			t.Fatal(err)
		}
		dup := val("api", "f1", t0.Add(time.Hour))
		dup.Sealed = "another sealing of the same value"
		if err := s.PutSecretValue(ctx(t), dup); err != nil {
			t.Fatal(err)
		}
		got, err := s.SecretValue(ctx(t), "default/shop", "api", "f1")
		if err != nil || got.Sealed != "sealed:f1" || !got.Created.Equal(t0) {
			t.Fatalf("SecretValue = %+v, %v; want the first put", got, err)
		}
		for _, miss := range [][3]string{{"default/shop", "api", "f2"}, {"default/shop", "db", "f1"}, {"staging/shop", "api", "f1"}} {
			if _, err := s.SecretValue(ctx(t), miss[0], miss[1], miss[2]); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("SecretValue%v: %v, want ErrNotFound", miss, err)
			}
		}
	})

	t.Run("pruning keeps the listed and the recent values; delete removes all of one secret", func(t *testing.T) {
		s := open(t)
		for _, v := range []store.SecretValue{
			val("api", "old", t0), val("api", "kept", t0), val("api", "recent", t0.Add(time.Hour)), val("db", "other", t0),
		} {
			if err := s.PutSecretValue(ctx(t), v); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.PruneSecretValues(ctx(t), "default/shop", "api", []string{"kept"}, t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		for fp, want := range map[string]bool{"old": false, "kept": true, "recent": true} {
			_, err := s.SecretValue(ctx(t), "default/shop", "api", fp)
			if (err == nil) != want {
				t.Fatalf("after prune, value %s: %v, want kept=%v", fp, err, want)
			}
		}
		if err := s.DeleteSecretValues(ctx(t), "default/shop", "api"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SecretValue(ctx(t), "default/shop", "api", "kept"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("after delete: %v", err)
		}
		if _, err := s.SecretValue(ctx(t), "default/shop", "db", "other"); err != nil {
			t.Fatalf("another secret's value went with it: %v", err)
		}
	})
}
