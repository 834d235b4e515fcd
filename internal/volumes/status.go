package volumes

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/jobs"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/schedule"
	"github.com/hatchery/hatchery/internal/store"
)

// backupFacts is what a volume's warning is worked out from: kept apart
// from the store so that the time-based logic is pure and tested with a
// fixed clock.
type backupFacts struct {
	// lastGood is when its newest good backup ended (zero: none).
	lastGood time.Time
	// lastEnded is its newest ended backup (done, failed or lost; its
	// State is "" when none ended).
	lastEnded store.VolumeTask
	// interval is its schedule's interval (0: not scheduled), firstTick the
	// schedule's first tick, the reference of a volume never backed up.
	interval  time.Duration
	firstTick time.Time
}

// backupWarning says what is wrong with a volume's backups at now, "" when
// nothing is: a newest ended backup that failed or was lost, or a
// scheduled volume whose last good backup (or, never backed up, its
// schedule's first tick) is older than twice its interval.
func backupWarning(now time.Time, f backupFacts) string {
	switch f.lastEnded.State {
	case store.TaskFailed, store.TaskLost:
		reason := f.lastEnded.Error
		if reason == "" {
			reason = f.lastEnded.State
		}
		return fmt.Sprintf("last backup failed at %s: %s", f.lastEnded.EndedAt.UTC().Format(time.RFC3339), reason)
	}
	if f.interval <= 0 {
		return ""
	}
	ref := f.lastGood
	if ref.IsZero() {
		ref = f.firstTick
	}
	if ref.IsZero() || now.Sub(ref) <= 2*f.interval {
		return ""
	}
	age := now.Sub(ref).Round(time.Minute)
	if f.lastGood.IsZero() {
		return fmt.Sprintf("no good backup since the schedule's first tick %s ago, more than twice its schedule's interval (%s)",
			schedule.FormatDuration(age), schedule.FormatDuration(f.interval))
	}
	return fmt.Sprintf("last good backup is %s old, more than twice its schedule's interval (%s)",
		schedule.FormatDuration(age), schedule.FormatDuration(f.interval))
}

// intervaled is a timer that knows its interval (schedule.Schedule).
type intervaled interface{ Interval() time.Duration }

// BackupStates returns where the backups of each of the project's
// volumes stand, by name, with a warning for those that failed or fell
// behind (hatch status).
func (s *Service) BackupStates(ctx context.Context, project string) ([]api.VolumeBackupState, error) {
	recs, err := s.deps.Records.ListResources(ctx, project)
	if err != nil {
		return nil, fmt.Errorf("project %s's volumes: %w", project, err)
	}
	tasks, err := s.deps.Tasks.ListVolumeTasks(ctx, store.VolumeTaskFilter{Project: project, Kind: string(contract.TaskBackup), Forgotten: true})
	if err != nil {
		return nil, fmt.Errorf("project %s's backups: %w", project, err)
	}
	scheduled, err := s.Scheduled(ctx, project)
	if err != nil {
		return nil, err
	}
	states, err := s.ScheduleStates(ctx)
	if err != nil {
		return nil, err
	}
	stale, err := s.deps.Desired.StaleCopies(ctx, project)
	if err != nil {
		return nil, err
	}
	names, err := s.hostNames(ctx)
	if err != nil {
		return nil, err
	}
	now := s.deps.Now()
	out := []api.VolumeBackupState{}
	for _, r := range recs {
		if r.Type != resource.Volume || r.Pending {
			continue
		}
		st := api.VolumeBackupState{Name: r.Name}
		var f backupFacts
		var firstScheduled time.Time
		for _, t := range tasks { // newest first
			if t.Volume != r.Name {
				continue
			}
			if !t.ScheduledAt.IsZero() && (firstScheduled.IsZero() || t.ScheduledAt.Before(firstScheduled)) {
				firstScheduled = t.ScheduledAt
			}
			switch t.State {
			case store.TaskDone:
				if f.lastGood.IsZero() {
					f.lastGood = t.EndedAt
				}
				fallthrough
			case store.TaskFailed, store.TaskLost:
				if f.lastEnded.State == "" {
					f.lastEnded = t
				}
			}
		}
		if i := slices.IndexFunc(scheduled, func(sc jobs.Scheduled) bool { return sc.Egg == r.Name }); i >= 0 {
			timer := scheduled[i].Timer
			st.Schedule = timer.String()
			if iv, ok := timer.(intervaled); ok {
				f.interval = iv.Interval()
			}
			f.firstTick = firstScheduled
			if ss, ok := states[project+" "+r.Name]; ok {
				if f.firstTick.IsZero() {
					f.firstTick = timer.Next(ss.LastTick)
				}
				if next := timer.Next(ss.LastTick); !next.IsZero() && !ss.Paused {
					st.NextScheduled = &next
				}
			}
		}
		if !f.lastGood.IsZero() {
			st.LastGood = &f.lastGood
		}
		if f.lastEnded.State != "" {
			st.LastOutcome, st.LastEnded = f.lastEnded.State, &f.lastEnded.EndedAt
		}
		st.Warning = backupWarning(now, f)
		if fo, ok := r.Outputs[inputs.OutputFailover].(map[string]any); ok {
			if d, err := inputs.Decode[api.VolumeFailover](fo); err == nil {
				d.FromName, d.ToName = nameOr(names, d.From), nameOr(names, d.To)
				st.Failover = &d
			}
		}
		for _, c := range stale {
			if c.Volume != r.Name {
				continue
			}
			sc := api.StaleCopy{Host: c.Host, HostName: nameOr(names, c.Host), DockerName: c.DockerName, Since: c.Since}
			if !c.Found.IsZero() {
				sc.Found = &c.Found
			}
			st.StaleCopies = append(st.StaleCopies, sc)
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b api.VolumeBackupState) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
