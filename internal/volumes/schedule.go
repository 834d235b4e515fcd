package volumes

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/jobs"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/schedule"
	"github.com/hatchery/hatchery/internal/store"
)

// The volumes' backup schedules are a jobs.Source of the one scheduler:
// it decides when a tick is due (on the loops' holder only), and the
// service records it in its own table (jobs.Ticks). A tick is a backup
// recorded pending, which the service's loop delivers; a tick while the
// volume's previous task is still open is recorded skipped (a backup
// never runs twice at once), and ticks past their starting deadline one
// task recorded missed.

var (
	_ jobs.Source = (*Service)(nil)
	_ jobs.Ticks  = (*Service)(nil)
)

// Scheduled returns the volumes of project ("" for all) whose backup
// policy has a schedule. One whose schedule does not parse (stored before
// a check refused it) is logged and left out.
func (s *Service) Scheduled(ctx context.Context, project string) ([]jobs.Scheduled, error) {
	projects := []string{project}
	if project == "" {
		var err error
		if projects, err = s.deps.Records.ListProjects(ctx); err != nil {
			return nil, err
		}
	}
	var out []jobs.Scheduled
	for _, p := range projects {
		recs, err := s.deps.Records.ListResources(ctx, p)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			if r.Type != resource.Volume || r.Pending {
				continue
			}
			in, err := inputs.Decode[inputs.Volume](r.Inputs)
			if err != nil || in.Backup == nil || in.Backup.Schedule == nil {
				continue
			}
			timer, rules, err := schedule.FromInputs(*in.Backup.Schedule)
			if err != nil {
				s.log.Warn("a volume's backup schedule is unreadable: no scheduled backups", zap.String("project", p),
					zap.String("volume", r.Name), zap.Error(err))
				continue
			}
			out = append(out, jobs.Scheduled{Project: p, Egg: r.Name, Timer: timer, Rules: rules, Ticks: s})
		}
	}
	return out, nil
}

// ScheduleStates returns the volumes' schedule states by "project volume".
func (s *Service) ScheduleStates(ctx context.Context) (map[string]store.ScheduleState, error) {
	list, err := s.deps.Tasks.ListVolumeSchedules(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]store.ScheduleState, len(list))
	for _, st := range list {
		out[st.Project+" "+st.Egg] = st
	}
	return out, nil
}

// InitSchedule records a volume schedule's first state.
func (s *Service) InitSchedule(ctx context.Context, st store.ScheduleState) (bool, error) {
	return s.deps.Tasks.InitVolumeSchedule(ctx, st)
}

// DecideTicks records the due ticks of one volume's backup schedule.
func (s *Service) DecideTicks(ctx context.Context, sc jobs.Scheduled, st store.ScheduleState, now, began time.Time) error {
	open, err := s.openTasks(ctx, sc.Project, sc.Egg)
	if err != nil {
		return err
	}
	if now.Sub(began) < jobs.HearFirst {
		// An open task's host not heard since the scheduler began may have
		// ended it meanwhile: decide once it is heard (or lost).
		for _, t := range open {
			if t.DeliveredAt.IsZero() {
				continue
			}
			hs, err := s.deps.Hosts.Status(ctx, t.Host)
			if errors.Is(err, store.ErrNotFound) || err == nil && hs.ReceivedAt.Before(began) {
				return nil
			}
			if err != nil {
				return err
			}
		}
	}
	due, missed, lastMissed := sc.Timer.Due(st.LastTick, now, sc.Rules.StartingDeadline)
	var tasks []store.VolumeTask
	task := func(tick time.Time, trigger, state string) store.VolumeTask {
		t := store.VolumeTask{ID: newID(), Kind: string(contract.TaskBackup), Project: sc.Project, Volume: sc.Egg, Trigger: trigger,
			ScheduledAt: tick, CreatedAt: now, State: state}
		if store.TaskEnded(state) {
			t.EndedAt, t.ReleasedAt = now, now
		}
		return t
	}
	if missed > 0 {
		m := task(lastMissed, api.TriggerMissed, store.TaskMissed)
		m.Error = fmt.Sprintf("%d ticks missed while no server ran the scheduler, the last at %s", missed, lastMissed.Format(time.RFC3339))
		tasks = append(tasks, m)
	}
	running := len(open) > 0
	var v volume
	if len(due) > 0 && !running {
		if v, err = s.volumeRecord(ctx, sc.Project, sc.Egg); err != nil {
			return err
		}
	}
	for i, tick := range due {
		trigger := api.TriggerSchedule
		if i < len(due)-1 || now.Sub(tick) > 2*time.Second {
			trigger = api.TriggerMissed // a catch-up of a tick the control plane was away for
		}
		switch {
		case running:
			t := task(tick, trigger, store.TaskSkipped)
			t.Error = "the volume's previous backup was still in progress"
			tasks = append(tasks, t)
		case v.host == "":
			t := task(tick, trigger, store.TaskFailed)
			t.Error = "the volume has no host yet"
			tasks = append(tasks, t)
		default:
			t := task(tick, trigger, store.TaskPending)
			t.Host, t.Consistency = v.host, v.consistency()
			tasks = append(tasks, t)
			running = true
		}
	}
	for _, t := range tasks {
		err := s.deps.Tasks.CreateVolumeTask(ctx, t, &store.ScheduleState{Project: sc.Project, Egg: sc.Egg, LastTick: t.ScheduledAt, UpdatedAt: now})
		if errors.Is(err, store.ErrExists) {
			s.log.Info("backup ticks decided already (by another pass or server)", zap.String("project", sc.Project),
				zap.String("volume", sc.Egg), zap.Error(err))
			return nil
		}
		if err != nil {
			return err
		}
		s.log.Info("backup tick recorded", zap.String("project", t.Project), zap.String("volume", t.Volume), zap.String("task", t.ID),
			zap.String("state", t.State), zap.Time("tick", t.ScheduledAt))
		if t.State == store.TaskFailed || t.State == store.TaskMissed {
			s.endEvent(ctx, store.VolumeTask{ID: t.ID, Kind: t.Kind, Project: t.Project, Volume: t.Volume, State: store.TaskFailed, Error: t.Error})
		}
	}
	return nil
}
