package sqlstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

// VolumeTasks keeps the volumes' backups and restores (store.VolumeTasks).
type VolumeTasks struct{ base }

var _ store.VolumeTasks = (*VolumeTasks)(nil)

const volumeTaskColumns = `id, kind, project, volume, host, task_trigger, actor, scheduled_at, created_at, delivered_at,
	started_at, ended_at, state, phase, manifest, backup, target, consistency, bytes, chunks, new_chunks, sent_bytes,
	stored_bytes, output, error, released_at, forgotten_at`

// CreateVolumeTask records t, and tick's last tick, in one transaction.
func (s *VolumeTasks) CreateVolumeTask(ctx context.Context, t store.VolumeTask, tick *store.ScheduleState) error {
	err := s.write(ctx, func(tx Tx) error {
		if tick != nil {
			n, err := tx.Exec(ctx, `UPDATE volume_schedules SET last_tick = $3, updated_at = $4
				WHERE project = $1 AND volume = $2 AND last_tick < $3`,
				tick.Project, tick.Egg, Millis(tick.LastTick), Millis(tick.UpdatedAt))
			if err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("the backup ticks of %s volume %s up to %s: %w", tick.Project, tick.Egg,
					tick.LastTick.Format(time.RFC3339Nano), store.ErrExists)
			}
		}
		n, err := tx.Exec(ctx, `INSERT INTO volume_tasks (`+volumeTaskColumns+`) VALUES
			($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27)
			ON CONFLICT DO NOTHING`,
			t.ID, t.Kind, t.Project, t.Volume, t.Host, t.Trigger, t.Actor, Millis(t.ScheduledAt), Millis(t.CreatedAt),
			Millis(t.DeliveredAt), Millis(t.StartedAt), Millis(t.EndedAt), t.State, t.Phase, t.Manifest, t.Backup, t.Target,
			t.Consistency, t.Bytes, t.Chunks, t.NewChunks, t.SentBytes, t.StoredBytes, s.d.StorableText(t.Output),
			s.d.StorableText(t.Error), Millis(t.ReleasedAt), Millis(t.ForgottenAt))
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("volume task %s (%s volume %s, tick %s): %w", t.ID, t.Project, t.Volume,
				t.ScheduledAt.Format(time.RFC3339Nano), store.ErrExists)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record volume task: %w", err)
	}
	return nil
}

// VolumeTask returns one task.
func (s *VolumeTasks) VolumeTask(ctx context.Context, id string) (store.VolumeTask, error) {
	t, err := scanVolumeTask(s.db.QueryRow(ctx, `SELECT `+volumeTaskColumns+` FROM volume_tasks WHERE id = $1`, id))
	if err != nil {
		return store.VolumeTask{}, notFound(err, "volume task "+id)
	}
	return t, nil
}

// ListVolumeTasks returns the tasks f selects, newest first.
func (s *VolumeTasks) ListVolumeTasks(ctx context.Context, f store.VolumeTaskFilter) ([]store.VolumeTask, error) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if f.Project != "" {
		where = append(where, "project = "+arg(f.Project))
	}
	if f.Volume != "" {
		where = append(where, "volume = "+arg(f.Volume))
	}
	if f.Kind != "" {
		where = append(where, "kind = "+arg(f.Kind))
	}
	if f.Unreleased {
		where = append(where, "released_at = 0")
	}
	if !f.Forgotten {
		where = append(where, "forgotten_at = 0")
	}
	q := `SELECT ` + volumeTaskColumns + ` FROM volume_tasks`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY created_at DESC, id DESC`
	if f.Limit > 0 {
		q += ` LIMIT ` + arg(f.Limit)
	}
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list volume tasks: %w", err)
	}
	out, err := collect(rows, scanVolumeTask)
	if err != nil {
		return nil, fmt.Errorf("list volume tasks: %w", err)
	}
	return out, nil
}

// DeliverVolumeTask records the task's delivery, once.
func (s *VolumeTasks) DeliverVolumeTask(ctx context.Context, id, host string, at time.Time) error {
	_, err := s.change(ctx, "deliver volume task "+id, `UPDATE volume_tasks SET host = $2, delivered_at = $3
		WHERE id = $1 AND delivered_at = 0`, id, host, Millis(at))
	return err
}

// RecordVolumeTaskProgress records what became of a task that has not ended.
func (s *VolumeTasks) RecordVolumeTaskProgress(ctx context.Context, id string, p store.VolumeTaskProgress) (bool, error) {
	return s.change(ctx, "record progress of volume task "+id, `UPDATE volume_tasks SET state = $2, phase = $3,
			started_at = CASE WHEN CAST($4 AS bigint) <> 0 THEN CAST($4 AS bigint) ELSE started_at END,
			ended_at = $5, manifest = $6, bytes = $7, chunks = $8, new_chunks = $9, sent_bytes = $10, stored_bytes = $11,
			output = $12, error = $13
		WHERE id = $1 AND state IN ('`+store.TaskPending+`', '`+store.TaskRunning+`')
			AND NOT (state = $2 AND phase = $3 AND started_at = $4 AND ended_at = $5 AND manifest = $6 AND bytes = $7
				AND chunks = $8 AND new_chunks = $9 AND sent_bytes = $10 AND stored_bytes = $11 AND output = $12 AND error = $13)`,
		id, p.State, p.Phase, Millis(p.StartedAt), Millis(p.EndedAt), p.Manifest, p.Bytes, p.Chunks, p.NewChunks,
		p.SentBytes, p.StoredBytes, s.d.StorableText(p.Output), s.d.StorableText(p.Error))
}

// ReleaseVolumeTask records that the task left its host's desired state.
func (s *VolumeTasks) ReleaseVolumeTask(ctx context.Context, id string, at time.Time) error {
	_, err := s.change(ctx, "release volume task "+id, `UPDATE volume_tasks SET released_at = $2
		WHERE id = $1 AND released_at = 0`, id, Millis(at))
	return err
}

// ForgetVolumeTask marks a backup forgotten.
func (s *VolumeTasks) ForgetVolumeTask(ctx context.Context, id string, at time.Time) (bool, error) {
	return s.change(ctx, "forget backup "+id, `UPDATE volume_tasks SET forgotten_at = $2
		WHERE id = $1 AND forgotten_at = 0`, id, Millis(at))
}

// change runs one statement on a task (its ID the first argument) and
// reports whether it changed it; an unknown task gives ErrNotFound.
func (s *VolumeTasks) change(ctx context.Context, what, sql string, args ...any) (bool, error) {
	changed := false
	err := s.write(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, sql, args...)
		if changed = n > 0; err != nil || changed {
			return err
		}
		var one int
		return notFound(tx.QueryRow(ctx, `SELECT 1 FROM volume_tasks WHERE id = $1`, args[0]).Scan(&one), "volume task "+args[0].(string))
	})
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	return changed, nil
}

func scanVolumeTask(row Row) (store.VolumeTask, error) {
	var t store.VolumeTask
	var scheduled, created, delivered, started, ended, released, forgotten int64
	err := row.Scan(&t.ID, &t.Kind, &t.Project, &t.Volume, &t.Host, &t.Trigger, &t.Actor, &scheduled, &created, &delivered,
		&started, &ended, &t.State, &t.Phase, &t.Manifest, &t.Backup, &t.Target, &t.Consistency, &t.Bytes, &t.Chunks,
		&t.NewChunks, &t.SentBytes, &t.StoredBytes, &t.Output, &t.Error, &released, &forgotten)
	if err != nil {
		return store.VolumeTask{}, err
	}
	t.ScheduledAt, t.CreatedAt, t.DeliveredAt = FromMillis(scheduled), FromMillis(created), FromMillis(delivered)
	t.StartedAt, t.EndedAt = FromMillis(started), FromMillis(ended)
	t.ReleasedAt, t.ForgottenAt = FromMillis(released), FromMillis(forgotten)
	return t, nil
}

// ListVolumeSchedules returns the volumes' schedule states.
func (s *VolumeTasks) ListVolumeSchedules(ctx context.Context) ([]store.ScheduleState, error) {
	rows, err := s.db.Query(ctx, `SELECT project, volume, last_tick, updated_at FROM volume_schedules
		ORDER BY project`+s.d.ByteOrder+`, volume`+s.d.ByteOrder)
	if err != nil {
		return nil, fmt.Errorf("volume schedules: %w", err)
	}
	out, err := collect(rows, func(row Row) (store.ScheduleState, error) {
		var st store.ScheduleState
		var last, updated int64
		err := row.Scan(&st.Project, &st.Egg, &last, &updated)
		st.LastTick, st.UpdatedAt = FromMillis(last), FromMillis(updated)
		return st, err
	})
	if err != nil {
		return nil, fmt.Errorf("volume schedules: %w", err)
	}
	return out, nil
}

// InitVolumeSchedule records st unless its volume has a state.
func (s *VolumeTasks) InitVolumeSchedule(ctx context.Context, st store.ScheduleState) (bool, error) {
	recorded := false
	err := s.write(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, `INSERT INTO volume_schedules (project, volume, last_tick, updated_at)
			VALUES ($1, $2, $3, $4) ON CONFLICT (project, volume) DO NOTHING`,
			st.Project, st.Egg, Millis(st.LastTick), Millis(st.UpdatedAt))
		recorded = n > 0
		return err
	})
	if err != nil {
		return false, fmt.Errorf("schedule state of %s volume %s: %w", st.Project, st.Egg, err)
	}
	return recorded, nil
}
