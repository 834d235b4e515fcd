package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/hatchery/hatchery/internal/resource/inputs"
)

func mustParse(t *testing.T, s Spec) *Schedule {
	t.Helper()
	sch, err := Parse(s)
	if err != nil {
		t.Fatalf("Parse(%+v): %v", s, err)
	}
	return sch
}

func berlin(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func TestParseRefusesBadSchedulesNamingTheField(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spec  Spec
		field string
		says  string
	}{
		{"neither cron nor every", Spec{}, "cron", "needs cron"},
		{"a timezone without cron", Spec{Timezone: "UTC"}, "cron", "needs cron"},
		{"both cron and every", Spec{Cron: "* * * * *", Every: time.Minute}, "every", "not both"},
		{"every below a second", Spec{Every: 500 * time.Millisecond}, "every", "shorter than 1s"},
		{"every with a timezone", Spec{Every: time.Minute, Timezone: "Europe/Berlin"}, "timezone", "cron only"},
		{"a bad expression with robfig's reason", Spec{Cron: "61 * * * *"}, "cron", "above maximum"},
		{"six fields", Spec{Cron: "0 0 3 * * *"}, "cron", "expected exactly 5 fields"},
		{"an unknown zone", Spec{Cron: "0 3 * * *", Timezone: "Mars/Olympus"}, "timezone", "not a time zone"},
		{"the Local zone", Spec{Cron: "0 3 * * *", Timezone: "Local"}, "timezone", "not a time zone"},
		{"a zone inside the expression", Spec{Cron: "TZ=Europe/Berlin 0 3 * * *"}, "cron", "in timezone"},
		{"@every", Spec{Cron: "@every 5m"}, "cron", "every: <duration>"},
		{"a date that never comes", Spec{Cron: "0 0 30 2 *"}, "cron", "never fires"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.spec)
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Parse(%+v) = %v, want a *FieldError", tc.spec, err)
			}
			if fe.Field != tc.field || !strings.Contains(fe.Reason, tc.says) {
				t.Fatalf("Parse(%+v) = %v, want field %s saying %q", tc.spec, err, tc.field, tc.says)
			}
		})
	}
}

func TestFromInputsNamesEveryFieldAtFault(t *testing.T) {
	_, _, err := FromInputs(inputs.Schedule{Cron: "0 3 * *", Timezone: "Nowhere/Land", Concurrency: "queue", Timeout: "-1s", StartingDeadline: "2h", KeepRuns: -2})
	var fields []string
	for _, fe := range FieldErrors(err) {
		fields = append(fields, fe.Field)
	}
	if got, want := strings.Join(fields, " "), "cron timezone concurrency timeout starting_deadline keep_runs"; got != want {
		t.Fatalf("FieldErrors name %q, want %q (error: %v)", got, want, err)
	}
}

func TestFromInputsAppliesDefaultsAndRefusesBadRules(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    inputs.Schedule
		want  Rules
		field string // "" when accepted
	}{
		{"defaults of a frequent schedule: the interval as deadline", inputs.Schedule{Every: "15m"},
			Rules{Concurrency: "forbid", StartingDeadline: 15 * time.Minute, KeepRuns: 20}, ""},
		{"defaults of a daily schedule: the deadline at most 1h", inputs.Schedule{Cron: "0 3 * * *", Timezone: "Europe/Berlin"},
			Rules{Concurrency: "forbid", StartingDeadline: time.Hour, KeepRuns: 20}, ""},
		{"every rule written", inputs.Schedule{Every: "5s", Concurrency: "replace", Timeout: "30m", StartingDeadline: "2s", KeepRuns: 3},
			Rules{Concurrency: "replace", Timeout: 30 * time.Minute, StartingDeadline: 2 * time.Second, KeepRuns: 3}, ""},
		{"every that is no duration", inputs.Schedule{Every: "often"}, Rules{}, "every"},
		{"an unknown concurrency", inputs.Schedule{Every: "1m", Concurrency: "queue"}, Rules{}, "concurrency"},
		{"a zero timeout", inputs.Schedule{Every: "1m", Timeout: "0s"}, Rules{}, "timeout"},
		{"a negative timeout", inputs.Schedule{Every: "1m", Timeout: "-5m"}, Rules{}, "timeout"},
		{"a deadline above an hour", inputs.Schedule{Every: "1m", StartingDeadline: "61m"}, Rules{}, "starting_deadline"},
		{"a zero deadline", inputs.Schedule{Every: "1m", StartingDeadline: "0s"}, Rules{}, "starting_deadline"},
		{"negative keep_runs", inputs.Schedule{Every: "1m", KeepRuns: -1}, Rules{}, "keep_runs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, got, err := FromInputs(tc.in)
			if tc.field == "" {
				if err != nil || got != tc.want {
					t.Fatalf("FromInputs(%+v) = %+v, %v; want %+v", tc.in, got, err, tc.want)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("FromInputs(%+v) = %v, want a refusal of %s", tc.in, err, tc.field)
			}
		})
	}
}

func TestNextTicks(t *testing.T) {
	loc := berlin(t)
	at := func(s string, l *time.Location) time.Time {
		t.Helper()
		v, err := time.ParseInLocation("2006-01-02 15:04:05", s, l)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		name  string
		spec  Spec
		after time.Time
		want  []time.Time // the next ticks, in order
	}{
		{"every 5s at the 5 s marks", Spec{Every: 5 * time.Second}, at("2026-06-01 12:00:03", time.UTC),
			[]time.Time{at("2026-06-01 12:00:05", time.UTC), at("2026-06-01 12:00:10", time.UTC)}},
		{"every tick is strictly after", Spec{Every: 5 * time.Second}, at("2026-06-01 12:00:05", time.UTC),
			[]time.Time{at("2026-06-01 12:00:10", time.UTC)}},
		{"every 1h on the hour UTC", Spec{Every: time.Hour}, at("2026-06-01 12:59:59", loc),
			[]time.Time{at("2026-06-01 11:00:00", time.UTC)}},
		{"cron in its zone", Spec{Cron: "0 3 * * *", Timezone: "Europe/Berlin"}, at("2026-06-01 12:00:00", time.UTC),
			[]time.Time{at("2026-06-02 03:00:00", loc), at("2026-06-03 03:00:00", loc)}},
		{"cron in UTC by default", Spec{Cron: "0 3 * * *"}, at("2026-06-01 12:00:00", time.UTC),
			[]time.Time{at("2026-06-02 03:00:00", time.UTC)}},
		{"descriptor", Spec{Cron: "@daily", Timezone: "Europe/Berlin"}, at("2026-06-01 12:00:00", loc),
			[]time.Time{at("2026-06-02 00:00:00", loc)}},
		// Spring forward in Berlin: 2026-03-29 02:00 CET is 03:00 CEST.
		{"a tick in a DST gap does not happen that day", Spec{Cron: "30 2 * * *", Timezone: "Europe/Berlin"}, at("2026-03-28 12:00:00", loc),
			[]time.Time{at("2026-03-30 02:30:00", loc)}},
		{"hourly has no tick in the gap", Spec{Cron: "0 * * * *", Timezone: "Europe/Berlin"}, at("2026-03-29 01:30:00", loc),
			[]time.Time{at("2026-03-29 03:00:00", loc)}},
		// Fall back in Berlin: 2026-10-25 03:00 CEST is 02:00 CET; 02:00-03:00 is lived twice.
		{"a named hour runs once in a repeat, at its first pass", Spec{Cron: "30 2 * * *", Timezone: "Europe/Berlin"}, at("2026-10-25 00:00:00", loc),
			[]time.Time{time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), at("2026-10-26 02:30:00", loc)}},
		{"an hour field of * keeps its pace through a repeat", Spec{Cron: "30 * * * *", Timezone: "Europe/Berlin"}, time.Date(2026, 10, 24, 23, 0, 0, 0, time.UTC),
			[]time.Time{time.Date(2026, 10, 24, 23, 30, 0, 0, time.UTC), time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), time.Date(2026, 10, 25, 1, 30, 0, 0, time.UTC), time.Date(2026, 10, 25, 2, 30, 0, 0, time.UTC)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := mustParse(t, tc.spec)
			after := tc.after
			for i, want := range tc.want {
				got := s.Next(after)
				if !got.Equal(want) {
					t.Fatalf("tick %d after %s = %s, want %s", i, after, got, want.UTC())
				}
				after = got
			}
		})
	}
}

func TestIntervalAndString(t *testing.T) {
	for _, tc := range []struct {
		spec     Spec
		interval time.Duration
		str      string
	}{
		{Spec{Every: 15 * time.Minute}, 15 * time.Minute, "every 15m"},
		{Spec{Every: 90 * time.Minute}, 90 * time.Minute, "every 1h30m"},
		{Spec{Every: 1500 * time.Millisecond}, 1500 * time.Millisecond, "every 1.5s"},
		{Spec{Cron: "0 3 * * *", Timezone: "Europe/Berlin"}, 24 * time.Hour, "cron 0 3 * * * Europe/Berlin"},
		{Spec{Cron: "*/5 * * * *"}, 5 * time.Minute, "cron */5 * * * * UTC"},
		{Spec{Cron: "0,1 3 * * *"}, time.Minute, "cron 0,1 3 * * * UTC"},
		{Spec{Cron: "0 0 * * 1"}, 7 * 24 * time.Hour, "cron 0 0 * * 1 UTC"},
	} {
		s := mustParse(t, tc.spec)
		if s.Interval() != tc.interval || s.String() != tc.str {
			t.Errorf("%+v: Interval %s, String %q; want %s, %q", tc.spec, s.Interval(), s.String(), tc.interval, tc.str)
		}
	}
}

func TestDue(t *testing.T) {
	base := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	sec := func(n int) time.Time { return base.Add(time.Duration(n) * time.Second) }
	every5 := Spec{Every: 5 * time.Second}
	for _, tc := range []struct {
		name       string
		spec       Spec
		last, now  time.Time
		deadline   time.Duration
		run        []time.Time
		missed     int
		lastMissed time.Time
	}{
		{"nothing since the last tick", every5, sec(0), sec(4), 5 * time.Second, nil, 0, time.Time{}},
		{"the tick now is due", every5, sec(0), sec(5), 5 * time.Second, []time.Time{sec(5)}, 0, time.Time{}},
		{"a late tick within its deadline still runs", every5, sec(0), sec(9), 5 * time.Second, []time.Time{sec(5)}, 0, time.Time{}},
		{"ticks past the deadline are missed, the rest run oldest first", every5, sec(0), sec(30), 10 * time.Second,
			[]time.Time{sec(20), sec(25), sec(30)}, 3, sec(15)},
		{"a zero deadline runs only a tick exactly now", every5, sec(0), sec(10), 0, []time.Time{sec(10)}, 1, sec(5)},
		{"a zero last has nothing due", every5, time.Time{}, sec(10), time.Hour, nil, 0, time.Time{}},
		{"last at now has nothing due", every5, sec(10), sec(10), time.Hour, nil, 0, time.Time{}},
		{"a long outage is counted, not listed", Spec{Every: time.Second}, sec(0), sec(0).Add(365 * 24 * time.Hour), 2 * time.Second,
			[]time.Time{sec(0).Add(365*24*time.Hour - 2*time.Second), sec(0).Add(365*24*time.Hour - time.Second), sec(0).Add(365 * 24 * time.Hour)}, 365*24*3600 - 3, sec(0).Add(365*24*time.Hour - 3*time.Second)},
		{"cron: a catch-up after a short outage", Spec{Cron: "*/10 * * * *"}, base, base.Add(35 * time.Minute), 10 * time.Minute,
			[]time.Time{base.Add(30 * time.Minute)}, 2, base.Add(20 * time.Minute)},
		{"cron: years of minutes stop counting at MaxCounted", Spec{Cron: "* * * * *"}, base, base.Add(3 * 365 * 24 * time.Hour), 90 * time.Second,
			[]time.Time{base.Add(3*365*24*time.Hour - time.Minute), base.Add(3 * 365 * 24 * time.Hour)}, MaxCounted, base.Add(3*365*24*time.Hour - 2*time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := mustParse(t, tc.spec)
			run, missed, lastMissed := s.Due(tc.last, tc.now, tc.deadline)
			if !equalTimes(run, tc.run) || missed != tc.missed || !lastMissed.Equal(tc.lastMissed) {
				t.Fatalf("Due = %v, %d, %s; want %v, %d, %s", run, missed, lastMissed, tc.run, tc.missed, tc.lastMissed)
			}
		})
	}
}

func equalTimes(a, b []time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

// TestDueAccountsForEveryTickOnce: every tick in (last, now], found one by
// one with Next, is either run (within the deadline, oldest first) or
// counted missed (before it), exactly once, for every and cron schedules,
// across daylight-saving changes.
func TestDueAccountsForEveryTickOnce(t *testing.T) {
	specs := []Spec{
		{Every: time.Second}, {Every: 7 * time.Second}, {Every: 1500 * time.Millisecond}, {Every: 15 * time.Minute},
		{Cron: "* * * * *"}, {Cron: "*/7 * * * *", Timezone: "Europe/Berlin"}, {Cron: "30 2 * * *", Timezone: "Europe/Berlin"},
		{Cron: "0 * * * *", Timezone: "America/New_York"}, {Cron: "15 1,2 * * *", Timezone: "Australia/Lord_Howe"},
	}
	// Around the Berlin and New York changes of 2026, and ordinary days.
	starts := []time.Time{
		time.Date(2026, 3, 28, 22, 0, 0, 0, time.UTC), time.Date(2026, 10, 24, 22, 0, 0, 0, time.UTC),
		time.Date(2026, 3, 8, 4, 0, 0, 0, time.UTC), time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 4, 4, 13, 0, 0, 0, time.UTC),
	}
	rapid.Check(t, func(t *rapid.T) {
		spec := rapid.SampledFrom(specs).Draw(t, "spec")
		s, err := Parse(spec)
		if err != nil {
			t.Fatal(err)
		}
		last := rapid.SampledFrom(starts).Draw(t, "start").Add(time.Duration(rapid.Int64Range(0, int64(6*time.Hour)).Draw(t, "offset")))
		now := last.Add(time.Duration(rapid.Int64Range(0, int64(8*time.Hour)).Draw(t, "span")))
		deadline := time.Duration(rapid.Int64Range(0, int64(MaxStartingDeadline)).Draw(t, "deadline"))

		var ticks []time.Time
		for tick := s.Next(last); !tick.After(now); tick = s.Next(tick) {
			ticks = append(ticks, tick)
		}
		run, missed, lastMissed := s.Due(last, now, deadline)
		if missed+len(run) != len(ticks) {
			t.Fatalf("%d ticks in (%s, %s], Due ran %d and missed %d", len(ticks), last, now, len(run), missed)
		}
		if missed > 0 && !lastMissed.Equal(ticks[missed-1]) {
			t.Fatalf("last missed %s, want %s", lastMissed, ticks[missed-1])
		}
		for i, tick := range run {
			if !tick.Equal(ticks[missed+i]) {
				t.Fatalf("run %d is %s, want %s", i, tick, ticks[missed+i])
			}
			if now.Sub(tick) > deadline {
				t.Fatalf("run %s is %s late, past its deadline %s", tick, now.Sub(tick), deadline)
			}
		}
		if missed > 0 && now.Sub(lastMissed) <= deadline {
			t.Fatalf("missed %s is within its deadline %s of %s", lastMissed, deadline, now)
		}
	})
}

func BenchmarkDueCronYearOfMinutes(b *testing.B) {
	s, err := Parse(Spec{Cron: "* * * * *", Timezone: "Europe/Berlin"})
	if err != nil {
		b.Fatal(err)
	}
	last := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for b.Loop() {
		s.Due(last, last.Add(365*24*time.Hour), time.Minute)
	}
}
