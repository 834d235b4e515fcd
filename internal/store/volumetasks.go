package store

import (
	"context"
	"time"
)

// The events of volume backups and restores (issue 30).
const (
	// EventBackupDone, EventBackupFailed: a backup of a volume ended; its
	// Actor is who asked (a manual backup) or none (a scheduled one).
	EventBackupDone   EventType = "backup.done"
	EventBackupFailed EventType = "backup.failed"
	// EventRestoreDone, EventRestoreFailed: a restore ended.
	EventRestoreDone   EventType = "restore.done"
	EventRestoreFailed EventType = "restore.failed"
	// EventBackupForgotten: a backup was forgotten (hatch volume forget, or
	// retention past its volume's keep); its chunks are collected once no
	// kept backup lists them.
	EventBackupForgotten EventType = "backup.forgotten"
	// EventVolumeFailedOver: a volume whose host was lost for its
	// failover.after was restored on another host from its last good
	// backup, and its egg moved there; the message says where and how
	// much data may be lost. EventVolumeFailoverFailed: it could not be
	// (no good backup, no host, a failed restore). EventVolumeStaleCopy:
	// the lost host reported again; its copy of the volume is stale, kept
	// and never started.
	EventVolumeFailedOver     EventType = "volume.failed_over"
	EventVolumeFailoverFailed EventType = "volume.failover_failed"
	EventVolumeStaleCopy      EventType = "volume.stale_copy"
)

// The states of a volume task record: contract.TaskState's (pending,
// running, done, failed), and those the control plane decides itself.
const (
	TaskPending = "pending"
	TaskRunning = "running"
	TaskDone    = "done"
	TaskFailed  = "failed"
	// TaskLost: its host went down before it reported the task's end.
	TaskLost = "lost"
	// TaskSkipped: a scheduled tick while the volume's previous backup was
	// still open (a backup never runs twice at once).
	TaskSkipped = "skipped"
	// TaskMissed: ticks past while no server ran the scheduler.
	TaskMissed = "missed"
)

// TaskEnded reports whether a volume task in state is over: its end is
// recorded, and it is never begun again.
func TaskEnded(state string) bool { return state != TaskPending && state != TaskRunning }

// VolumeTask is one recorded backup or restore of a project's volume
// (api.VolumeTask is what users see of it).
type VolumeTask struct {
	// ID is unique in the cluster: the ID the host's desired state carries.
	ID      string
	Kind    string // contract.TaskBackup or TaskRestore
	Project string // "<namespace>/<project>"
	Volume  string
	// Host is the host's ID that does it: the volume's host.
	Host    string
	Trigger string // api.Trigger*
	Actor   string
	// ScheduledAt is the tick a scheduled backup is for (zero otherwise):
	// no two tasks of one volume are recorded for one tick.
	ScheduledAt time.Time
	CreatedAt   time.Time
	// DeliveredAt is when the task was put in its host's desired state.
	DeliveredAt time.Time
	StartedAt   time.Time
	EndedAt     time.Time
	State       string // Task* above
	Phase       string
	// Manifest is a done backup's manifest ID (its handle).
	Manifest string
	// Backup is a restore's source manifest, Target the Docker volume it
	// writes.
	Backup      string
	Target      string
	Consistency string
	Bytes       int64
	Chunks      int
	NewChunks   int
	SentBytes   int64
	StoredBytes int64
	Output      string
	Error       string
	// ReleasedAt is when it left its host's desired state (zero: it is
	// there, or never went).
	ReleasedAt time.Time
	// ForgottenAt is when a backup was forgotten (zero: kept): its record
	// stays, so that a store's listing does not bring it back.
	ForgottenAt time.Time
}

// VolumeTaskProgress is what a host reported of a task, or what the
// control plane decided of it (lost).
type VolumeTaskProgress struct {
	State       string
	Phase       string
	StartedAt   time.Time
	EndedAt     time.Time
	Manifest    string
	Bytes       int64
	Chunks      int
	NewChunks   int
	SentBytes   int64
	StoredBytes int64
	Output      string
	Error       string
}

// VolumeTaskFilter selects volume tasks.
type VolumeTaskFilter struct {
	Project string // "" for every project
	Volume  string // "" for every volume (of Project)
	Kind    string // "" for both kinds
	// Unreleased selects the tasks not out of their host's desired state.
	Unreleased bool
	// Forgotten selects the forgotten backups too.
	Forgotten bool
	Limit     int // 0: no bound
}

// VolumeTasks records volume backups and restores, and the states of the
// volumes' backup schedules (a store.ScheduleState whose Egg is the
// volume's name). The scheduler's writes carry the loops' lease as a
// fence, those that go with a change of desired states the project's too.
type VolumeTasks interface {
	// CreateVolumeTask records t. A task whose ID, or whose volume and
	// ScheduledAt (non-zero), is recorded already gives ErrExists. If tick
	// is not nil its LastTick is stored as the volume schedule's in the
	// same transaction, only if later than the stored one (ErrExists
	// otherwise), so a tick is decided once whoever decides it.
	CreateVolumeTask(ctx context.Context, t VolumeTask, tick *ScheduleState) error
	// VolumeTask returns one task, or ErrNotFound.
	VolumeTask(ctx context.Context, id string) (VolumeTask, error)
	// ListVolumeTasks returns the tasks f selects, newest first.
	ListVolumeTasks(ctx context.Context, f VolumeTaskFilter) ([]VolumeTask, error)
	// DeliverVolumeTask records the task's delivery to host at at; the
	// first delivery stands.
	DeliverVolumeTask(ctx context.Context, id, host string, at time.Time) error
	// RecordVolumeTaskProgress records p of a task that has not ended, and
	// reports whether anything changed; the first recorded end stands.
	RecordVolumeTaskProgress(ctx context.Context, id string, p VolumeTaskProgress) (bool, error)
	// ReleaseVolumeTask records that the task left its host's desired state.
	ReleaseVolumeTask(ctx context.Context, id string, at time.Time) error
	// ForgetVolumeTask marks a backup forgotten, and reports whether it was
	// not already.
	ForgetVolumeTask(ctx context.Context, id string, at time.Time) (bool, error)
	// ListVolumeSchedules returns the volumes' schedule states, by project
	// and volume.
	ListVolumeSchedules(ctx context.Context) ([]ScheduleState, error)
	// InitVolumeSchedule records s unless its volume has a state.
	InitVolumeSchedule(ctx context.Context, s ScheduleState) (bool, error)
}
