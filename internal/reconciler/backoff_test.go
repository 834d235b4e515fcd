package reconciler

import (
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Retries of the default policy are never more than 3 s apart (2 s and its
// jitter), however long a step has failed: a step waiting for its database
// to come back goes on within seconds of it.
func TestTheDefaultBackoffRetriesWithinThreeSeconds(t *testing.T) {
	b := (&Reconciler{}).newBackoff()
	var longest time.Duration
	for range 60 {
		d := b.NextBackOff()
		if d == backoff.Stop {
			t.Fatal("the default policy stopped within 60 tries")
		}
		longest = max(longest, d)
	}
	if longest > 3*time.Second {
		t.Fatalf("a retry waited %v, want at most 3 s", longest)
	}
}
