package api

import "time"

// --- Volume backups and restores (docs/BACKUPS.md) ---
//
// The routes, under /api/v1/projects/{namespace}/{project}:
//
//	POST   /volumes/{volume}/backups   hatch volume backup: a backup now; answer: VolumeTask
//	GET    /backups[?volume=V]         hatch volume backups: []VolumeTask of kind backup, newest first
//	GET    /volume-tasks/{id}[?state=S&wait=D]  one task; with state, answers once it differs (long-poll)
//	POST   /volumes/{volume}/restore   body RestoreRequest; answer: RestorePlan (dry run) or VolumeTask
//	DELETE /backups/{id}               hatch volume forget: the backup (by task or manifest ID) is forgotten
//
// Backups and restores are admin's and the project's deploy token's
// (projectScoped); the chunk routes of contract.VolumeTaskPath are the
// hosts'.

// VolumeTask is one backup or restore as the control plane recorded it.
type VolumeTask struct {
	ID        string `json:"id"`
	Kind      string `json:"kind"` // contract.TaskBackup or TaskRestore
	Namespace string `json:"namespace"`
	Project   string `json:"project"`
	Volume    string `json:"volume"`
	// Host is the host's ID it was placed on, HostName its name.
	Host     string `json:"host"`
	HostName string `json:"host_name,omitempty"`
	// Trigger is TriggerManual (an actor's), TriggerSchedule or
	// TriggerMissed (a tick of the volume's backup schedule).
	Trigger     string    `json:"trigger"`
	Actor       string    `json:"actor,omitempty"`
	ScheduledAt time.Time `json:"scheduled_at,omitzero"`
	CreatedAt   time.Time `json:"created_at"`
	DeliveredAt time.Time `json:"delivered_at,omitzero"`
	StartedAt   time.Time `json:"started_at,omitzero"`
	EndedAt     time.Time `json:"ended_at,omitzero"`
	// State is contract.TaskState's, or "lost" (its host went down before
	// reporting its end), "skipped" (a tick while the previous backup ran),
	// "missed" (ticks past their starting deadline).
	State string `json:"state"`
	Phase string `json:"phase,omitempty"`
	// Manifest is a done backup's handle: what `--from` and `forget` take.
	Manifest string `json:"manifest,omitempty"`
	// Backup is a restore's source (a manifest ID); Target the Docker
	// volume it writes.
	Backup      string `json:"backup,omitempty"`
	Target      string `json:"target,omitempty"`
	Consistency string `json:"consistency,omitempty"`
	Bytes       int64  `json:"bytes,omitempty"`
	Chunks      int    `json:"chunks,omitempty"`
	NewChunks   int    `json:"new_chunks,omitempty"`
	SentBytes   int64  `json:"sent_bytes,omitempty"`
	StoredBytes int64  `json:"stored_bytes,omitempty"`
	Output      string `json:"output,omitempty"`
	Error       string `json:"error,omitempty"`
	// FromStore: known only from the backup store's manifests (a control
	// plane that did not take it, pointed at the same bucket).
	FromStore bool `json:"from_store,omitempty"`
}

// Duration is how long the task took (zero until it ended).
func (t VolumeTask) Duration() time.Duration {
	if t.StartedAt.IsZero() || t.EndedAt.IsZero() {
		return 0
	}
	return t.EndedAt.Sub(t.StartedAt)
}

// RestoreRequest is the body of POST .../volumes/{volume}/restore.
type RestoreRequest struct {
	// From is the backup to restore (a manifest ID or a backup task's ID);
	// empty: the volume's latest good backup.
	From string `json:"from,omitempty"`
	// To restores into a new volume of that name beside the volume;
	// empty: into the volume itself, whose content is replaced.
	To string `json:"to,omitempty"`
	// DryRun answers the plan (RestorePlan) and changes nothing; the CLI
	// shows it and asks before it sends the request again without it.
	DryRun bool `json:"dry_run,omitempty"`
}

// RestorePlan is what a restore would do.
type RestorePlan struct {
	Backup VolumeTask `json:"backup"`
	// Host is where it would be written (the volume's host), Target the
	// Docker volume.
	Host     string `json:"host"`
	HostName string `json:"host_name,omitempty"`
	Target   string `json:"target"`
	// Replaces: Target exists and its content would be replaced.
	Replaces bool `json:"replaces"`
	// Warnings say what the user should know before confirming (how old
	// the backup is, say).
	Warnings []string `json:"warnings,omitempty"`
}
