package api

import "testing"

func TestARunHasEndedOnceItsHostOrTheControlPlaneSaysItNeverRunsAgain(t *testing.T) {
	for state, want := range map[string]bool{
		"pending": false, "running": false,
		"exited": true, "timed_out": true, "stopped": true, "failed": true, RunLost: true, RunMissed: true,
	} {
		if got := (Run{State: state}).Ended(); got != want {
			t.Errorf("a run %s: ended %v, want %v", state, got, want)
		}
	}
}
