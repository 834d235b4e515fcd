package api

import (
	"time"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

// --- Plans and applies ---

// PlanRequest is POST .../plan's body: the project's desired resources as
// the CLI built them (package spec's mapping of hatch.yaml, or of a Compose
// file), the explicit dependencies, and the value of every secret resource,
// read by the CLI from its file or environment. A destroy plan (POST
// .../destroy) has no resources; with DeleteVolumes it deletes the
// project's volumes too.
type PlanRequest struct {
	Resources     []DesiredResource `json:"resources"`
	Dependencies  []Dependency      `json:"dependencies"`
	Secrets       map[string]string `json:"secrets"`
	Destroy       bool              `json:"destroy,omitempty"`
	DeleteVolumes bool              `json:"delete_volumes,omitempty"`
	// Notify are the project's own webhooks (hatch.yaml's notify:), which
	// its events are posted to from its apply on.
	Notify []inputs.NotifyTarget `json:"notify,omitempty"`
}

// DesiredResource is one resource the project wants.
type DesiredResource struct {
	Type   resource.Kind  `json:"type"`
	Name   string         `json:"name"`
	Inputs map[string]any `json:"inputs"`
	// Source is the digest of an uploaded blob the resource is built from.
	Source string `json:"source,omitempty"`
}

// Dependency is an explicit dependency: Child waits for Parent to reach
// Condition (created, healthy or completed).
type Dependency struct {
	Parent    string `json:"parent"`
	Child     string `json:"child"`
	Condition string `json:"condition,omitempty"`
}

// DestroyRequest is POST .../destroy's (optional) body.
type DestroyRequest struct {
	Volumes bool `json:"volumes"`
}

// Plan is a plan as the API shows it: what would change, and the container
// steps it implies per host.
type Plan struct {
	ID            string         `json:"id"`
	Project       string         `json:"project"`
	Created       time.Time      `json:"created"`
	Expires       time.Time      `json:"expires"`
	Destroy       bool           `json:"destroy,omitempty"`
	DeleteVolumes bool           `json:"delete_volumes,omitempty"`
	HasChanges    bool           `json:"has_changes"`
	Summary       map[string]int `json:"summary"`
	Changes       []Change       `json:"changes"`
	Hosts         []HostSteps    `json:"hosts"`
	// RollbackOf is, for a plan of POST .../rollback, the apply whose
	// inputs it applies again; Notes say what differs from that apply
	// (secrets at their current values, volumes gone since).
	RollbackOf int64    `json:"rollback_of,omitempty"`
	Notes      []string `json:"notes,omitempty"`
}

// RollbackRequest is POST .../rollback's (optional) body: the apply whose
// spec and build sources to apply again; 0 means the last successful apply
// before the newest one.
type RollbackRequest struct {
	To int64 `json:"to,omitempty"`
}

// ApplyHistory is GET .../applies: the project's kept applies, newest
// first, and how many the server keeps per project (--keep-applies).
type ApplyHistory struct {
	Namespace string  `json:"namespace"`
	Project   string  `json:"project"`
	Keep      int     `json:"keep"`
	Applies   []Apply `json:"applies"`
}

// Sensitive is what a plan shows of a secret's value, and Redacted what a
// deployed secret's outputs show: the API never shows either.
const (
	Sensitive = "(sensitive)"
	Redacted  = "[redacted]"
)

// Change is one resource's planned change: "+" create, "~" update (with the
// changed inputs), "-" delete, "=" unchanged.
type Change struct {
	Action  string         `json:"action"`
	Key     string         `json:"key"`
	ID      string         `json:"id,omitempty"`
	Changed []string       `json:"changed,omitempty"`
	Unknown []string       `json:"unknown,omitempty"`
	Inputs  map[string]any `json:"inputs,omitempty"`
}

// HostSteps are the container steps a plan implies on one host; Host ""
// gathers the steps whose host is known only after apply.
type HostSteps struct {
	Host  string   `json:"host"`
	Name  string   `json:"name"`
	Steps []string `json:"steps"`
}

// ApplyRequest is POST .../apply's body.
type ApplyRequest struct {
	Plan string `json:"plan"`
}

// ApplyStarted is the 202 answer to an apply not asked to stream.
type ApplyStarted struct {
	Apply ApplyRef `json:"apply"`
	// Events is the path of the apply's progress stream.
	Events string `json:"events"`
}

// ApplyRef names a started apply.
type ApplyRef struct {
	ID      int64  `json:"id"`
	Project string `json:"project"`
	Plan    string `json:"plan"`
}

// Progress statuses; StatusFinished ends an apply's stream, and so does
// StatusRunning for an apply this server no longer follows.
const (
	StatusStarted  = "started"
	StatusDone     = "done"
	StatusFailed   = "failed"
	StatusWaiting  = "waiting"
	StatusFinished = "finished"
	StatusRunning  = "running"
)

// Progress is one step of an apply, as its event stream shows it.
type Progress struct {
	Seq      int64     `json:"seq"`
	Time     time.Time `json:"time"`
	Resource string    `json:"resource,omitempty"`
	// Action is create, update, delete or "wait <condition>".
	Action string `json:"action,omitempty"`
	// Status is started, done, failed or waiting; finished ends the stream.
	Status  string `json:"status"`
	Message string `json:"message,omitempty"`
	// Outcome and Summary are set on the finished step.
	Outcome string         `json:"outcome,omitempty"`
	Summary map[string]int `json:"summary,omitempty"`
}

// Apply is one apply's record.
type Apply struct {
	ID       int64     `json:"id"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitzero"`
	Outcome  string    `json:"outcome"`
	Message  string    `json:"message,omitempty"`
	// Actor is the name of the admin token that applied.
	Actor string `json:"actor,omitempty"`
	// Summary is one line saying what the apply changes, as its plan said.
	Summary string `json:"summary,omitempty"`
	// Digest identifies its spec and build sources: two applies of the same
	// files (secret values aside) have the same digest.
	Digest string `json:"digest,omitempty"`
	// RollbackOf is the apply whose inputs this one applied again.
	RollbackOf int64 `json:"rollback_of,omitempty"`
	// Rollbackable says whether the server keeps what a rollback to this
	// apply needs (records made before it kept them do not).
	Rollbackable bool `json:"rollbackable"`
}

// ApplyStatus is GET .../applies/{id}: the record and the progress the
// server kept.
type ApplyStatus struct {
	Apply    Apply      `json:"apply"`
	Progress []Progress `json:"progress"`
}

// RestartResult is the answer of POST .../eggs/{egg}/restart.
type RestartResult struct {
	Egg      string   `json:"egg"`
	Revision int64    `json:"revision"`
	Hosts    []string `json:"hosts"`
}

// --- Projects ---

// ProjectSummary is one project of GET /api/v1/projects.
type ProjectSummary struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Resources int    `json:"resources"`
	LastApply *Apply `json:"last_apply"`
}

// ProjectList is GET /api/v1/projects.
type ProjectList struct {
	Projects []ProjectSummary `json:"projects"`
}

// Project is GET /api/v1/projects/{namespace}/{project}.
type Project struct {
	Namespace string     `json:"namespace"`
	Name      string     `json:"name"`
	Resources []Resource `json:"resources"`
	Applies   []Apply    `json:"applies"`
}

// Resource is a deployed resource as the API shows it: no inputs, no source
// blob (internal), and a secret's outputs redacted.
type Resource struct {
	Type    resource.Kind  `json:"type"`
	Name    string         `json:"name"`
	ID      string         `json:"id"`
	Pending bool           `json:"pending,omitempty"`
	Parents []string       `json:"parents,omitempty"`
	Outputs map[string]any `json:"outputs,omitempty"`
}

// Rollout states: an egg's is the worst of its hosts' (failed, waiting,
// progressing, done); a host's is never waiting.
type RolloutState string

const (
	RolloutProgressing RolloutState = "progressing"
	RolloutFailed      RolloutState = "failed"
	RolloutDone        RolloutState = "done"
	// RolloutWaiting is an egg's as a whole: some of its replicas could not
	// be placed on any host, or their host is down.
	RolloutWaiting RolloutState = "waiting"
)

// ProjectStatus is GET .../status: where each egg of a project stands,
// worked out by the server from the hosts' desired states and reports. It
// holds no spec and no secret value.
type ProjectStatus struct {
	Namespace string `json:"namespace"`
	Project   string `json:"project"`
	// HostsUp counts the fleet's hosts up now, whatever they run: a client
	// following a rollout tells "no host to run it" from "not there yet".
	HostsUp int         `json:"hosts_up"`
	Eggs    []EggStatus `json:"eggs"`
	// Volumes are the project's volumes' backup states, by name: a volume
	// whose backups fail or fall behind shows its Warning here.
	Volumes []VolumeBackupState `json:"volumes,omitempty"`
}

// VolumeBackupState is where a volume's backups stand.
type VolumeBackupState struct {
	Name string `json:"name"`
	// LastGood is when its newest good backup ended (nil: none yet).
	LastGood *time.Time `json:"last_good,omitempty"`
	// LastOutcome is the state of its newest ended backup (done, failed,
	// lost; "" if none ended), LastEnded when it ended.
	LastOutcome string     `json:"last_outcome,omitempty"`
	LastEnded   *time.Time `json:"last_ended,omitempty"`
	// Schedule is its backup schedule ("every 24h"; "" for none) and
	// NextScheduled its next tick.
	Schedule      string     `json:"schedule,omitempty"`
	NextScheduled *time.Time `json:"next_scheduled,omitempty"`
	// Warning says what is wrong ("" when nothing is).
	Warning string `json:"warning,omitempty"`
	// Failover is the volume's last failover (nil: none); StaleCopies the
	// copies failovers left on lost hosts, kept until forgotten.
	Failover    *VolumeFailover `json:"failover,omitempty"`
	StaleCopies []StaleCopy     `json:"stale_copies,omitempty"`
}

// VolumeFailover is what a volume's failover did (docs/BACKUPS.md,
// "Failover"): it moved from host From, lost, to host To, restored from
// Backup (a manifest ID) by Task at At. DataWindow bounds how much data may
// be lost: from the backup's start (BackupCreated) to the failover (At), a
// Go duration. From was last heard at LastHeard, but a host cut off from
// the control plane, not dead, may take writes until its fence stops the
// egg, which the plan's check puts before At.
type VolumeFailover struct {
	From          string    `json:"from"`
	FromName      string    `json:"from_name,omitempty"`
	To            string    `json:"to"`
	ToName        string    `json:"to_name,omitempty"`
	At            time.Time `json:"at"`
	Task          string    `json:"task"`
	Backup        string    `json:"backup"`
	BackupCreated time.Time `json:"backup_created"`
	LastHeard     time.Time `json:"last_heard"`
	DataWindow    string    `json:"data_window"`
}

// StaleCopy is a volume's copy left by a failover on the host it moved
// from: never started, kept as it was. Found is when that host was heard
// again (nil: not yet).
type StaleCopy struct {
	Host       string     `json:"host"`
	HostName   string     `json:"host_name,omitempty"`
	DockerName string     `json:"docker_name"`
	Since      time.Time  `json:"since"`
	Found      *time.Time `json:"found,omitempty"`
}

// EggStatus is one egg over every host.
type EggStatus struct {
	Name string `json:"name"`
	// Desired is the replica count: those placed on hosts plus Unplaced.
	Desired  int `json:"desired"`
	Unplaced int `json:"unplaced"`
	// Ready counts replicas ready at their host's current spec hash (running
	// healthy, or for a one-shot job, completed), on hosts up only.
	Ready int `json:"ready"`
	// Previous counts containers not at the current spec still running on
	// hosts up: during a roll, or after a failed one, they are what serves.
	Previous int `json:"previous"`
	// Restarts sums the in-place restarts of its containers; CrashLooping
	// counts those whose restart the agent holds back now.
	Restarts     int     `json:"restarts"`
	CrashLooping int     `json:"crash_looping"`
	Rollout      Rollout `json:"rollout"`
	// Hosts are the hosts whose desired state holds the egg, by name.
	Hosts []EggHost `json:"hosts"`
}

// Rollout is where an egg's rollout stands.
type Rollout struct {
	State RolloutState `json:"state"`
	// Reason says what is in the way: where and why it failed, the hosts not
	// up, why replicas are not placed.
	Reason string `json:"reason,omitempty"`
	// LogTail is the failing container's last log lines, for a failed rollout.
	LogTail []string `json:"log_tail,omitempty"`
}

// EggHost is the egg's workload on one host.
type EggHost struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
	// State is the host's liveness: up, down or unknown.
	State   string `json:"state"`
	Desired int    `json:"desired"`
	// Ready and Rollout are as of the host's last report, whatever its
	// liveness now; Rollout is progressing, done or failed.
	Ready      int               `json:"ready"`
	Rollout    RolloutState      `json:"rollout"`
	Containers []ContainerStatus `json:"containers"`
	// Errors are the host's current problems as its agent last reported
	// them (a desired state it cannot cache, a failed pull, a full disk):
	// about the host, not only this egg.
	Errors []string `json:"errors,omitempty"`
}

// ContainerStatus is one container of a workload, as its agent last
// reported it.
type ContainerStatus struct {
	Slot    int                     `json:"slot"`
	State   contract.ContainerState `json:"state"`
	Healthy bool                    `json:"healthy"`
	// Current: at the workload's spec hash, in a slot it should run; any
	// other container is on its way out.
	Current        bool      `json:"current"`
	Restarts       int       `json:"restarts"`
	CrashLoopUntil time.Time `json:"crash_loop_until,omitzero"`
	RolloutFailure string    `json:"rollout_failure,omitempty"`
	LogTail        []string  `json:"log_tail,omitempty"`
}
