package jobs

import (
	"fmt"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/schedule"
	"github.com/hatchery/hatchery/internal/store"
)

// every5s is an every-5s schedule's Scheduled with rules.
func every5s(t *testing.T, concurrency string, deadline time.Duration) Scheduled {
	t.Helper()
	timer, err := schedule.Parse(schedule.Spec{Every: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return Scheduled{Project: project, Egg: "report", Timer: timer,
		Rules: schedule.Rules{Concurrency: concurrency, StartingDeadline: deadline, KeepRuns: 20, Timeout: time.Minute}}
}

func ids() func() string {
	n := 0
	return func() string { n++; return fmt.Sprint("r", n) }
}

// base is a 5 s mark.
var base = time.Unix(1_700_000_000, 0).UTC()

func TestPlanTicks(t *testing.T) {
	open := []store.Run{{ID: "old", State: store.RunRunning}}
	type want struct {
		states   []string // of the runs recorded, in order
		triggers []string
		stop     []string
		last     time.Time
		missed   int
	}
	tests := []struct {
		name        string
		concurrency string
		deadline    time.Duration
		last, now   time.Time
		open        []store.Run
		want        want
	}{
		{"nothing is due before the next tick", inputs.ConcurrencyForbid, 5 * time.Second, base, base.Add(4 * time.Second), nil, want{}},
		{"a tick on time runs, as scheduled", inputs.ConcurrencyForbid, 5 * time.Second, base, base.Add(5*time.Second + 300*time.Millisecond), nil,
			want{states: []string{store.RunPending}, triggers: []string{api.TriggerSchedule}, last: base.Add(5 * time.Second)}},
		{"forbid skips the tick while a run is open", inputs.ConcurrencyForbid, 5 * time.Second, base, base.Add(5 * time.Second), open,
			want{states: []string{store.RunSkipped}, triggers: []string{api.TriggerSchedule}, last: base.Add(5 * time.Second)}},
		{"replace stops the open run and runs the tick", inputs.ConcurrencyReplace, 5 * time.Second, base, base.Add(5 * time.Second), open,
			want{states: []string{store.RunPending}, triggers: []string{api.TriggerSchedule}, stop: []string{"old"}, last: base.Add(5 * time.Second)}},
		{"allow runs the tick beside the open run", inputs.ConcurrencyAllow, 5 * time.Second, base, base.Add(5 * time.Second), open,
			want{states: []string{store.RunPending}, triggers: []string{api.TriggerSchedule}, last: base.Add(5 * time.Second)}},
		// The newest tick, 1 s old, is on time (a pass is at most a second apart).
		{"ticks within the deadline after an outage run late, as missed; forbid skips the second behind the first",
			inputs.ConcurrencyForbid, 12 * time.Second, base, base.Add(11 * time.Second), nil,
			want{states: []string{store.RunPending, store.RunSkipped}, triggers: []string{api.TriggerMissed, api.TriggerSchedule}, last: base.Add(10 * time.Second)}},
		{"allow runs every tick within the deadline", inputs.ConcurrencyAllow, 12 * time.Second, base, base.Add(11 * time.Second), nil,
			want{states: []string{store.RunPending, store.RunPending}, triggers: []string{api.TriggerMissed, api.TriggerSchedule}, last: base.Add(10 * time.Second)}},
		{"ticks past the deadline are one missed record with their count; the one within it runs once",
			inputs.ConcurrencyForbid, 5 * time.Second, base, base.Add(time.Hour + 2*time.Second), nil,
			want{states: []string{store.RunMissed, store.RunPending}, triggers: []string{api.TriggerMissed, api.TriggerSchedule},
				last: base.Add(time.Hour), missed: 719}},
		{"a tick run past onTime is a catch-up, as missed", inputs.ConcurrencyForbid, 10 * time.Second, base, base.Add(9 * time.Second), nil,
			want{states: []string{store.RunPending}, triggers: []string{api.TriggerMissed}, last: base.Add(5 * time.Second)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := every5s(t, tt.concurrency, tt.deadline)
			p := planTicks(sc, store.ScheduleState{Project: project, Egg: "report", LastTick: tt.last}, tt.open, tt.now, ids())
			var states, triggers []string
			missed := 0
			for _, r := range p.record {
				states, triggers = append(states, r.State), append(triggers, r.Trigger)
				missed += r.Missed
				if r.Project != project || r.Egg != "report" || !r.CreatedAt.Equal(tt.now) || r.ScheduledAt.IsZero() {
					t.Errorf("run %+v: want the schedule's egg, created now, for a tick", r)
				}
				if ended := store.RunEnded(r.State); ended != !r.ReleasedAt.IsZero() {
					t.Errorf("run %+v: a run never delivered is released at once, the others not", r)
				}
			}
			if fmt.Sprint(states) != fmt.Sprint(tt.want.states) || fmt.Sprint(triggers) != fmt.Sprint(tt.want.triggers) ||
				fmt.Sprint(p.stop) != fmt.Sprint(tt.want.stop) || !p.last.Equal(tt.want.last) || missed != tt.want.missed {
				t.Fatalf("plan: states %v triggers %v stop %v last %v missed %d\nwant %v %v %v %v %d",
					states, triggers, p.stop, p.last, missed, tt.want.states, tt.want.triggers, tt.want.stop, tt.want.last, tt.want.missed)
			}
		})
	}
}

// Every tick in (last, now] is decided exactly once over any split of the
// time into passes: run, skipped or counted missed, never twice, never
// left out.
func TestPlanTicksDecidesEveryTickOnceOverAnyPasses(t *testing.T) {
	sc := every5s(t, inputs.ConcurrencyAllow, 7*time.Second)
	for _, step := range []time.Duration{700 * time.Millisecond, 3 * time.Second, 11 * time.Second, 40 * time.Second} {
		last, end := base, base.Add(10*time.Minute)
		seen := map[time.Time]int{}
		counted := 0
		next := ids()
		for now := base; now.Before(end); now = now.Add(step) {
			p := planTicks(sc, store.ScheduleState{LastTick: last}, nil, now, next)
			for _, r := range p.record {
				if r.State == store.RunMissed {
					counted += r.Missed
					continue
				}
				seen[r.ScheduledAt]++
				if late := now.Sub(r.ScheduledAt); late > sc.Rules.StartingDeadline {
					t.Fatalf("step %v: tick %v run %v late, past its deadline", step, r.ScheduledAt, late)
				}
			}
			if !p.last.IsZero() {
				last = p.last
			}
		}
		for tick, n := range seen {
			if n != 1 {
				t.Fatalf("step %v: tick %v run %d times", step, tick, n)
			}
		}
		if total := len(seen) + counted; total != int(last.Sub(base)/(5*time.Second)) {
			t.Fatalf("step %v: %d run + %d missed, want every one of the %d ticks up to %v", step, len(seen), counted,
				last.Sub(base)/(5*time.Second), last)
		}
	}
}
