package fleet

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Kicks return at once; those made while a run is going on cost one more
// run, whatever their number, started at least the gap after the first;
// a kick made when nothing runs starts a run.
func TestCoalescerRunsOnceMoreForAnyNumberOfKicksDuringARun(t *testing.T) {
	c := &coalescer{gap: 200 * time.Millisecond}
	var mu sync.Mutex
	var starts []time.Time
	inRun, release := make(chan struct{}), make(chan struct{})
	done := make(chan struct{}, 3)
	c.kick(func() {
		mu.Lock()
		starts = append(starts, time.Now())
		first := len(starts) == 1
		mu.Unlock()
		if first {
			close(inRun)
			<-release
		}
		done <- struct{}{}
	})
	<-inRun
	var wg sync.WaitGroup
	var ranOwn atomic.Bool
	for range 10 {
		wg.Go(func() { c.kick(func() { ranOwn.Store(true) }) })
	}
	wg.Wait() // every kick returned while the first run is held
	close(release)
	<-done
	<-done
	select {
	case <-done:
		t.Fatal("a third run for kicks made during the first")
	case <-time.After(400 * time.Millisecond):
	}
	mu.Lock()
	defer mu.Unlock()
	if len(starts) != 2 || starts[1].Sub(starts[0]) < c.gap || ranOwn.Load() {
		t.Fatalf("runs started at %v (gap %v), a kick's own function ran: %v", starts, c.gap, ranOwn.Load())
	}
	ran := make(chan struct{})
	c.kick(func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(2 * time.Second):
		t.Fatal("a kick with nothing running did not run")
	}
}
