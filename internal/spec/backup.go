package spec

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/schedule"
)

// A volume's backup block (docs/BACKUPS.md):
//
//	volumes:
//	  data:
//	    backup:
//	      schedule: {every: 6h}      # or {cron: "0 3 * * *", timezone: Europe/Berlin}
//	      keep: 14
//	      before: [kv, -checkpoint]  # in the egg's running container, before the copy
//	      after: [kv, -resume]       # always, after it
//	      consistency: hooks         # or stop
//
// The loader and CheckResource apply the same rules (BackupErrors), so a
// policy sent to the API is refused as a file's would be.

// MinBackupEvery is the shortest interval of a backup schedule: a cron
// schedule fires at most once a minute, and every may not be shorter.
const MinBackupEvery = time.Minute

// backupFields are the settings of a volume's backup block.
var backupFields = []string{"schedule", "keep", "before", "after", "consistency"}

// notForBackups are the schedule settings of a job that a backup schedule
// has no use for, with why. starting_deadline keeps its meaning (a tick
// later than it is recorded as missed).
var notForBackups = []struct{ field, why string }{
	{"concurrency", "backups of a volume are never run twice at once: a tick while one runs is skipped"},
	{"timeout", "a backup is never stopped halfway: it ends when its copy does"},
	{"keep_runs", "a backup leaves no container behind; keep: says how many backups are kept"},
}

// notForBackup says why a schedule setting has no place in a backup's.
func notForBackup(field string) (string, bool) {
	for _, f := range notForBackups {
		if f.field == field {
			return f.why, true
		}
	}
	return "", false
}

// BackupError is one problem of a backup policy: Field is the key at fault
// under backup ("keep", "schedule.every", "before").
type BackupError struct {
	Field  string
	Reason string
}

func (e *BackupError) Error() string { return e.Field + ": " + e.Reason }

// BackupErrors checks a volume's backup policy as inputs.VolumeBackup holds
// it (a Keep of 0 is the default, DefaultBackupKeep). It is the one place
// those rules are decided, for the loader and for CheckResource.
func BackupErrors(b inputs.VolumeBackup) []*BackupError {
	var errs []*BackupError
	bad := func(field, format string, args ...any) {
		errs = append(errs, &BackupError{field, fmt.Sprintf(format, args...)})
	}
	if s := b.Schedule; s != nil {
		has := map[string]bool{"concurrency": s.Concurrency != "", "timeout": s.Timeout != "", "keep_runs": s.KeepRuns != 0}
		for _, f := range notForBackups {
			if has[f.field] {
				bad("schedule."+f.field, "a backup schedule has no %s, since %s: remove it", f.field, f.why)
			}
		}
		rules := *s
		rules.Concurrency, rules.Timeout, rules.KeepRuns = "", "", 0
		sch, _, err := schedule.FromInputs(rules)
		for _, fe := range schedule.FieldErrors(err) {
			bad("schedule."+fe.Field, "%s", fe.Reason)
		}
		if err == nil && s.Every != "" && sch.Interval() < MinBackupEvery {
			bad("schedule.every", "%s is more often than every %s, the shortest backup interval: write every: 1m or more", s.Every, formatDuration(MinBackupEvery))
		}
	}
	if b.Keep < 0 {
		bad("keep", "%d: keep at least 1 backup (default %d)", b.Keep, inputs.DefaultBackupKeep)
	}
	for _, h := range []struct {
		field string
		cmd   []string
	}{{"before", b.Before}, {"after", b.After}} {
		if len(h.cmd) > 0 && h.cmd[0] == "" {
			bad(h.field, "the command is empty: write it as a list, for example [pg_dump, -f, /data/dump.sql]")
		}
	}
	switch b.Consistency {
	case "", contract.ConsistencyHooks:
	case contract.ConsistencyStop:
		if len(b.Before) > 0 || len(b.After) > 0 {
			bad("consistency", "stop stops the egg for the copy, and before/after run in its running container: remove before and after, or write consistency: hooks")
		}
	default:
		bad("consistency", "%q is not hooks (the egg keeps running; before and after make the copy consistent) or stop (the egg is stopped for the copy)", b.Consistency)
	}
	return errs
}

// checkBackupInputs is BackupErrors for CheckResource: each problem as an
// *InputError naming inputs.backup.<field>.
func checkBackupInputs(egg string, b *inputs.VolumeBackup) error {
	if b == nil {
		return nil
	}
	var errs []error
	if egg == "" {
		errs = append(errs, &InputError{"inputs.backup", "no egg mounts the volume, so there is nothing to back up (and no container for the hooks): mount it in an egg, or remove backup"})
	}
	for _, e := range BackupErrors(*b) {
		errs = append(errs, &InputError{"inputs.backup." + e.Field, e.Reason})
	}
	return errors.Join(errs...)
}

// backup reads a volume's backup block. Each problem is reported at the
// line of the key at fault, with its path (volumes.data.backup.keep).
func (d *decoder) backup(v *Volume, g field) {
	what := fmt.Sprintf("volumes.%s.backup", v.Name)
	b := &inputs.VolumeBackup{}
	lines := map[string]int{"": g.Line}
	failed := map[string]bool{} // the fields reported already: the rules would only guess at them
	for _, f := range d.fields(g.Value, what, backupFields...) {
		lines[f.Key] = f.Line
		w := what + "." + f.Key
		var fieldOK bool
		switch f.Key {
		case "schedule":
			b.Schedule, fieldOK = d.backupSchedule(f, w, lines)
		case "keep":
			b.Keep, fieldOK = d.integer(f.Value, w, 1, math.MaxInt32)
		case "before", "after":
			var cmd []string
			if n := resolve(f.Value); n.Kind == yaml.ScalarNode && !isNull(n) {
				d.errorf(f.Line, "%s must be a list, one element per argument, for example [pg_dump, -f, /data/dump.sql]; for a shell line write [sh, -c, \"...\"]", w)
				break
			}
			cmd, fieldOK = d.textList(f.Value, w, "[pg_dump, -f, /data/dump.sql]", nil)
			if f.Key == "before" {
				b.Before = cmd
			} else {
				b.After = cmd
			}
		case "consistency":
			b.Consistency, fieldOK = d.plain(f.Value, w)
		}
		if !fieldOK {
			failed[f.Key] = true
		}
	}
	v.Backup = b
	for _, e := range BackupErrors(*b) {
		if top, _, _ := strings.Cut(e.Field, "."); failed[top] {
			continue
		}
		line := lines[e.Field]
		if line == 0 && strings.HasPrefix(e.Field, "schedule.") {
			line = lines["schedule"] // a field it lacks ("needs cron")
		}
		if line == 0 {
			line = g.Line
		}
		d.errorf(line, "%s.%s: %s", what, e.Field, e.Reason)
	}
}

// backupSchedule reads a backup's schedule, in the syntax of an egg's;
// BackupErrors says what of it a backup refuses.
func (d *decoder) backupSchedule(g field, what string, lines map[string]int) (*inputs.Schedule, bool) {
	s := &inputs.Schedule{}
	ok := true
	n := resolve(g.Value)
	if isNull(n) {
		d.errorf(g.Line, `%s is empty: write {every: 6h} or {cron: "0 3 * * *", timezone: Europe/Berlin}, or remove it for backups by hand only`, what)
		return nil, false
	}
	for _, f := range d.fields(n, what, scheduleFields...) {
		lines["schedule."+f.Key] = f.Line
		w := what + "." + f.Key
		if why, refused := notForBackup(f.Key); refused {
			d.errorf(f.Line, "%s: a backup schedule has no %s, since %s: remove it", w, f.Key, why)
			continue // reported; the rest of the schedule is still checked
		}
		var fieldOK bool
		switch f.Key {
		case "cron":
			s.Cron, fieldOK = d.plain(f.Value, w)
		case "timezone":
			s.Timezone, fieldOK = d.plain(f.Value, w)
		case "every", "starting_deadline":
			var dur time.Duration
			if dur, fieldOK = d.duration(f.Value, w, math.MinInt64); fieldOK {
				if f.Key == "every" {
					s.Every = formatDuration(dur)
				} else {
					s.StartingDeadline = formatDuration(dur)
				}
			}
		}
		ok = ok && fieldOK
	}
	return s, ok
}

// backupNode writes a volume's backup block, its fields in the order of
// backupFields.
func backupNode(b *inputs.VolumeBackup) *yaml.Node {
	m := mapping(false)
	if b.Schedule != nil {
		add(m, "schedule", scheduleNode(b.Schedule))
	}
	if b.Keep != 0 {
		add(m, "keep", integer(b.Keep))
	}
	if len(b.Before) > 0 {
		add(m, "before", texts(b.Before))
	}
	if len(b.After) > 0 {
		add(m, "after", texts(b.After))
	}
	if b.Consistency != "" {
		add(m, "consistency", str(literal(b.Consistency)))
	}
	if len(m.Content) == 0 {
		m.Style = yaml.FlowStyle // backup: {}, backups by hand only
	}
	return m
}
