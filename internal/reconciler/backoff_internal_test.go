package reconciler

import (
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// fakeClock moves forward by each delay the backoff asks for.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

func TestDefaultBackoffGrowsAndGivesUp(t *testing.T) {
	b, ok := (&Reconciler{}).newBackoff().(*backoff.ExponentialBackOff)
	if !ok {
		t.Fatalf("default backoff is %T, want exponential", (&Reconciler{}).newBackoff())
	}
	clock := &fakeClock{now: time.Now()}
	b.Clock = clock
	b.Reset()
	var elapsed, first, last time.Duration
	for i := 0; ; i++ {
		d := b.NextBackOff()
		if d == backoff.Stop {
			break
		}
		if i == 0 {
			first = d
		}
		last = d
		elapsed += d
		clock.now = clock.now.Add(d)
		if elapsed > time.Hour {
			t.Fatal("the default backoff was still retrying after an hour")
		}
	}
	if last <= first {
		t.Fatalf("delays did not grow: first %v, last %v", first, last)
	}
	if elapsed < time.Minute {
		t.Fatalf("gave up after %v: too soon for an egg to become healthy", elapsed)
	}
}
