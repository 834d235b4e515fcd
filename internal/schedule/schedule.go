// Package schedule parses a schedule (a cron expression in a time zone, or a
// fixed interval) and the rules of a scheduled egg's runs, and computes its
// ticks. It is pure: every function takes the times it works on, so the
// control plane's scheduler, the spec's checks and their tests all decide
// alike, and several servers agree without sharing any state. It is the one
// place an inputs.Schedule is read.
//
// Ticks:
//   - Every ticks are aligned to multiples of the interval since the Unix epoch
//     (every: 5s runs at the 5 s marks, every: 1h on the hour UTC), so any
//     server computes the same ticks from nothing but the time.
//   - Cron ticks come from robfig/cron's standard 5-field parser (and its
//     @hourly, @daily, @weekly, @monthly, @yearly) in the schedule's zone (UTC
//     by default), zones from the embedded database (time/tzdata), so every
//     server reads them alike whatever its own zoneinfo holds.
//   - Daylight saving, cron only. In a gap (the hour skipped when clocks go
//     forward: 02:00-03:00 in Europe/Berlin on the last Sunday of March) a tick
//     whose wall time falls in it does not happen that day, as robfig/cron
//     does: "30 2 * * *" skips that night, "0 * * * *" has 23 ticks that day.
//     In a repeat (the hour lived twice when clocks go back) a schedule that
//     names its hours (its hour field is not *) runs once, at the first of the
//     two times, as Vixie cron does: "30 2 * * *" runs at 02:30 CEST and not
//     again at 02:30 CET; one whose hour field is * keeps its pace through
//     both ("*/15 * * * *" and "0 * * * *" run in both hours).
package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // zones alike on every server, whatever its own zoneinfo holds

	"github.com/robfig/cron/v3"

	"github.com/hatchery/hatchery/internal/resource/inputs"
)

// The limits and defaults of a schedule, here once for the spec's checks and
// the control plane.
const (
	// MinEvery is the shortest interval of an every schedule.
	MinEvery = time.Second
	// MaxStartingDeadline is the latest a tick may start, and the cap of the
	// default deadline (the schedule's interval).
	MaxStartingDeadline = time.Hour
	// DefaultKeepRuns is how many ended runs keep their container by default.
	DefaultKeepRuns = 20
	// MaxCounted is where Due stops counting a cron schedule's missed ticks
	// (about 70 days of a minutely one; some 0.3 s of robfig's Next): a long
	// outage must not walk millions of ticks. A count of MaxCounted means "at
	// least".
	MaxCounted = 100_000
)

// Spec is a schedule as written: exactly one of Cron (with Timezone, an IANA
// name, default UTC) or Every.
type Spec struct {
	Cron, Timezone string
	Every          time.Duration
}

// FieldError is a schedule refused: Field names the key at fault as written
// in hatch.yaml and in inputs.Schedule ("cron", "timezone", "every",
// "concurrency", "timeout", "starting_deadline", "keep_runs"), so the spec's
// loader can point at its line and CheckResource name it.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Schedule is a parsed schedule. Its methods are safe for concurrent use (it
// is never changed after Parse).
type Schedule struct {
	spec Spec
	// cron is the parsed expression (nil for an every schedule), in loc.
	cron *cron.SpecSchedule
	loc  *time.Location
	// once is set when the cron names its hours: a repeated wall time (a
	// fall-back hour) then runs only at its first occurrence.
	once     bool
	interval time.Duration
}

// cronParser is robfig/cron's standard five fields and its descriptors;
// Parse refuses "@every" and the "TZ=" prefix, which have fields of their own.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parse checks a schedule and prepares it. The error holds a *FieldError
// for each field at fault, naming it and saying why (FieldErrors lists them).
func Parse(s Spec) (*Schedule, error) {
	switch {
	case s.Cron != "" && s.Every != 0:
		return nil, &FieldError{"every", "a schedule has either cron or every, not both: keep one"}
	case s.Cron == "" && s.Every == 0 && s.Timezone == "":
		return nil, &FieldError{"cron", `a schedule needs cron (for example "0 3 * * *") or every (for example 15m)`}
	case s.Cron == "" && s.Every == 0:
		return nil, &FieldError{"cron", `a schedule with a timezone needs cron (for example "0 3 * * *")`}
	}
	if s.Cron == "" {
		var errs []error
		if s.Every < MinEvery {
			errs = append(errs, &FieldError{"every", fmt.Sprintf("%s is shorter than %s, the shortest interval", s.Every, MinEvery)})
		}
		if s.Timezone != "" {
			errs = append(errs, &FieldError{"timezone", "every ticks at multiples of its interval since the Unix epoch, in no time zone: a timezone goes with cron only"})
		}
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		return &Schedule{spec: s, interval: s.Every}, nil
	}
	spec, cronErr := parseCron(s.Cron)
	loc, zoneErr := zone(s.Timezone)
	if cronErr != nil || zoneErr != nil {
		return nil, errors.Join(cronErr, zoneErr)
	}
	spec.Location = loc
	sch := &Schedule{spec: s, cron: spec, loc: loc, once: !everyHour(spec)}
	sch.interval = sch.shortestGap()
	if sch.interval == 0 {
		return nil, &FieldError{"cron", fmt.Sprintf("%q never fires (no such date)", s.Cron)}
	}
	return sch, nil
}

// parseCron parses a cron expression with robfig's standard parser.
func parseCron(expr string) (*cron.SpecSchedule, error) {
	trimmed := strings.TrimSpace(expr)
	if strings.HasPrefix(trimmed, "TZ=") || strings.HasPrefix(trimmed, "CRON_TZ=") {
		return nil, &FieldError{"cron", "give the time zone in timezone, not in the expression"}
	}
	if strings.HasPrefix(trimmed, "@every") {
		return nil, &FieldError{"cron", `write "every: <duration>" instead of "cron: @every"`}
	}
	parsed, err := cronParser.Parse(trimmed)
	if err != nil {
		return nil, &FieldError{"cron", fmt.Sprintf("%q: %v (five fields: minute hour day-of-month month day-of-week)", expr, err)}
	}
	spec, ok := parsed.(*cron.SpecSchedule)
	if !ok { // every descriptor but @every (refused above) gives a SpecSchedule
		return nil, &FieldError{"cron", fmt.Sprintf("%q is not a cron expression", expr)}
	}
	return spec, nil
}

// zone loads a time zone from the embedded database; "" is UTC. "Local"
// is refused: it would tick differently on each server.
func zone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil || name == "Local" {
		return nil, &FieldError{"timezone", fmt.Sprintf("%q is not a time zone: give an IANA name such as Europe/Berlin or UTC", name)}
	}
	return loc, nil
}

// FieldErrors lists the *FieldErrors an error of Parse or FromInputs holds.
func FieldErrors(err error) []*FieldError {
	switch e := err.(type) {
	case nil:
		return nil
	case *FieldError:
		return []*FieldError{e}
	case interface{ Unwrap() []error }:
		var out []*FieldError
		for _, inner := range e.Unwrap() {
			out = append(out, FieldErrors(inner)...)
		}
		return out
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		return []*FieldError{fe}
	}
	return nil
}

// everyHour says whether a cron's hour field matches every hour (written *
// or as 0-23): such a schedule keeps its pace through a repeated hour.
func everyHour(s *cron.SpecSchedule) bool {
	const all = 1<<24 - 1
	return s.Hour&all == all
}

// sampleTicks is how many ticks shortestGap looks at.
const sampleTicks = 32

// shortestGap is the shortest gap between the first ticks after a fixed
// moment, so the same expression always gives the same interval; 0 if it
// never fires.
func (s *Schedule) shortestGap() time.Duration {
	t := s.Next(time.Date(2001, time.January, 1, 0, 0, 0, 0, time.UTC))
	if t.IsZero() {
		return 0
	}
	var gap time.Duration
	for range sampleTicks {
		n := s.Next(t)
		if n.IsZero() {
			break
		}
		if d := n.Sub(t); gap == 0 || d < gap {
			gap = d
		}
		t = n
	}
	if gap == 0 { // one tick in five years: robfig looks no further
		gap = 5 * 365 * 24 * time.Hour
	}
	return gap
}

// Rules are a scheduled egg's run rules with their defaults applied.
type Rules struct {
	// Concurrency is inputs.ConcurrencyForbid (the default), Allow or Replace.
	Concurrency string
	// Timeout stops a run past it; 0 for none.
	Timeout time.Duration
	// StartingDeadline is how late a tick may still start: written, or the
	// schedule's interval, at most MaxStartingDeadline.
	StartingDeadline time.Duration
	// KeepRuns is how many ended runs keep their container.
	KeepRuns int
}

// FromInputs reads an egg's schedule as stored (inputs.Schedule): the
// schedule and its rules, defaults applied. The error holds a *FieldError
// for every field at fault (FieldErrors lists them).
func FromInputs(in inputs.Schedule) (*Schedule, Rules, error) {
	var errs []error
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	spec := Spec{Cron: in.Cron, Timezone: in.Timezone}
	var err error
	if in.Every != "" {
		spec.Every, err = duration("every", in.Every)
		check(err)
	}
	var s *Schedule
	if err == nil {
		s, err = Parse(spec)
		check(err)
	}
	r := Rules{Concurrency: inputs.ConcurrencyForbid, KeepRuns: DefaultKeepRuns}
	switch in.Concurrency {
	case "":
	case inputs.ConcurrencyForbid, inputs.ConcurrencyAllow, inputs.ConcurrencyReplace:
		r.Concurrency = in.Concurrency
	default:
		check(&FieldError{"concurrency", fmt.Sprintf("%q is not one of forbid (skip a tick while a run runs; the default), allow, replace (stop the run)", in.Concurrency)})
	}
	if in.Timeout != "" {
		r.Timeout, err = duration("timeout", in.Timeout)
		check(err)
	}
	if in.StartingDeadline != "" {
		r.StartingDeadline, err = duration("starting_deadline", in.StartingDeadline)
		check(err)
		if r.StartingDeadline > MaxStartingDeadline {
			check(&FieldError{"starting_deadline", fmt.Sprintf("%s is longer than %s, the latest a tick may start (one later than its deadline is recorded as missed)", in.StartingDeadline, FormatDuration(MaxStartingDeadline))})
		}
	} else if s != nil {
		r.StartingDeadline = min(s.Interval(), MaxStartingDeadline)
	}
	switch {
	case in.KeepRuns < 0:
		check(&FieldError{"keep_runs", fmt.Sprintf("%d: keep at least 1 run (default %d)", in.KeepRuns, DefaultKeepRuns)})
	case in.KeepRuns > 0:
		r.KeepRuns = in.KeepRuns
	}
	if len(errs) > 0 {
		return nil, Rules{}, errors.Join(errs...)
	}
	return s, r, nil
}

// duration parses a positive Go duration.
func duration(field, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, &FieldError{field, fmt.Sprintf("%q is not a duration (for example 30s, 15m, 1h30m)", v)}
	}
	if d <= 0 {
		return 0, &FieldError{field, fmt.Sprintf("%s: want a duration above zero", v)}
	}
	return d, nil
}

// Next is the first tick after the given time (strictly after). It is the
// zero time for a cron that fires no more within robfig's five years. An
// every schedule counts from the Unix epoch in time.Duration, so after must
// lie within 292 years of 1970 (a zero time does not).
func (s *Schedule) Next(after time.Time) time.Time {
	if s.cron == nil {
		return s.everyTick(floorDiv(after.Sub(epoch), s.spec.Every) + 1)
	}
	t := s.cron.Next(after)
	for !t.IsZero() && s.once && s.repeated(t) {
		t = s.cron.Next(t)
	}
	return t
}

// repeated says whether t's wall time in the schedule's zone was already
// lived earlier (the second pass of a fall-back hour). Zones move their
// clocks at most a few hours at once, so the offset three hours before is the
// one before the change.
func (s *Schedule) repeated(t time.Time) bool {
	t = t.In(s.loc)
	_, now := t.Zone()
	_, before := t.Add(-3 * time.Hour).Zone()
	if before <= now {
		return false
	}
	u := t.Add(-time.Duration(before-now) * time.Second)
	_, at := u.Zone()
	return at == before // u has t's wall time, an offset earlier
}

// Interval is the schedule's nominal interval: Every, or the shortest gap
// between a cron's ticks (the default starting deadline derives from it).
func (s *Schedule) Interval() time.Duration { return s.interval }

// String is the schedule as `hatch status` shows it (api.Schedule.Spec):
// "every 15m", "cron 0 3 * * * Europe/Berlin".
func (s *Schedule) String() string {
	if s.cron == nil {
		return "every " + FormatDuration(s.spec.Every)
	}
	return "cron " + strings.TrimSpace(s.spec.Cron) + " " + s.loc.String()
}

// FormatDuration writes a duration without its trailing zero units: 15m,
// 1h30m, 1.5s (time.Duration's String writes 15m0s).
func FormatDuration(d time.Duration) string {
	out := d.String()
	if strings.HasSuffix(out, "m0s") {
		out = strings.TrimSuffix(out, "0s")
	}
	if strings.HasSuffix(out, "h0m") {
		out = strings.TrimSuffix(out, "0m")
	}
	return out
}

// Due splits the ticks in (last, now] by the starting deadline: run holds
// those no more than deadline before now (oldest first; a run is late by
// now-tick), the others are missed: how many, and the latest of them. Missed
// ticks are counted, never listed (a cron's count stops at MaxCounted). last
// is the latest tick already dealt with; a zero last, or one not before now,
// has nothing due. run holds at most deadline/Interval ticks for an every
// schedule, so at most 3600 with the longest deadline.
func (s *Schedule) Due(last, now time.Time, deadline time.Duration) (run []time.Time, missed int, lastMissed time.Time) {
	if last.IsZero() || !last.Before(now) {
		return nil, 0, time.Time{}
	}
	cut := now.Add(-max(deadline, 0)) // a tick at or after cut runs
	if s.cron == nil {
		return s.dueEvery(last, now, cut)
	}
	t := s.Next(last)
	for ; !t.IsZero() && t.Before(cut); t = s.Next(t) {
		if missed == MaxCounted {
			lastMissed = s.lastBefore(cut)
			break
		}
		missed++
		lastMissed = t
	}
	if missed == MaxCounted {
		t = s.Next(lastMissed)
	}
	for ; !t.IsZero() && !t.After(now); t = s.Next(t) {
		run = append(run, t)
	}
	return run, missed, lastMissed
}

// lastBefore is a cron's latest tick before t, found by looking back ever
// further (a few Next calls, not a walk over every tick).
func (s *Schedule) lastBefore(t time.Time) time.Time {
	for back := s.interval; ; back *= 2 {
		from := t.Add(-back)
		first := s.Next(from)
		if !first.IsZero() && first.Before(t) {
			for n := s.Next(first); !n.IsZero() && n.Before(t); n = s.Next(n) {
				first = n
			}
			return first
		}
	}
}

// epoch is where every schedule's ticks are counted from; its ticks are in UTC.
var epoch = time.Unix(0, 0).UTC()

// everyTick is an every schedule's k-th tick since the epoch.
func (s *Schedule) everyTick(k int64) time.Time {
	return epoch.Add(time.Duration(k) * s.spec.Every)
}

// dueEvery is Due for an every schedule, in arithmetic: tick k is at
// k*Every since the epoch, so the ticks of (last, now] are k in [first, end].
func (s *Schedule) dueEvery(last, now, cut time.Time) (run []time.Time, missed int, lastMissed time.Time) {
	every := s.spec.Every
	first := floorDiv(last.Sub(epoch), every) + 1
	end := floorDiv(now.Sub(epoch), every)
	runFrom := max(first, ceilDiv(cut.Sub(epoch), every))
	if n := min(runFrom, end+1) - first; n > 0 {
		missed = int(n)
		lastMissed = s.everyTick(first + n - 1)
	}
	for k := runFrom; k <= end; k++ {
		run = append(run, s.everyTick(k))
	}
	return run, missed, lastMissed
}

// floorDiv is d/every rounded down, ceilDiv rounded up (times before the
// epoch give negative d).
func floorDiv(d, every time.Duration) int64 {
	q := d / every
	if d%every < 0 {
		q--
	}
	return int64(q)
}

func ceilDiv(d, every time.Duration) int64 {
	q := d / every
	if d%every > 0 {
		q++
	}
	return int64(q)
}
