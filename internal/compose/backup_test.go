package compose

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/spec"
)

const backupCompose = "services:\n  db:\n    image: postgres:16\n    volumes: [\"data:/var/lib/postgresql/data\"]\nvolumes:\n  data:\n"

// A volume's x-hatch.backup reads as hatch.yaml's backup block, and hatch
// convert writes it there.
func TestLoadReadsAVolumesXHatchBackupAndConvertWritesIt(t *testing.T) {
	src := backupCompose + "    x-hatch:\n      backup:\n        schedule: {cron: \"0 3 * * *\", timezone: Europe/Berlin}\n        keep: 14\n        before: [pg_dump, -f, /var/lib/postgresql/data/dump.sql]\n        after: [rm, /var/lib/postgresql/data/dump.sql]\n        consistency: hooks\n"
	p := load(t, src, Options{})
	want := &inputs.VolumeBackup{
		Schedule:    &inputs.Schedule{Cron: "0 3 * * *", Timezone: "Europe/Berlin"},
		Keep:        14,
		Before:      []string{"pg_dump", "-f", "/var/lib/postgresql/data/dump.sql"},
		After:       []string{"rm", "/var/lib/postgresql/data/dump.sql"},
		Consistency: "hooks",
	}
	if len(p.Volumes) != 1 || !reflect.DeepEqual(p.Volumes[0].Backup, want) {
		t.Fatalf("volumes %+v, want data with the backup %+v", p.Volumes, want)
	}
	out, err := spec.Marshal(p.Project)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"    backup:", `      schedule: {cron: "0 3 * * *", timezone: Europe/Berlin}`, "      keep: 14", "      consistency: hooks"} {
		if !strings.Contains(string(out), line+"\n") {
			t.Errorf("hatch convert's output lacks %q:\n%s", line, out)
		}
	}
}

// Bad values are refused by spec's checks, at the line of the Compose
// setting, and the extension's own shape by the mapping.
func TestLoadRefusesABadVolumeBackupAtItsComposeLine(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string // line: text
	}{
		{"keep below one", backupCompose + "    x-hatch:\n      backup:\n        keep: 0\n",
			[]string{`9: volume "data" x-hatch.backup.keep: 0 must be a whole number of backups, at least 1`}},
		{"every below a minute, from spec's checks", backupCompose + "    x-hatch:\n      backup:\n        schedule: {every: 10s}\n",
			[]string{`9: volumes.data.backup.schedule.every: 10s is more often than every 1m`}},
		{"concurrency", backupCompose + "    x-hatch:\n      backup:\n        keep: 3\n        schedule: {every: 1h, concurrency: allow}\n",
			[]string{`10: never run twice at once`}},
		{"an unknown key", backupCompose + "    x-hatch:\n      backups: {}\n",
			[]string{`8: volume "data" x-hatch: unknown key "backups"`}},
		{"an unknown consistency", backupCompose + "    x-hatch:\n      backup: {consistency: freeze}\n",
			[]string{`8: volumes.data.backup.consistency: "freeze" is not hooks`}},
		{"a volume no service mounts", "services:\n  web: {image: nginx}\nvolumes:\n  data:\n    x-hatch:\n      backup: {keep: 3}\n",
			[]string{`6: no egg mounts volume "data"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeFiles(t, map[string]string{"compose.yaml": tc.src})
			file := filepath.Join(dir, "compose.yaml")
			perr, err := mustFail(t, []string{file}, Options{})
			if err != nil {
				t.Fatalf("want problems with lines, got %v", err)
			}
			if len(perr.Errors) != len(tc.want) {
				t.Fatalf("%d errors, want %d:\n%v", len(perr.Errors), len(tc.want), perr)
			}
			for i, w := range tc.want {
				line, text, _ := strings.Cut(w, ": ")
				got := perr.Errors[i]
				if !strings.HasPrefix(got.String(), file+":"+line+": ") || !strings.Contains(got.Message, text) {
					t.Errorf("error %d = %q, want line %s and %q", i, got, line, text)
				}
			}
		})
	}
}
