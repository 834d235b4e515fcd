package provider

import (
	"slices"
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/desired"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/schedule"
)

const jobsYAML = `
project: jobs
eggs:
  web:
    image: web:1
    replicas: 2
    port: 8080
  report:
    image: report:1
    command: [/report]
    schedule: {cron: "0 3 * * *", timezone: Europe/Berlin}
  cleanup:
    image: cleanup:1
    volumes: ["data:/data"]
    schedule: {every: 15m, concurrency: replace, keep_runs: 3}
  after:
    image: after:1
    depends_on: [report, cleanup]
volumes:
  data: {}
`

// A scheduled egg has no long-running replicas: the apply places it on no
// host (a stateful one too: its volume is placed, nothing runs on it), its
// readiness is immediate (an egg depending on it is not held), and its schedule is kept in its stored inputs, where the
// jobs service reads it with schedule.FromInputs.
func TestAScheduledEggAppliesWithNoReplicaOnAnyHost(t *testing.T) {
	e := newEnv(t, "h1", "h2")
	e.apply("default/jobs", jobsYAML, nil)
	hosts := []string{"h1", "h2"}
	for _, egg := range []string{"report", "cleanup"} {
		if got := e.slots("default/jobs/"+egg, hosts...); len(got) != 0 {
			t.Errorf("%s has workloads %v, want none on any host", egg, got)
		}
		if h := desired.HostsOf(e.record("default/jobs", "egg/"+egg).Outputs); len(h) != 0 {
			t.Errorf("%s's hosts output is %v, want none", egg, h)
		}
	}
	for _, egg := range []string{"web", "after"} {
		if len(e.slots("default/jobs/"+egg, hosts...)) == 0 {
			t.Errorf("%s is on no host: only scheduled eggs have no replicas", egg)
		}
	}
	if v := e.record("default/jobs", "volume/data"); v.Outputs[inputs.OutputHost] == "" {
		t.Errorf("the scheduled egg's volume was not placed: outputs %v", v.Outputs)
	}

	rec := e.record("default/jobs", "egg/cleanup")
	in, err := inputs.Decode[inputs.Egg](rec.Inputs)
	if err != nil {
		t.Fatal(err)
	}
	if in.Schedule == nil || *in.Schedule != (inputs.Schedule{Every: "15m", Concurrency: "replace", KeepRuns: 3}) || in.Replicas != 0 {
		t.Fatalf("stored schedule %+v and replicas %d, want every 15m, replace, keep 3, and 0 replicas", in.Schedule, in.Replicas)
	}
	sch, rules, err := schedule.FromInputs(*in.Schedule)
	if err != nil || sch.String() != "every 15m" || rules.KeepRuns != 3 || rules.StartingDeadline != 15*60e9 {
		t.Fatalf("FromInputs of the stored schedule = %v, %+v, %v", sch, rules, err)
	}
}

// An egg that becomes scheduled leaves every host it ran on; one that
// stops being scheduled is placed again.
func TestAnEggThatBecomesScheduledLeavesItsHosts(t *testing.T) {
	e := newEnv(t, "h1", "h2")
	const running = "project: jobs\neggs:\n  report:\n    image: report:1\n    replicas: 2\n"
	const scheduled = "project: jobs\neggs:\n  report:\n    image: report:1\n    schedule: {every: 1m}\n"
	e.apply("default/jobs", running, nil)
	if got := e.slots("default/jobs/report", "h1", "h2"); len(got) != 2 {
		t.Fatalf("slots %v, want one on each host", got)
	}
	e.apply("default/jobs", scheduled, nil)
	if got := e.slots("default/jobs/report", "h1", "h2"); len(got) != 0 {
		t.Fatalf("slots %v once scheduled, want none", got)
	}
	e.apply("default/jobs", running, nil)
	if got := e.slots("default/jobs/report", "h1", "h2"); len(got) != 2 {
		t.Fatalf("slots %v once unscheduled, want one on each host again", got)
	}
}

func TestPreviewOfAScheduledEggStartsNothing(t *testing.T) {
	e := newEnv(t, "h1")
	e.apply("default/jobs", "project: jobs\neggs:\n  report:\n    image: report:1\n", nil)
	hs, err := e.preview("default/jobs", "project: jobs\neggs:\n  report:\n    image: report:2\n    schedule: {cron: \"0 3 * * *\", timezone: Europe/Berlin}\n", Options{})
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, h := range hs {
		all = append(all, h.Steps...)
	}
	want := []string{"schedule report: cron 0 3 * * * Europe/Berlin, no long-running replica", "stop report: 1 replica"}
	if !slices.Equal(all, want) && !slices.Equal(all, []string{want[1], want[0]}) {
		t.Fatalf("preview steps %q, want %q", all, want)
	}
	if got := e.slots("default/jobs/report", "h1"); len(got) != 1 {
		t.Fatalf("the preview changed the desired state: %v", got)
	}
}

// The egg provider's readiness of a scheduled egg is immediate, whatever
// the condition and whatever its hosts report.
func TestAScheduledEggIsReadyAtOnce(t *testing.T) {
	e := newEnv(t, "h1")
	e.apply("default/jobs", jobsYAML, nil)
	rec := e.record("default/jobs", "egg/report")
	for _, cond := range []resource.Condition{resource.ConditionHealthy, resource.ConditionCompleted} {
		ok, reason, err := (eggProvider{e.set}).Ready(t.Context(), "default/jobs", rec, cond)
		if !ok || err != nil || strings.TrimSpace(reason) != "" {
			t.Errorf("Ready(%s) = %v, %q, %v; want ready at once", cond, ok, reason, err)
		}
	}
}
