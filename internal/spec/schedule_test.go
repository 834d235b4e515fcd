package spec

import (
	"errors"
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

func TestParseRefusesBadSchedulesAtTheirLine(t *testing.T) {
	const head = "project: jobs\neggs:\n  job:\n    image: busybox\n"
	for _, tt := range []struct {
		name string
		src  string
		want []want
	}{
		{"a bad cron expression, with robfig's reason",
			"    schedule:\n      cron: \"61 * * * *\"\n",
			[]want{{"cron:", []string{`egg "job" schedule: cron:`, "above maximum", "five fields"}}}},
		{"every problem of a schedule, each at its line",
			"    schedule:\n      cron: \"61 * * * *\"\n      timezone: Mars/Olympus\n      concurrency: queue\n      starting_deadline: 2h\n",
			[]want{
				{"cron:", []string{"above maximum"}},
				{"timezone:", []string{"not a time zone"}},
				{"concurrency:", []string{"queue"}},
				{"starting_deadline:", []string{"longer than 1h"}},
			}},
		{"waiting for a scheduled egg to be healthy or to complete",
			"    schedule: {every: 1m}\n  web:\n    image: nginx\n    depends_on:\n      job: {condition: completed}\n  api:\n    image: nginx\n    depends_on: {job: {condition: healthy}}\n  ok:\n    image: nginx\n    depends_on: [job]\n",
			[]want{
				{"job: {condition: completed}", []string{`egg "web" waits for "job" (condition: completed), but "job" runs on a schedule`, "one-shot job"}},
				{"depends_on: {job", []string{`egg "api" waits for "job" (condition: healthy)`}},
			}},
		{"a reference to a scheduled egg's outputs",
			"    port: 80\n    schedule: {every: 1m}\n  web:\n    image: nginx\n    env: {JOB: \"${job.address}\", HOSTS: \"${job.hosts}\"}\n",
			[]want{{"JOB:", []string{`egg "web" references ${job.address}, but egg "job" runs on a schedule`}}, {"JOB:", []string{"${job.hosts}"}}}},
		{"an unknown time zone",
			"    schedule:\n      cron: \"0 3 * * *\"\n      timezone: Mars/Olympus\n",
			[]want{{"timezone:", []string{"timezone:", `"Mars/Olympus" is not a time zone`, "Europe/Berlin"}}}},
		{"both cron and every",
			"    schedule:\n      cron: \"0 3 * * *\"\n      every: 15m\n",
			[]want{{"every:", []string{"either cron or every, not both"}}}},
		{"neither cron nor every",
			"    schedule: {concurrency: allow}\n",
			[]want{{"schedule:", []string{"needs cron", "or every"}}}},
		{"an empty schedule",
			"    schedule:\n",
			[]want{{"schedule:", []string{"needs cron"}}}},
		{"every below a second",
			"    schedule: {every: 500ms}\n",
			[]want{{"schedule:", []string{"every: 500ms is shorter than 1s"}}}},
		{"every without a unit",
			"    schedule:\n      every: 15\n",
			[]want{{"every:", []string{"has no unit"}}}},
		{"a zero timeout",
			"    schedule:\n      every: 1m\n      timeout: 0s\n",
			[]want{{"timeout:", []string{"timeout: 0s: want a duration above zero"}}}},
		{"a negative timeout",
			"    schedule:\n      every: 1m\n      timeout: -5m\n",
			[]want{{"timeout:", []string{"above zero"}}}},
		{"a starting deadline above an hour",
			"    schedule:\n      every: 1m\n      starting_deadline: 2h\n",
			[]want{{"starting_deadline:", []string{"2h is longer than 1h"}}}},
		{"keep_runs below one",
			"    schedule:\n      every: 1m\n      keep_runs: 0\n",
			[]want{{"keep_runs:", []string{"keep_runs must be between 1"}}}},
		{"an unknown concurrency",
			"    schedule:\n      every: 1m\n      concurrency: queue\n",
			[]want{{"concurrency:", []string{`"queue" is not one of forbid`}}}},
		{"an unknown field names the closest",
			"    schedule:\n      every: 1m\n      keep_run: 3\n",
			[]want{{"keep_run:", []string{`unknown field "keep_run"`, `"keep_runs"`}}}},
		{"routes, ports, health and replicas say why a job has none",
			"    replicas: 2\n    port: 80\n    ports: [\"8080:80\"]\n    routes: [job.localhost]\n    health: {http: /}\n    schedule: {every: 1m}\n",
			[]want{
				{"replicas:", []string{`egg "job" has a schedule and replicas`, "one container"}},
				{"ports:", []string{"has a schedule and ports", "no long-running replica"}},
				{"routes:", []string{"has a schedule and routes", "no long-running replica for the ingress to route to", "remove routes"}},
				{"health:", []string{"has a schedule and health", "exit code"}},
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src := head + tt.src
			_, err := parse(src)
			var perr *Error
			if !errors.As(err, &perr) {
				t.Fatalf("Parse = %v, want an *Error", err)
			}
			checkDiagnostics(t, src, perr.Errors, tt.want)
		})
	}
}

func TestParseReadsASchedule(t *testing.T) {
	p, err := parse("project: jobs\neggs:\n  job:\n    image: busybox\n    schedule: {every: 90m, timeout: 1h0m0s, keep_runs: 5}\n")
	if err != nil {
		t.Fatal(err)
	}
	e := p.Eggs[0]
	want := inputs.Schedule{Every: "1h30m", Timeout: "1h", KeepRuns: 5}
	if e.Schedule == nil || *e.Schedule != want || e.Replicas != 0 {
		t.Fatalf("schedule %+v, replicas %d; want %+v (durations canonical, defaults left to schedule.FromInputs) and 0 replicas", e.Schedule, e.Replicas, want)
	}
}

func TestCheckResourceAppliesTheScheduleRules(t *testing.T) {
	egg := func(sched map[string]any, extra map[string]any) *resource.Desired {
		in := map[string]any{"image": "busybox", "replicas": 0, "schedule": sched}
		for k, v := range extra {
			in[k] = v
		}
		return &resource.Desired{Type: resource.Egg, Name: "job", Inputs: in}
	}
	if err := CheckResource(egg(map[string]any{"cron": "0 3 * * *", "timezone": "Europe/Berlin"}, nil), Limits{}); err != nil {
		t.Fatalf("a good schedule refused: %v", err)
	}
	for _, c := range []struct {
		name  string
		r     *resource.Desired
		field string
	}{
		{"a bad expression", egg(map[string]any{"cron": "0 3 * *"}, nil), "inputs.schedule.cron: "},
		{"an unknown zone", egg(map[string]any{"cron": "0 3 * * *", "timezone": "Nowhere/Land"}, nil), "inputs.schedule.timezone: "},
		{"both cron and every", egg(map[string]any{"cron": "0 3 * * *", "every": "1m"}, nil), "inputs.schedule.every: "},
		{"neither", egg(map[string]any{}, nil), "inputs.schedule.cron: "},
		{"every below a second", egg(map[string]any{"every": "10ms"}, nil), "inputs.schedule.every: "},
		{"a zero timeout", egg(map[string]any{"every": "1m", "timeout": "0s"}, nil), "inputs.schedule.timeout: "},
		{"a long deadline", egg(map[string]any{"every": "1m", "starting_deadline": "3h"}, nil), "inputs.schedule.starting_deadline: "},
		{"negative keep_runs", egg(map[string]any{"every": "1m", "keep_runs": -1}, nil), "inputs.schedule.keep_runs: "},
		{"a bad concurrency", egg(map[string]any{"every": "1m", "concurrency": "sometimes"}, nil), "inputs.schedule.concurrency: "},
		{"an unknown field", egg(map[string]any{"every": "1m", "retries": 3}, nil), `unknown field "retries"`},
		{"replicas", egg(map[string]any{"every": "1m"}, map[string]any{"replicas": 2}), "inputs.replicas: a scheduled egg"},
		{"ports", egg(map[string]any{"every": "1m"}, map[string]any{"ports": []any{map[string]any{"published": 80, "target": 80, "protocol": "tcp"}}}), "inputs.ports: a scheduled egg"},
		{"health", egg(map[string]any{"every": "1m"}, map[string]any{"health": map[string]any{"tcp": true, "interval": "5s", "timeout": "2s", "retries": 3}}), "inputs.health: a scheduled egg"},
	} {
		err := CheckResource(c.r, Limits{})
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: got %v, want an error naming %q", c.name, err, c.field)
		}
	}
}
