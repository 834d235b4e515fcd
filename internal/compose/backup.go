package compose

import (
	"fmt"
	"strings"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/hatchery/hatchery/internal/resource/inputs"
)

// volumeExtension reads a top-level volume's x-hatch: its backup policy,
// hatch.yaml's volumes.<name>.backup block:
//
//	volumes:
//	  data:
//	    x-hatch:
//	      backup: {schedule: {every: 6h}, keep: 14, before: [sync], consistency: hooks}
//
// Its values are taken as written; spec's parse of the converted file checks
// them (a bad cron, keep: 0, a schedule more often than every minute), at
// this setting's line.
func (m *mapper) volumeExtension(name string, v types.VolumeConfig) *inputs.VolumeBackup {
	raw, ok := v.Extensions["x-hatch"]
	if !ok || raw == nil {
		return nil
	}
	at := []string{"volumes", name, "x-hatch"}
	what := fmt.Sprintf("volume %q x-hatch", name)
	ext, ok := raw.(map[string]any)
	if !ok {
		m.errorf(at, "%s must be a mapping, for example {backup: {schedule: {every: 6h}, keep: 14}}", what)
		return nil
	}
	var b *inputs.VolumeBackup
	for _, k := range sortedKeys(ext) {
		if k != "backup" {
			m.errorf(append(at, k), "%s: unknown key %q: a volume's x-hatch has backup", what, k)
			continue
		}
		b = m.backup(append(at, "backup"), what+".backup", ext[k])
	}
	return b
}

// backup reads x-hatch.backup of a volume.
func (m *mapper) backup(at []string, what string, raw any) *inputs.VolumeBackup {
	b := &inputs.VolumeBackup{}
	if raw == nil {
		return b // backup: {} or empty: by hand only
	}
	obj, ok := raw.(map[string]any)
	if !ok {
		m.errorf(at, "%s must be a mapping, for example {schedule: {every: 6h}, keep: 14}", what)
		return nil
	}
	for _, k := range sortedKeys(obj) {
		value, here := obj[k], append(append([]string{}, at...), k)
		switch k {
		case "schedule":
			b.Schedule = m.backupSchedule(here, what+".schedule", value)
		case "keep":
			n, isInt := value.(int)
			if !isInt || n < 1 {
				m.errorf(here, "%s.keep: %v must be a whole number of backups, at least 1", what, value)
				continue
			}
			b.Keep = n
		case "before", "after":
			cmd, ok := hook(value)
			if !ok {
				m.errorf(here, "%s.%s must be a list, one element per argument, for example [pg_dump, -f, /data/dump.sql]", what, k)
				continue
			}
			if k == "before" {
				b.Before = cmd
			} else {
				b.After = cmd
			}
		case "consistency":
			s, isString := value.(string)
			if !isString {
				m.errorf(here, "%s.consistency: %v must be hooks or stop", what, value)
				continue
			}
			b.Consistency = s
		default:
			m.errorf(here, "%s: unknown key %q: a backup has schedule, keep, before, after and consistency", what, k)
		}
	}
	return b
}

// hook reads a before or after command: a list of single values, each held
// as a literal (a "${" in it is no reference).
func hook(value any) ([]string, bool) {
	list, ok := value.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(list))
	for _, item := range list {
		switch item.(type) {
		case string, int, float64, bool:
			out = append(out, literal(fmt.Sprint(item)))
		default:
			return nil, false
		}
	}
	return out, true
}

// backupSchedule reads a backup's schedule as x-hatch.schedule reads a
// service's; the keys a backup refuses (concurrency, timeout, keep_runs)
// pass through to spec's checks, which say why.
func (m *mapper) backupSchedule(at []string, what string, value any) *inputs.Schedule {
	obj, ok := value.(map[string]any)
	if !ok {
		m.errorf(at, `%s must be a mapping: {cron: "0 3 * * *", timezone: Europe/Berlin} or {every: 6h}`, what)
		return nil
	}
	s := &inputs.Schedule{}
	for _, k := range sortedKeys(obj) {
		v := obj[k]
		if k == "keep_runs" {
			n, isInt := v.(int)
			if !isInt {
				m.errorf(append(at, k), "%s: keep_runs: %v must be a whole number", what, v)
				continue
			}
			s.KeepRuns = n
			continue
		}
		field, known := scheduleKeys[k]
		if !known {
			m.errorf(append(at, k), "%s: unknown key %q: a schedule has %s", what, k, strings.Join(sortedKeys(scheduleKeys), ", "))
			continue
		}
		switch v.(type) {
		case string, int, float64, bool:
			*field(s) = fmt.Sprint(v)
		default:
			m.errorf(append(at, k), "%s: %s: %v must be a single value", what, k, v)
		}
	}
	return s
}
