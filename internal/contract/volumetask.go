package contract

import (
	"fmt"
	"time"
)

// VolumeTask is a backup or a restore of one volume of this host, through
// Docker's archive API only (never a host path of Docker's). The control
// plane records the task (store.VolumeTask) before it puts it in the desired
// state of the one host that does it: the volume's host for a backup, the
// host the volume is (or is to be) placed on for a restore. The agent does a
// task ID at most once and reports it in StatusReport.VolumeTasks; the task
// leaves the desired state once its end is recorded.
//
// Chunks and manifests travel over the agent's own outbound HTTPS to the
// routes of VolumeTaskPath: the control plane checks each against the task
// assigned to the host (a host writes only backups of its own volumes, and
// reads only the chunks of its own restores).
type VolumeTask struct {
	// ID is unique in the cluster (the record's ID).
	ID   string         `json:"id"`
	Kind VolumeTaskKind `json:"kind"`
	// Volume is the project's volume the task is about: the backup's source,
	// the restore's volume in the project (Target names the Docker volume
	// written).
	Volume VolumeSpec `json:"volume"`
	// Key is the volume's own key (backup.VolumeKey's secret, 64 hex
	// digits): an HKDF of the cluster's backup key and the volume's
	// namespace/project/name. A host never holds the cluster's key. Sealed
	// at rest, never logged, not hashed into the desired state's version.
	Key SecretValue `json:"key,omitempty"`

	// Backup only.
	// Egg is the egg that mounts the volume, whose running container the
	// hooks run in ("" if none runs it here).
	Egg string `json:"egg,omitempty"`
	// Before runs in the egg's running container before the copy; a
	// non-zero exit fails the backup with its output and skips the copy.
	// After always runs after Before did (whatever the copy did).
	Before []string `json:"before,omitempty"`
	After  []string `json:"after,omitempty"`
	// Consistency is ConsistencyHooks (the egg keeps running) or
	// ConsistencyStop: the control plane takes the egg's workload out of the
	// host's desired state while the task is in it, and the agent copies
	// only once no running container mounts the volume; the egg is placed
	// again when the task ends.
	Consistency string `json:"consistency,omitempty"`

	// Restore only.
	// Backup is the manifest ID (the backup's handle) to restore.
	Backup string `json:"backup,omitempty"`
	// Target is the Docker volume written: Volume.DockerName itself, or a
	// new volume beside it (`hatch volume restore --to NEW`). It is removed
	// and created anew (with Labels) once every chunk is fetched and
	// verified, then filled through the archive API: a PUT merges and never
	// deletes, so nothing of what was there survives.
	Target string            `json:"target,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
}

// VolumeTaskKind is what a VolumeTask does.
type VolumeTaskKind string

const (
	TaskBackup  VolumeTaskKind = "backup"
	TaskRestore VolumeTaskKind = "restore"
)

// The values of VolumeTask.Consistency (and of a volume's backup.consistency).
const (
	ConsistencyHooks = "hooks"
	ConsistencyStop  = "stop"
)

// TaskState is where a volume task is, as its host reports it.
type TaskState string

const (
	TaskPending TaskState = "pending" // not begun (waiting for the egg to stop, say)
	TaskRunning TaskState = "running"
	TaskDone    TaskState = "done"
	TaskFailed  TaskState = "failed" // Error says why; never tried again
)

// Ended reports whether the task is over.
func (s TaskState) Ended() bool { return s == TaskDone || s == TaskFailed }

// VolumeTaskStatus is one volume task of the desired state as its host sees
// it; the status report carries one for every task in the host's desired
// state.
type VolumeTaskStatus struct {
	ID    string    `json:"id"`
	State TaskState `json:"state"`
	// Phase says what a running task does now ("before", "copy", "after",
	// "waiting for the egg to stop", "fetch", "write"), for progress.
	Phase     string    `json:"phase,omitempty"`
	StartedAt time.Time `json:"started_at,omitzero"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	// Manifest is a done backup's manifest ID (its handle), which the
	// control plane checks against the manifest the host uploaded.
	Manifest string `json:"manifest,omitempty"`
	// Bytes is the volume's tar stream's size so far (backup: read;
	// restore: written); Chunks and NewChunks are the backup's chunks and
	// those the store did not hold; SentBytes is what was sent (the
	// incremental cost), StoredBytes the backup's size as stored.
	Bytes       int64 `json:"bytes,omitempty"`
	Chunks      int   `json:"chunks,omitempty"`
	NewChunks   int   `json:"new_chunks,omitempty"`
	SentBytes   int64 `json:"sent_bytes,omitempty"`
	StoredBytes int64 `json:"stored_bytes,omitempty"`
	// Output is a failed hook's output (its last 4 KiB).
	Output string `json:"output,omitempty"`
	Error  string `json:"error,omitempty"`
}

// The routes a host's agent moves a task's data through (all under
// /api/v1/hosts/{host}/volume-tasks/{task}, the host's own token):
//
//	POST .../missing          body: JSON []string of chunk IDs; answer: those the store lacks (backup)
//	PUT  .../chunks/{chunk}   body: the sealed chunk, whose SHA-256 is {chunk} (backup)
//	PUT  .../manifest/{id}    body: the sealed manifest, whose SHA-256 is {id} (backup)
//	GET  .../manifest         the sealed manifest of the task's Backup (restore)
//	GET  .../chunks/{chunk}   a sealed chunk the restore's manifest lists (restore)
//
// The server refuses (403) a task that is not the host's, not open, or not
// of the kind the route is for, and (404) a chunk a restore's manifest does
// not list.
func VolumeTaskPath(host, task string) string {
	return fmt.Sprintf("/api/v1/hosts/%s/volume-tasks/%s", host, task)
}
