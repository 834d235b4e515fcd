package postgres

import (
	"testing"

	"github.com/hatchery/hatchery/internal/store/storetest"
)

// With the callers' clock, as the fencing suite: the takeover it makes is
// dated after the first lease's term.
func TestNotifyCursorConformance(t *testing.T) {
	storetest.RunNotifyCursor(t, func(t *testing.T) storetest.NotifyCursorStore { return openCallerClock(t) })
}
