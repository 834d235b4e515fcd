package cli

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
)

func TestARunsEndIsTheCommandsExitCode(t *testing.T) {
	for _, c := range []struct {
		name        string
		run         api.Run
		interrupted bool
		code        int
		says        string
	}{
		{"exited 0 is success", api.Run{State: "exited"}, false, 0, ""},
		{"exited 3 is 3, said by the command's own output", api.Run{State: "exited", ExitCode: 3}, false, 3, ""},
		{"stopped at Ctrl-C is 130", api.Run{State: "stopped", ExitCode: 143}, true, 130, ""},
		{"stopped by someone else says so", api.Run{ID: "r1", State: "stopped"}, false, 1, "stopped before its end"},
		{"past its timeout is 124", api.Run{ID: "r1", State: "timed_out"}, false, 124, "timeout"},
		{"one that never started is 125 with why", api.Run{ID: "r1", State: "failed", Error: "pull alpine: not found"}, false, 125, "pull alpine: not found"},
		{"lost with its host says it is not run again", api.Run{ID: "r1", State: "lost", HostName: "h1"}, false, 1, "not run again"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := runEnd(c.run, c.interrupted)
			if c.code == 0 {
				if err != nil {
					t.Fatalf("err %v, want none", err)
				}
				return
			}
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != c.code {
				t.Fatalf("err %v, want exit code %d", err, c.code)
			}
			if (c.says == "") != (ee.err == nil) || (ee.err != nil && !strings.Contains(ee.err.Error(), c.says)) {
				t.Fatalf("err %v, want it to say %q", ee.err, c.says)
			}
		})
	}
}

func TestRunsAreATableWithDurationsAndEscapedCells(t *testing.T) {
	start := time.Date(2026, 12, 2, 14, 0, 0, 0, time.UTC)
	runs := []api.Run{
		{ID: "r2", Egg: "report", Trigger: api.TriggerSchedule, HostName: "h1", StartedAt: start, State: "running"},
		{ID: "r1", Egg: "migrate", Trigger: api.TriggerManual, Actor: "ali\x1b[2Jce", HostName: "h1", StartedAt: start,
			EndedAt: start.Add(2100 * time.Millisecond), State: "exited", ExitCode: 3},
		{ID: "r0", Egg: "migrate", Trigger: api.TriggerManual, Actor: "alice", State: "pending"},
	}
	var b strings.Builder
	if err := printRuns(&b, runs, start.Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "ID") {
		t.Fatalf("table:\n%s", b.String())
	}
	for i, want := range [][]string{
		{"r2", "report", "schedule", " - ", "h1", "5s", "running"},
		{"r1", "migrate", "manual", `ali\x1b[2Jce`, "2.1s", "exited", " 3"},
		{"r0", "(not placed yet)", "pending"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i+1], w) {
				t.Errorf("row %d %q lacks %q", i+1, lines[i+1], w)
			}
		}
	}
	if strings.Contains(b.String(), "\x1b") {
		t.Fatal("an escape sequence reached the terminal")
	}
}

func TestSchedulesShowTheirNextRunOrThatTheyArePaused(t *testing.T) {
	now := time.Date(2026, 12, 2, 14, 0, 0, 0, time.UTC)
	var b strings.Builder
	err := printSchedules(&b, []string{"default/shop", "default/blog"}, map[string][]api.Schedule{
		"default/shop": {
			{Egg: "report", Spec: "every 15m", Next: now.Add(3 * time.Minute), LastRun: "r9"},
			{Egg: "cleanup", Spec: "cron 0 3 * * * Europe/Berlin", Paused: true},
		},
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"default/shop schedules", "report", "every 15m", "(in 3m0s)", "r9", "cleanup", "paused"} {
		if !strings.Contains(out, want) {
			t.Errorf("schedules lack %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "default/blog") {
		t.Errorf("a project without schedules is shown:\n%s", out)
	}
}

func TestHatchRunTakesATerminalWithBothIAndTAndNotDetached(t *testing.T) {
	for _, tc := range []struct {
		i, t, detach bool
		refused      string
	}{
		{}, {i: true, t: true}, {detach: true},
		{i: true, refused: "-i and -t go together"},
		{t: true, refused: "-i and -t go together"},
		{i: true, t: true, detach: true, refused: "--detach"},
	} {
		err := checkRunTerminal(tc.i, tc.t, tc.detach)
		if (tc.refused == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.refused)) {
			t.Errorf("-i %v -t %v --detach %v: %v, want refused with %q", tc.i, tc.t, tc.detach, err, tc.refused)
		}
	}
}
