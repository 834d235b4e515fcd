package ingress

import (
	"sync"
	"testing"

	"pgregory.net/rapid"
)

// TestLeastLoadedPicksAnAvailableBackendWithTheFewestInFlight checks the pick
// against its definition over random pools: the result is available, not
// excluded, and no eligible backend has fewer in flight; nil only when none is
// eligible.
func TestLeastLoadedPicksAnAvailableBackendWithTheFewestInFlight(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		const now = int64(1_000)
		n := rapid.IntRange(0, 6).Draw(t, "backends")
		pool := make([]*backend, n)
		for i := range pool {
			b := &backend{id: string(rune('a' + i))}
			b.inflight.Store(rapid.Int64Range(0, 3).Draw(t, "inflight"))
			b.draining.Store(rapid.Bool().Draw(t, "draining"))
			switch rapid.IntRange(0, 2).Draw(t, "ejection") {
			case 1:
				b.ejectedUntil.Store(now + 1) // still ejected
			case 2:
				b.ejectedUntil.Store(now) // ejection over
			}
			pool[i] = b
		}
		var exclude *backend
		if n > 0 && rapid.Bool().Draw(t, "exclude one") {
			exclude = pool[rapid.IntRange(0, n-1).Draw(t, "excluded")]
		}
		start := rapid.Uint32().Draw(t, "start")
		got := leastLoaded(pool, start, exclude, func() int64 { return now }, false)

		eligible := func(b *backend) bool {
			return b != exclude && !b.draining.Load() && b.ejectedUntil.Load() <= now
		}
		if got == nil {
			for _, b := range pool {
				if eligible(b) {
					t.Fatalf("nil, but %s is eligible", b.id)
				}
			}
			return
		}
		if !eligible(got) {
			t.Fatalf("picked %s, which is not eligible", got.id)
		}
		for _, b := range pool {
			if eligible(b) && b.inflight.Load() < got.inflight.Load() {
				t.Fatalf("picked %s with %d in flight over %s with %d", got.id, got.inflight.Load(), b.id, b.inflight.Load())
			}
		}
	})
}

// TestLeastLoadedRotatesAmongEquals makes sure ties do not all land on the
// first backend, which would overload it whenever the pool is idle.
func TestLeastLoadedRotatesAmongEquals(t *testing.T) {
	pool := []*backend{{id: "a"}, {id: "b"}, {id: "c"}}
	seen := map[string]int{}
	for start := range uint32(6) {
		seen[leastLoaded(pool, start, nil, nil, false).id]++
	}
	for _, b := range pool {
		if seen[b.id] != 2 {
			t.Fatalf("picks over six starts: %v, want two each", seen)
		}
	}
}

func TestAcquireSkipsABackendThatStartedDrainingAfterTheSnapshot(t *testing.T) {
	e := &egg{name: "web"}
	a := &backend{id: "a", egg: e, healthy: true, idle: make(chan struct{})}
	b := &backend{id: "b", egg: e, healthy: true, idle: make(chan struct{})}
	e.backends = []*backend{a, b}
	e.rebuildPool(nil)
	// a drains after the pool snapshot was taken: the snapshot still holds it.
	a.startDrain()
	for range 10 {
		got := e.acquire(nil, nil, false)
		if got != b {
			t.Fatalf("acquired %v, want b", got)
		}
		got.release()
	}
	if a.inflight.Load() != 0 {
		t.Fatalf("a holds %d slots after backing off", a.inflight.Load())
	}
	select {
	case <-a.idle:
	default:
		t.Fatal("a drained with nothing in flight but is not idle")
	}
}

// TestAcquireBacksOffWhenTheDrainLandsBetweenPickAndReserve puts a drain
// exactly between the pick's check and its reservation (the clock is read
// there, for a backend whose ejection is over): the drain sees nothing in
// flight and reports the backend idle, so the pick must give the slot back
// and go elsewhere.
func TestAcquireBacksOffWhenTheDrainLandsBetweenPickAndReserve(t *testing.T) {
	e := &egg{name: "web"}
	a := &backend{id: "a", egg: e, healthy: true, idle: make(chan struct{})}
	b := &backend{id: "b", egg: e, healthy: true, idle: make(chan struct{})}
	a.ejectedUntil.Store(1) // over, but makes the pick read the clock after checking draining
	b.inflight.Store(5)     // so that a is the pick
	e.backends = []*backend{a, b}
	e.rebuildPool(nil)
	var once sync.Once
	now := func() int64 {
		once.Do(a.startDrain)
		return 100
	}
	got := e.acquire(nil, now, false)
	select {
	case <-a.idle:
	default:
		t.Fatal("the drain did not see a idle")
	}
	if got != b {
		t.Fatalf("acquired %v after a's drain saw it idle, want b", got.id)
	}
	if a.inflight.Load() != 0 {
		t.Fatalf("a holds %d slots", a.inflight.Load())
	}
}
