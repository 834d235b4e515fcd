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

// TestStatusSaysWhereAFailedOverVolumeRunsAndWhatItLost: a failover's
// hosts, backup and data window, and each stale copy with the command
// that deletes it.
func TestStatusSaysWhereAFailedOverVolumeRunsAndWhatItLost(t *testing.T) {
	now := time.Date(2026, 12, 2, 14, 0, 0, 0, time.Local)
	found := now.Add(-time.Minute)
	v := api.VolumeBackupState{Name: "data",
		Failover: &api.VolumeFailover{From: "id1", FromName: "h1", To: "id2", ToName: "h2", At: now.Add(-time.Hour),
			Backup: strings.Repeat("ab", 32), BackupCreated: now.Add(-70 * time.Minute), DataWindow: "9m30s"},
		StaleCopies: []api.StaleCopy{{Host: "id1", HostName: "h1", DockerName: "hatch-id1-default-shop-data", Since: now.Add(-time.Hour), Found: &found}}}
	lines := failoverLines(v)
	if len(lines) != 2 {
		t.Fatalf("lines %q, want the failover and one stale copy", lines)
	}
	for i, want := range []string{"from host h1 to host h2, restored from backup abababababab taken 2026-12-02 12:50:00: up to 9m30s of writes",
		"stale copy hatch-id1-default-shop-data on host h1 (back since 2026-12-02 13:59:00, not started; hatch volume forget PROJECT data --stale-copy h1"} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d %q lacks %q", i, lines[i], want)
		}
	}
}
