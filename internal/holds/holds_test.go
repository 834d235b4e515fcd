package holds

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
)

const (
	poll   Endpoint = "desired-state"
	stream Endpoint = "events"
)

func newRegistry(t *testing.T, limits Limits) *Registry {
	t.Helper()
	r, err := New(limits)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func isDone(h *Hold) bool {
	select {
	case <-h.Done():
		return true
	default:
		return false
	}
}

func TestANewHoldBeyondTheLimitReplacesTheOldest(t *testing.T) {
	r := newRegistry(t, Limits{{Host, poll}: 2})
	h1 := HostID("h1")
	var held []*Hold
	for range 50 {
		held = append(held, r.Hold(h1, poll))
	}
	if n := r.Count(h1, poll); n != 2 {
		t.Fatalf("after 50 holds of one host, %d are open, want 2", n)
	}
	for i, h := range held {
		open := i >= 48
		if isDone(h) == open {
			t.Fatalf("hold %d: done %v, want %v (only the two newest stay)", i, isDone(h), !open)
		}
		if !open && !errors.Is(h.Cause(), ErrReplaced) {
			t.Fatalf("hold %d ended by %v, want ErrReplaced", i, h.Cause())
		}
		if open && h.Cause() != nil {
			t.Fatalf("open hold %d has cause %v", i, h.Cause())
		}
	}
	if r.Len() != 2 || r.Holders(poll) != 1 {
		t.Fatalf("Len %d, Holders %d; want 2 and 1", r.Len(), r.Holders(poll))
	}
}

func TestLimitsArePerPrincipalEndpointAndKind(t *testing.T) {
	r := newRegistry(t, Limits{{Host, poll}: 1})
	a, b := r.Hold(HostID("a"), poll), r.Hold(HostID("b"), poll)
	other := r.Hold(HostID("a"), stream) // another endpoint: unbounded
	r.Hold(HostID("a"), stream)
	admin1, admin2 := r.Hold(AdminTokenNamed("a"), poll), r.Hold(AdminTokenNamed("a"), poll) // another kind, same ID
	for _, h := range []*Hold{a, b, other, admin1, admin2} {
		if isDone(h) {
			t.Fatalf("%v on %s ended by %v: no limit of its own was passed", h.principal, h.endpoint, h.Cause())
		}
	}
	if got := r.Holders(poll); got != 3 {
		t.Fatalf("holders of the poll: %d, want 3 (hosts a and b, and admin token a once)", got)
	}
}

func TestEndEndsEveryHoldOfThePrincipalAndNoOther(t *testing.T) {
	r := newRegistry(t, nil)
	revoked := errors.New("admin token \"ci\" was revoked")
	ci, other := AdminTokenNamed("ci"), AdminTokenNamed("ops")
	mine := []*Hold{r.Hold(ci, stream), r.Hold(ci, stream), r.Hold(ci, poll)}
	theirs := r.Hold(other, stream)
	if n := r.End(ci, revoked); n != 3 {
		t.Fatalf("End ended %d, want 3", n)
	}
	for _, h := range mine {
		if !isDone(h) || !errors.Is(h.Cause(), revoked) {
			t.Fatalf("a hold of the revoked token: done %v, cause %v", isDone(h), h.Cause())
		}
		h.Release() // a holder releasing after the end is harmless
	}
	if isDone(theirs) {
		t.Fatal("another token's stream was ended")
	}
	if r.Len() != 1 || r.Count(ci, stream) != 0 || !slices.Equal(r.Principals(AdminToken), []Principal{other}) {
		t.Fatalf("left: Len %d, principals %v", r.Len(), r.Principals(AdminToken))
	}
	if n := r.End(ci, revoked); n != 0 {
		t.Fatalf("a second End ended %d", n)
	}
	if r.End(other, nil) != 1 || theirs.Cause() == nil {
		t.Fatalf("End without a cause left %v", theirs.Cause())
	}
}

func TestReleaseUnregistersWithoutEnding(t *testing.T) {
	r := newRegistry(t, Limits{{Host, poll}: 1})
	h := r.Hold(HostID("h1"), poll)
	h.Release()
	h.Release()
	if isDone(h) || h.Cause() != nil {
		t.Fatal("Release ended the hold")
	}
	if r.Len() != 0 || r.Holders(poll) != 0 || len(r.Principals(Host)) != 0 {
		t.Fatalf("after Release: Len %d, Holders %d, principals %v", r.Len(), r.Holders(poll), r.Principals(Host))
	}
	next := r.Hold(HostID("h1"), poll)
	if isDone(next) || isDone(h) {
		t.Fatal("a released hold counted against the limit")
	}
}

func TestPrincipalsAreListedByKindSorted(t *testing.T) {
	r := newRegistry(t, nil)
	for _, id := range []string{"h3", "h1", "h2"} {
		r.Hold(HostID(id), poll)
	}
	r.Hold(AdminTokenNamed("ci"), stream)
	want := []Principal{HostID("h1"), HostID("h2"), HostID("h3")}
	if got := r.Principals(Host); !slices.Equal(got, want) {
		t.Fatalf("hosts %v, want %v", got, want)
	}
	if got := r.Principals(AdminToken); !slices.Equal(got, []Principal{AdminTokenNamed("ci")}) {
		t.Fatalf("admin tokens %v", got)
	}
}

func TestANegativeLimitIsRefused(t *testing.T) {
	if _, err := New(Limits{{Host, poll}: -1}); err == nil {
		t.Fatal("a negative limit was accepted")
	}
}

// Holds taken, released, replaced and ended from many goroutines keep the
// counts right and never leave one open past its limit (run with -race).
func TestConcurrentHoldsKeepTheCountsRight(t *testing.T) {
	const limit = 3
	r := newRegistry(t, Limits{{Host, poll}: limit})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			p := HostID(fmt.Sprintf("h%d", g%4))
			for i := range 500 {
				h := r.Hold(p, poll)
				if n := r.Count(p, poll); n > limit {
					t.Errorf("%v holds %d, over the limit %d", p, n, limit)
				}
				switch i % 3 {
				case 0:
					h.Release()
				case 1:
					r.End(p, errors.New("removed"))
				}
			}
		})
	}
	wg.Wait()
	for _, p := range r.Principals(Host) {
		r.End(p, nil)
	}
	if r.Len() != 0 || r.Holders(poll) != 0 {
		t.Fatalf("after ending all: Len %d, Holders %d", r.Len(), r.Holders(poll))
	}
}
