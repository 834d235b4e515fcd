package fleet

import (
	"sync"
	"sync/atomic"
	"testing"
)

// Calls made while a run is going on return at once and cost one more run,
// whatever their number; a call made when nothing runs runs at once.
func TestCoalescerRunsOnceMoreForAnyNumberOfCallsDuringARun(t *testing.T) {
	var c coalescer
	var runs atomic.Int32
	inRun, release := make(chan struct{}), make(chan struct{})
	first := make(chan struct{})
	go func() {
		defer close(first)
		c.do(func() {
			if runs.Add(1) == 1 {
				close(inRun)
				<-release
			}
		})
	}()
	<-inRun
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { c.do(func() { t.Error("a call during a run ran the function itself") }) })
	}
	wg.Wait() // they all returned while the first run is held
	close(release)
	<-first
	if got := runs.Load(); got != 2 {
		t.Fatalf("%d runs, want the first and one more for the 10 calls made during it", got)
	}
	c.do(func() { runs.Add(1) })
	if got := runs.Load(); got != 3 {
		t.Fatalf("a call with nothing running did not run: %d runs", got)
	}
}
