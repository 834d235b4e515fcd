package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
)

// TestStatusPrintsTheVolumesAndTheirWarnings renders the volumes' table
// with a fixed clock: a project with none prints nothing, a failed
// volume's warning is printed below its project's table with its name,
// and a host's escape sequence in a warning cannot act on the terminal.
func TestStatusPrintsTheVolumesAndTheirWarnings(t *testing.T) {
	now := time.Date(2026, 12, 2, 14, 0, 0, 0, time.Local)
	good, next := now.Add(-3*time.Hour), now.Add(12*time.Minute)
	statuses := []api.ProjectStatus{
		{Namespace: "default", Project: "empty"},
		{Namespace: "default", Project: "shop", Volumes: []api.VolumeBackupState{
			{Name: "data", LastGood: &good, LastOutcome: "failed", Schedule: "every 1h", NextScheduled: &next,
				Warning: "last backup failed at 2026-12-02T13:00:00Z: before hook \x1b[31mexited 1"},
			{Name: "scratch"},
		}},
	}
	var out bytes.Buffer
	if err := printVolumes(&out, statuses, now); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"default/shop volumes",
		"VOLUME   LAST GOOD BACKUP",
		"data     2026-12-02 11:00:00 (3h0m0s ago)  failed        every 1h  2026-12-02 14:12:00 (in 12m0s)",
		"scratch  never                             -             -         -",
		"  warning: data: last backup failed at 2026-12-02T13:00:00Z: before hook",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "empty") || strings.Contains(got, "\x1b") || strings.Count(got, "warning:") != 1 {
		t.Errorf("the output:\n%q", got)
	}
	if strings.Index(got, "warning:") < strings.Index(got, "scratch") {
		t.Errorf("the warning comes before the table's end:\n%s", got)
	}
}
