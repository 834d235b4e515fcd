package spec

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

const backupHead = "project: shop\neggs:\n  db:\n    image: postgres:16\n    volumes: [\"data:/var/lib/postgresql/data\"]\nvolumes:\n  data:\n"

func TestParseReadsAVolumesBackupIntoItsInputs(t *testing.T) {
	src := backupHead + "    backup:\n      schedule: {cron: \"0 3 * * *\", timezone: Europe/Berlin, starting_deadline: 30m}\n" +
		"      keep: 14\n      before: [pg_dump, -f, /var/lib/postgresql/data/dump.sql]\n      after: [rm, /var/lib/postgresql/data/dump.sql]\n      consistency: hooks\n"
	p, err := parse(src)
	if err != nil {
		t.Fatal(err)
	}
	want := &inputs.VolumeBackup{
		Schedule:    &inputs.Schedule{Cron: "0 3 * * *", Timezone: "Europe/Berlin", StartingDeadline: "30m"},
		Keep:        14,
		Before:      []string{"pg_dump", "-f", "/var/lib/postgresql/data/dump.sql"},
		After:       []string{"rm", "/var/lib/postgresql/data/dump.sql"},
		Consistency: "hooks",
	}
	if got := p.Volumes[0].Backup; !reflect.DeepEqual(got, want) {
		t.Fatalf("backup %+v, want %+v", got, want)
	}
	rs, _ := p.Resources()
	vol := find(t, rs, resource.Volume, "data")
	in, err := inputs.Decode[inputs.Volume](vol.Inputs)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in.Backup, want) || in.Egg != "db" {
		t.Fatalf("volume inputs %+v, want the backup %+v of egg db", in, want)
	}
	if err := CheckResource(vol, Limits{}); err != nil {
		t.Fatalf("the loader's own volume is refused by CheckResource: %v", err)
	}
}

func TestParseReadsAnEmptyBackupAsByHandOnly(t *testing.T) {
	p, err := parse(backupHead + "    backup: {}\n")
	if err != nil {
		t.Fatal(err)
	}
	if b := p.Volumes[0].Backup; b == nil || b.Schedule != nil || b.Keep != 0 {
		t.Fatalf("backup %+v, want an empty policy (no schedule, default keep)", b)
	}
}

func TestParseRefusesBadBackupsAtTheirLineWithTheirPath(t *testing.T) {
	for _, tt := range []struct {
		name string
		src  string
		want []want
	}{
		{"keep below one",
			"    backup:\n      keep: 0\n",
			[]want{{"keep:", []string{"volumes.data.backup.keep must be between 1"}}}},
		{"every below a minute",
			"    backup:\n      schedule: {every: 30s}\n",
			[]want{{"schedule:", []string{"volumes.data.backup.schedule.every", "30s is more often than every 1m"}}}},
		{"a bad cron expression",
			"    backup:\n      schedule:\n        cron: \"0 3 * *\"\n",
			[]want{{"cron:", []string{"volumes.data.backup.schedule.cron", "five fields"}}}},
		{"an unknown zone",
			"    backup:\n      schedule:\n        cron: \"0 3 * * *\"\n        timezone: Mars/Olympus\n",
			[]want{{"timezone:", []string{"volumes.data.backup.schedule.timezone", "not a time zone"}}}},
		{"an unknown consistency",
			"    backup:\n      consistency: snapshot\n",
			[]want{{"consistency:", []string{"volumes.data.backup.consistency", `"snapshot" is not hooks`, "or stop"}}}},
		{"a job's schedule settings say backups never run twice at once",
			"    backup:\n      schedule:\n        every: 6h\n        concurrency: allow\n        timeout: 1h\n        keep_runs: 3\n",
			[]want{
				{"concurrency:", []string{"volumes.data.backup.schedule.concurrency", "never run twice at once", "remove it"}},
				{"timeout:", []string{"volumes.data.backup.schedule.timeout", "remove it"}},
				{"keep_runs:", []string{"volumes.data.backup.schedule.keep_runs", "keep:"}},
			}},
		{"hooks with consistency stop",
			"    backup:\n      before: [sync]\n      consistency: stop\n",
			[]want{{"consistency:", []string{"volumes.data.backup.consistency", "remove before and after"}}}},
		{"a hook as one string",
			"    backup:\n      before: pg_dump -f /x\n",
			[]want{{"before:", []string{"volumes.data.backup.before must be a list", "sh, -c"}}}},
		{"an unknown field names the closest",
			"    backup:\n      kep: 3\n",
			[]want{{"kep:", []string{`unknown field "kep"`, `"keep"`}}}},
		{"an empty schedule",
			"    backup:\n      schedule:\n",
			[]want{{"schedule:", []string{"volumes.data.backup.schedule is empty"}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src := backupHead + tt.src
			_, err := parse(src)
			var perr *Error
			if !errors.As(err, &perr) {
				t.Fatalf("Parse = %v, want an *Error", err)
			}
			checkDiagnostics(t, src, perr.Errors, tt.want)
		})
	}
}

func TestParseAcceptsABackupEveryMinute(t *testing.T) {
	for _, s := range []string{"{every: 1m}", `{cron: "* * * * *"}`} {
		if _, err := parse(backupHead + "    backup:\n      schedule: " + s + "\n"); err != nil {
			t.Errorf("schedule %s refused: %v", s, err)
		}
	}
}

func TestParseRefusesABackupOfAVolumeNoEggMounts(t *testing.T) {
	src := "project: shop\neggs:\n  web:\n    image: nginx\nvolumes:\n  data:\n    backup:\n      keep: 3\n"
	_, err := parse(src)
	var perr *Error
	if !errors.As(err, &perr) {
		t.Fatalf("Parse = %v, want an *Error", err)
	}
	checkDiagnostics(t, src, perr.Errors, []want{{"backup:", []string{"volumes.data.backup", `no egg mounts volume "data"`}}})
}

func TestCheckResourceAppliesTheBackupRules(t *testing.T) {
	vol := func(egg string, b map[string]any) *resource.Desired {
		return &resource.Desired{Type: resource.Volume, Name: "data", Inputs: map[string]any{
			"labels": map[string]any{}, "egg": egg, "placement": map[string]any{"hosts": []any{}},
			"resources": map[string]any{}, "backup": b,
		}}
	}
	if err := CheckResource(vol("db", map[string]any{"schedule": map[string]any{"every": "6h"}, "keep": 14, "before": []any{"sync"}}), Limits{}); err != nil {
		t.Fatalf("a good backup refused: %v", err)
	}
	for _, c := range []struct {
		name  string
		r     *resource.Desired
		field string
	}{
		{"a volume no egg mounts", vol("", map[string]any{"keep": 3}), "inputs.backup: no egg mounts"},
		{"a negative keep", vol("db", map[string]any{"keep": -1}), "inputs.backup.keep: "},
		{"every below a minute", vol("db", map[string]any{"schedule": map[string]any{"every": "59s"}}), "inputs.backup.schedule.every: "},
		{"a bad cron", vol("db", map[string]any{"schedule": map[string]any{"cron": "61 * * * *"}}), "inputs.backup.schedule.cron: "},
		{"a bad zone", vol("db", map[string]any{"schedule": map[string]any{"cron": "0 3 * * *", "timezone": "Nowhere/Land"}}), "inputs.backup.schedule.timezone: "},
		{"concurrency", vol("db", map[string]any{"schedule": map[string]any{"every": "1h", "concurrency": "allow"}}), "inputs.backup.schedule.concurrency: a backup schedule has no concurrency"},
		{"keep_runs", vol("db", map[string]any{"schedule": map[string]any{"every": "1h", "keep_runs": 2}}), "inputs.backup.schedule.keep_runs: "},
		{"an unknown consistency", vol("db", map[string]any{"consistency": "freeze"}), "inputs.backup.consistency: "},
		{"an empty hook", vol("db", map[string]any{"after": []any{""}}), "inputs.backup.after: "},
		{"an unknown field", vol("db", map[string]any{"retries": 3}), `unknown field "retries"`},
	} {
		err := CheckResource(c.r, Limits{})
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: got %v, want an error naming %q", c.name, err, c.field)
		}
	}
}

// A change of a volume's backup policy is an update of the volume (its
// provider's Diff names backup) and changes no input of any egg: no egg's
// spec hash moves, so nothing rolls for it.
func TestABackupPolicyChangeUpdatesTheVolumeAndNoEgg(t *testing.T) {
	before, err := parse(backupHead + "    backup: {schedule: {every: 6h}, keep: 7}\n")
	if err != nil {
		t.Fatal(err)
	}
	after, err := parse(backupHead + "    backup:\n      schedule: {cron: \"0 3 * * *\"}\n      keep: 30\n      before: [sync]\n")
	if err != nil {
		t.Fatal(err)
	}
	none, err := parse(backupHead + "    labels: {}\n")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := before.Resources()
	for _, next := range []*Project{after, none} {
		b, _ := next.Resources()
		if got := reconciler.DiffInputs(find(t, a, resource.Volume, "data").Inputs, find(t, b, resource.Volume, "data").Inputs); !reflect.DeepEqual(got, []string{"backup"}) {
			t.Errorf("the volume's changed inputs are %v, want [backup]", got)
		}
		if got := reconciler.DiffInputs(find(t, a, resource.Egg, "db").Inputs, find(t, b, resource.Egg, "db").Inputs); len(got) != 0 {
			t.Errorf("the egg's inputs changed (%v): a backup policy must not roll the egg", got)
		}
	}
}

func TestMarshalRoundTripsABackup(t *testing.T) {
	src := backupHead + "    labels: {tier: db}\n    backup:\n      schedule: {every: 6h, starting_deadline: 10m}\n      keep: 14\n      before: [sh, -c, \"echo $${HOME}\"]\n      consistency: hooks\n" +
		"  cache:\n    backup: {}\n"
	src = strings.Replace(src, "volumes: [\"data:/var/lib/postgresql/data\"]", "volumes: [\"data:/var/lib/postgresql/data\", \"cache:/cache\"]", 1)
	p, err := parse(src)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	back, err := parse(string(out))
	if err != nil {
		t.Fatalf("Marshal's output does not parse: %v\n%s", err, out)
	}
	for i := range p.Volumes {
		if !reflect.DeepEqual(p.Volumes[i].Backup, back.Volumes[i].Backup) {
			t.Errorf("volume %s: backup %+v after the round trip, want %+v\n%s", p.Volumes[i].Name, back.Volumes[i].Backup, p.Volumes[i].Backup, out)
		}
	}
	if !strings.Contains(string(out), "backup: {}") {
		t.Errorf("an empty policy is not written as backup: {}:\n%s", out)
	}
	// A literal "${" is held in the input encoding, which resolving undoes.
	if got := p.Volumes[1].Backup.Before[2]; got != escape("echo ${HOME}") {
		t.Errorf("before[2] is held as %q, want %q", got, escape("echo ${HOME}"))
	}
}

func find(t *testing.T, rs []*resource.Desired, typ resource.Kind, name string) *resource.Desired {
	t.Helper()
	for _, r := range rs {
		if r.Type == typ && r.Name == name {
			return r
		}
	}
	t.Fatalf("no %s/%s in %v", typ, name, rs)
	return nil
}

func TestParseRefusesBackupHooksWithoutARunningContainer(t *testing.T) {
	src := "project: shop\neggs:\n  job:\n    image: busybox\n    volumes: [\"data:/data\"]\n    schedule: {every: 1h}\nvolumes:\n  data:\n    backup:\n      before: [sync]\n"
	_, err := parse(src)
	var perr *Error
	if !errors.As(err, &perr) {
		t.Fatalf("Parse = %v, want an *Error", err)
	}
	checkDiagnostics(t, src, perr.Errors, []want{{"backup:", []string{"volumes.data.backup", `egg "job", which runs on a schedule`}}})

	cold := strings.Replace(backupHead, "    image: postgres:16\n", "    image: postgres:16\n    replicas: 0\n", 1) + "    backup: {before: [sync]}\n"
	p, err := parse(cold)
	if err != nil {
		t.Fatalf("a cold egg's hooks refused: %v", err)
	}
	checkDiagnostics(t, cold, p.Warnings, []want{{"backup:", []string{"replicas: 0", "fail until it runs"}}})
}
