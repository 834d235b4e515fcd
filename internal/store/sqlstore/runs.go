package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

// Runs keeps the runs of eggs (store.Runs).
type Runs struct{ base }

var _ store.Runs = (*Runs)(nil)

const runColumns = `id, project, egg, host, run_trigger, actor, scheduled_at, created_at, delivered_at, delay_ms,
	started_at, ended_at, state, exit_code, error, kept, command, timeout_ms, stop_requested, stop_egg, missed, released_at, tty`

// CreateRuns records runs, and tick's last tick, in one transaction.
func (s *Runs) CreateRuns(ctx context.Context, runs []store.Run, tick *store.ScheduleState) error {
	err := s.write(ctx, func(tx Tx) error {
		if tick != nil {
			n, err := tx.Exec(ctx, `UPDATE schedule_states SET last_tick = $3, updated_at = $4
				WHERE project = $1 AND egg = $2 AND last_tick < $3`,
				tick.Project, tick.Egg, Millis(tick.LastTick), Millis(tick.UpdatedAt))
			if err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("the ticks of %s/%s up to %s: %w", tick.Project, tick.Egg, tick.LastTick.Format(time.RFC3339Nano), store.ErrExists)
			}
		}
		for _, r := range runs {
			cmd, err := json.Marshal(r.Command)
			if err != nil {
				return err
			}
			n, err := tx.Exec(ctx, `INSERT INTO runs (`+runColumns+`) VALUES
				($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23)
				ON CONFLICT DO NOTHING`,
				r.ID, r.Project, r.Egg, r.Host, r.Trigger, r.Actor, Millis(r.ScheduledAt), Millis(r.CreatedAt),
				Millis(r.DeliveredAt), r.Delay.Milliseconds(), Millis(r.StartedAt), Millis(r.EndedAt), r.State, r.ExitCode,
				s.d.StorableText(r.Error), flag(r.Kept), string(cmd), r.Timeout.Milliseconds(), flag(r.StopRequested),
				flag(r.StopEgg), r.Missed, Millis(r.ReleasedAt), flag(r.TTY))
			if err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("run %s (%s/%s, tick %s): %w", r.ID, r.Project, r.Egg, r.ScheduledAt.Format(time.RFC3339Nano), store.ErrExists)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record runs: %w", err)
	}
	return nil
}

// Run returns one run.
func (s *Runs) Run(ctx context.Context, id string) (store.Run, error) {
	r, err := scanRun(s.db.QueryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE id = $1`, id))
	if err != nil {
		return store.Run{}, notFound(err, "run "+id)
	}
	return r, nil
}

// ListRuns returns the runs f selects, newest first.
func (s *Runs) ListRuns(ctx context.Context, f store.RunFilter) ([]store.Run, error) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if f.Project != "" {
		where = append(where, "project = "+arg(f.Project))
	}
	if f.Egg != "" {
		where = append(where, "egg = "+arg(f.Egg))
	}
	if f.Unreleased {
		where = append(where, "released_at = 0")
	}
	q := `SELECT ` + runColumns + ` FROM runs`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY created_at DESC, id DESC`
	if f.Limit > 0 {
		q += ` LIMIT ` + arg(f.Limit)
	}
	rows, err := s.db.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	out, err := collect(rows, scanRun)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	return out, nil
}

// DeliverRun records the run's delivery, once.
func (s *Runs) DeliverRun(ctx context.Context, id, host string, at time.Time, delay time.Duration) error {
	_, err := s.change(ctx, "deliver run "+id, `UPDATE runs SET host = $2, delivered_at = $3, delay_ms = $4
		WHERE id = $1 AND delivered_at = 0`, id, host, Millis(at), delay.Milliseconds())
	return err
}

// RecordRunProgress records what became of a run that has not ended.
func (s *Runs) RecordRunProgress(ctx context.Context, id string, p store.RunProgress) (bool, error) {
	return s.change(ctx, "record progress of run "+id, `UPDATE runs SET state = $2,
			started_at = CASE WHEN CAST($3 AS bigint) <> 0 THEN CAST($3 AS bigint) ELSE started_at END,
			ended_at = $4, exit_code = $5, error = $6
		WHERE id = $1 AND state IN ('`+store.RunPending+`', '`+store.RunRunning+`')
			AND NOT (state = $2 AND started_at = $3 AND ended_at = $4 AND exit_code = $5 AND error = $6)`,
		id, p.State, Millis(p.StartedAt), Millis(p.EndedAt), p.ExitCode, s.d.StorableText(p.Error))
}

// RequestRunStop marks the run to be stopped.
func (s *Runs) RequestRunStop(ctx context.Context, id string) (bool, error) {
	return s.change(ctx, "stop run "+id, `UPDATE runs SET stop_requested = 1 WHERE id = $1 AND stop_requested = 0`, id)
}

// SetRunKept sets whether the run's container is kept.
func (s *Runs) SetRunKept(ctx context.Context, id string, kept bool) error {
	_, err := s.change(ctx, "keep run "+id, `UPDATE runs SET kept = $2 WHERE id = $1`, id, flag(kept))
	return err
}

// ReleaseRun records that the run left its host's desired state.
func (s *Runs) ReleaseRun(ctx context.Context, id string, at time.Time) error {
	_, err := s.change(ctx, "release run "+id, `UPDATE runs SET released_at = $2 WHERE id = $1 AND released_at = 0`, id, Millis(at))
	return err
}

// PruneRuns deletes released runs' records beyond the newest keep of
// each egg.
func (s *Runs) PruneRuns(ctx context.Context, keep int) (int64, error) {
	var n int64
	err := s.write(ctx, func(tx Tx) error {
		var err error
		n, err = tx.Exec(ctx, `DELETE FROM runs WHERE released_at <> 0 AND id IN (
			SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY project, egg ORDER BY created_at DESC, id DESC) AS n
				FROM runs) ranked WHERE n > $1)`, keep)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune runs: %w", err)
	}
	return n, nil
}

// LastSuccesses returns when each egg's last run that exited 0 ended.
func (s *Runs) LastSuccesses(ctx context.Context) (map[string]map[string]time.Time, error) {
	rows, err := s.db.Query(ctx, `SELECT project, egg, MAX(ended_at) FROM runs
		WHERE state = '`+store.RunExited+`' AND exit_code = 0 AND run_trigger <> 'manual' GROUP BY project, egg`)
	if err != nil {
		return nil, fmt.Errorf("last successful runs: %w", err)
	}
	type last struct {
		project, egg string
		at           int64
	}
	list, err := collect(rows, func(row Row) (l last, err error) { return l, row.Scan(&l.project, &l.egg, &l.at) })
	if err != nil {
		return nil, fmt.Errorf("last successful runs: %w", err)
	}
	out := map[string]map[string]time.Time{}
	for _, l := range list {
		if out[l.project] == nil {
			out[l.project] = map[string]time.Time{}
		}
		out[l.project][l.egg] = FromMillis(l.at)
	}
	return out, nil
}

// change runs one statement on a run (its ID the first argument) and
// reports whether it changed it; a run that does not exist gives
// ErrNotFound, one the statement's condition left alone no change.
func (s *Runs) change(ctx context.Context, what, sql string, args ...any) (bool, error) {
	changed := false
	err := s.write(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, sql, args...)
		if changed = n > 0; err != nil || changed {
			return err
		}
		return exists(ctx, tx, args[0].(string))
	})
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	return changed, nil
}

// exists returns ErrNotFound unless the run is recorded.
func exists(ctx context.Context, tx Tx, id string) error {
	var one int
	return notFound(tx.QueryRow(ctx, `SELECT 1 FROM runs WHERE id = $1`, id).Scan(&one), "run "+id)
}

func scanRun(row Row) (store.Run, error) {
	var r store.Run
	var scheduled, created, delivered, delay, started, ended, timeout, released int64
	var kept, stop, stopEgg, tty int
	var cmd string
	err := row.Scan(&r.ID, &r.Project, &r.Egg, &r.Host, &r.Trigger, &r.Actor, &scheduled, &created, &delivered, &delay,
		&started, &ended, &r.State, &r.ExitCode, &r.Error, &kept, &cmd, &timeout, &stop, &stopEgg, &r.Missed, &released, &tty)
	if err != nil {
		return store.Run{}, err
	}
	r.ScheduledAt, r.CreatedAt, r.DeliveredAt = FromMillis(scheduled), FromMillis(created), FromMillis(delivered)
	r.StartedAt, r.EndedAt, r.ReleasedAt = FromMillis(started), FromMillis(ended), FromMillis(released)
	r.Delay, r.Timeout = time.Duration(delay)*time.Millisecond, time.Duration(timeout)*time.Millisecond
	r.Kept, r.StopRequested, r.StopEgg, r.TTY = kept != 0, stop != 0, stopEgg != 0, tty != 0
	if err := json.Unmarshal([]byte(cmd), &r.Command); err != nil {
		return store.Run{}, fmt.Errorf("run %s: command: %w", r.ID, err)
	}
	return r, nil
}

// flag is a boolean in the stored form.
func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ScheduleStates keeps the scheduled eggs' states (store.ScheduleStates).
type ScheduleStates struct{ base }

var _ store.ScheduleStates = (*ScheduleStates)(nil)

// ListScheduleStates returns the states of project's eggs ("" for all).
func (s *ScheduleStates) ListScheduleStates(ctx context.Context, project string) ([]store.ScheduleState, error) {
	rows, err := s.db.Query(ctx, `SELECT project, egg, paused, last_tick, updated_at FROM schedule_states
		WHERE $1 = '' OR project = $1 ORDER BY project`+s.d.ByteOrder+`, egg`+s.d.ByteOrder, project)
	if err != nil {
		return nil, fmt.Errorf("schedule states: %w", err)
	}
	out, err := collect(rows, func(row Row) (store.ScheduleState, error) {
		var st store.ScheduleState
		var paused int
		var last, updated int64
		err := row.Scan(&st.Project, &st.Egg, &paused, &last, &updated)
		st.Paused, st.LastTick, st.UpdatedAt = paused != 0, FromMillis(last), FromMillis(updated)
		return st, err
	})
	if err != nil {
		return nil, fmt.Errorf("schedule states: %w", err)
	}
	return out, nil
}

// InitSchedule records st unless its egg has a state.
func (s *ScheduleStates) InitSchedule(ctx context.Context, st store.ScheduleState) (bool, error) {
	recorded := false
	err := s.write(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, `INSERT INTO schedule_states (project, egg, paused, last_tick, updated_at)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (project, egg) DO NOTHING`,
			st.Project, st.Egg, flag(st.Paused), Millis(st.LastTick), Millis(st.UpdatedAt))
		recorded = n > 0
		return err
	})
	if err != nil {
		return false, fmt.Errorf("schedule state of %s/%s: %w", st.Project, st.Egg, err)
	}
	return recorded, nil
}

// PauseSchedule pauses or resumes the egg's schedule.
func (s *ScheduleStates) PauseSchedule(ctx context.Context, project, egg string, paused bool, lastTick, at time.Time) (bool, error) {
	changed := false
	err := s.write(ctx, func(tx Tx) error {
		// Resuming moves the last tick to now: the pause's ticks never run.
		n, err := tx.Exec(ctx, `UPDATE schedule_states SET paused = $3, updated_at = $5,
				last_tick = CASE WHEN CAST($3 AS bigint) = 0 AND last_tick < CAST($4 AS bigint) THEN CAST($4 AS bigint) ELSE last_tick END
			WHERE project = $1 AND egg = $2 AND paused <> $3`, project, egg, flag(paused), Millis(lastTick), Millis(at))
		if err != nil || n > 0 {
			changed = n > 0
			return err
		}
		n, err = tx.Exec(ctx, `INSERT INTO schedule_states (project, egg, paused, last_tick, updated_at)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (project, egg) DO NOTHING`, project, egg, flag(paused), Millis(lastTick), Millis(at))
		changed = n > 0 && paused
		return err
	})
	if err != nil {
		return false, fmt.Errorf("pause schedule of %s/%s: %w", project, egg, err)
	}
	return changed, nil
}
