package volumes

import (
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

func TestBackupWarningWithAFixedClock(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	done := store.VolumeTask{State: store.TaskDone, EndedAt: now.Add(-time.Hour)}
	for _, c := range []struct {
		name string
		f    backupFacts
		want string // a substring; "" for no warning
	}{
		{"no backup, no schedule", backupFacts{}, ""},
		{"a good backup, no schedule, however old", backupFacts{lastGood: now.Add(-100 * day), lastEnded: store.VolumeTask{State: store.TaskDone, EndedAt: now.Add(-100 * day)}}, ""},
		{"newest failed", backupFacts{lastGood: now.Add(-2 * time.Hour), lastEnded: store.VolumeTask{State: store.TaskFailed, EndedAt: now.Add(-time.Hour), Error: "disk full"}, interval: day},
			"last backup failed at 2026-12-02T11:00:00Z: disk full"},
		{"newest lost, no error", backupFacts{lastEnded: store.VolumeTask{State: store.TaskLost, EndedAt: now.Add(-time.Hour)}}, "last backup failed at 2026-12-02T11:00:00Z: lost"},
		{"good within twice the interval", backupFacts{lastGood: now.Add(-2 * day), lastEnded: done, interval: day}, ""},
		{"good just over twice the interval", backupFacts{lastGood: now.Add(-2*day - time.Minute), lastEnded: done, interval: day},
			"last good backup is 48h1m old, more than twice its schedule's interval (24h)"},
		{"never good, first tick recent", backupFacts{interval: time.Hour, firstTick: now.Add(-90 * time.Minute)}, ""},
		{"never good, first tick long ago", backupFacts{interval: time.Hour, firstTick: now.Add(-3 * time.Hour)},
			"no good backup since the schedule's first tick 3h ago, more than twice its schedule's interval (1h)"},
		{"never good, first tick ahead", backupFacts{interval: time.Hour, firstTick: now.Add(time.Hour)}, ""},
	} {
		got := backupWarning(now, c.f)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: warning %q, want %q", c.name, got, c.want)
		}
	}
}

// TestBackupStatesOfAScheduledVolumeNeverBackedUp reads the states on
// both stores: a volume scheduled every hour whose schedule began three
// hours ago and never gave a good backup warns from its first tick and
// shows its next tick; a volume with no schedule and no backup warns of
// nothing.
func TestBackupStatesOfAScheduledVolumeNeverBackedUp(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		h.report(t, "h1", nil)
		h.volume(t, "nightly", "h1", map[string]any{"schedule": map[string]any{"every": "1h"}})
		h.volume(t, "manual", "h1", nil)
		began := h.clock.now().Add(-3 * time.Hour)
		if _, err := h.svc.InitSchedule(t.Context(), store.ScheduleState{Project: project, Egg: "nightly", LastTick: began, UpdatedAt: began}); err != nil {
			t.Fatal(err)
		}
		states, err := h.svc.BackupStates(t.Context(), project)
		if err != nil {
			t.Fatal(err)
		}
		if len(states) != 2 || states[0].Name != "manual" || states[1].Name != "nightly" {
			t.Fatalf("states %+v, want manual then nightly", states)
		}
		if m := states[0]; m.Warning != "" || m.Schedule != "" || m.LastGood != nil || m.NextScheduled != nil {
			t.Errorf("manual: %+v", m)
		}
		n := states[1]
		if n.Schedule != "every 1h" || n.LastGood != nil || n.LastOutcome != "" || n.NextScheduled == nil ||
			!n.NextScheduled.After(began) || n.NextScheduled.After(began.Add(time.Hour)) {
			t.Errorf("nightly: %+v", n)
		}
		if !strings.HasPrefix(n.Warning, "no good backup since the schedule's first tick ") || !strings.HasSuffix(n.Warning, "(1h)") {
			t.Errorf("nightly's warning %q", n.Warning)
		}
	})
}
