// Package inputs declares the inputs of each kind of resource once: package
// spec writes them (with references still unresolved, "${egg/db.address}")
// and the providers read them back after the reconciler resolved those
// references. Both sides use these types, so a field added for one is there
// for the other; the package doc of spec describes every field.
//
// The one shape holds before and after resolution because every reference
// stands where its output's value fits: a string output inside a string, and
// a list output as an item of a list (resource.Resolve splices the list's
// items in), as a route's hosts are written. The
// exception is an environment value, a string the user may make one whole
// reference to a list; Env reads that back as a string (see Env).
//
// Slices and maps are never nil in what spec writes, so that an unset list
// encodes as [] whatever loader produced it and equal settings give equal
// inputs.
package inputs

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Egg is the inputs of an egg/<name> resource.
type Egg struct {
	Build *Build `json:"build"`
	Image string `json:"image"`
	// Pull is the image's pull policy (contract.PullPolicy), "" for the
	// default (digest).
	Pull string `json:"pull,omitempty"`
	// Digest is what the control plane resolved Image's tag to when the
	// plan was made (pull digest), "sha256:...": never written by a
	// loader, kept in the apply's record, so a rollback runs the same
	// bytes even after the tag moved.
	Digest string `json:"digest,omitempty"`
	// PullAuth is the project's login for the registry Image is pulled
	// from (`registries:`), when it has one for that host.
	PullAuth    *PullAuth         `json:"pull_auth,omitempty"`
	Replicas    int               `json:"replicas"`
	Command     []string          `json:"command"`
	Entrypoint  []string          `json:"entrypoint"`
	User        string            `json:"user"`
	WorkingDir  string            `json:"working_dir"`
	Port        int               `json:"port"`
	Ports       []Port            `json:"ports"`
	Env         Env               `json:"env"`
	Health      *Health           `json:"health"`
	Aliases     []string          `json:"aliases"`
	Rollout     Rollout           `json:"rollout"`
	Restart     string            `json:"restart"`
	Resources   Resources         `json:"resources"`
	Volumes     []Mount           `json:"volumes"`
	Tmpfs       []string          `json:"tmpfs"`
	ReadOnly    bool              `json:"read_only"`
	CapAdd      []string          `json:"cap_add"`
	CapDrop     []string          `json:"cap_drop"`
	Labels      map[string]string `json:"labels"`
	Secrets     []SecretMount     `json:"secrets"`
	Networks    []string          `json:"networks"`
	StopSignal  string            `json:"stop_signal"`
	StopTimeout string            `json:"stop_timeout"`
	Placement   Placement         `json:"placement"`
	// Schedule, when set, makes the egg a job: it has no long-running
	// replicas, and each tick of the schedule runs one container of it with
	// its own command (see Schedule).
	Schedule *Schedule `json:"schedule,omitempty"`
	// Uses are the eggs of the project whose address the egg references
	// (in env), by name, sorted: the eggs its hosts must serve it (a relay
	// per name). They are names, not references: where those eggs run does
	// not constrain where this one runs.
	Uses []string `json:"uses"`
}

// Schedule is a scheduled egg's timer and the rules of its runs, as
// written (durations as Go durations, checked by the spec's loader and
// CheckResource, parsed by internal/schedule).
type Schedule struct {
	// Cron (five fields, robfig/cron's standard parser) in Timezone (an IANA
	// name; default UTC), or Every (a duration): exactly one of them.
	Cron     string `json:"cron,omitempty"`
	Timezone string `json:"timezone,omitempty"`
	Every    string `json:"every,omitempty"`
	// Concurrency is what a tick does while the previous run still runs:
	// forbid (the default: skip the tick), allow, or replace (stop it).
	Concurrency string `json:"concurrency,omitempty"`
	// Timeout stops a run past it ("" for none).
	Timeout string `json:"timeout,omitempty"`
	// StartingDeadline is how late a tick may still start (after the
	// control plane was away); default the schedule's interval, at most 1h.
	StartingDeadline string `json:"starting_deadline,omitempty"`
	// KeepRuns is how many ended runs keep their container (and output);
	// default 20.
	KeepRuns int `json:"keep_runs,omitempty"`
}

// The values of Schedule.Concurrency.
const (
	ConcurrencyForbid  = "forbid"
	ConcurrencyAllow   = "allow"
	ConcurrencyReplace = "replace"
)

// Env is an egg's environment. Written, each value is a string that may hold
// references. Resolved, a value that was one whole reference holds the
// output's own value, which may be a list (API_HOSTS: "${egg/api.hosts}");
// a container's environment holds strings, so Env reads a list back as its
// items joined by commas and any other value as its JSON.
type Env map[string]string

// UnmarshalJSON reads resolved values as strings (see Env).
func (e *Env) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := make(Env, len(raw))
	for k, v := range raw {
		var s string
		var list []string
		switch {
		case json.Unmarshal(v, &s) == nil:
			out[k] = s
		case json.Unmarshal(v, &list) == nil:
			out[k] = strings.Join(list, ",")
		default:
			out[k] = string(v)
		}
	}
	*e = out
	return nil
}

// Build says how to build an egg's image from a directory.
type Build struct {
	Context    string            `json:"context"`
	Dockerfile string            `json:"dockerfile"`
	Args       map[string]string `json:"args"`
	Target     string            `json:"target"`
}

// Port publishes a container port on every host running the egg.
type Port struct {
	Published int    `json:"published"`
	Target    int    `json:"target"`
	Protocol  string `json:"protocol"`
}

// Health is an egg's health check; durations are strings ("5s").
type Health struct {
	HTTP        string   `json:"http"`
	TCP         bool     `json:"tcp"`
	Cmd         []string `json:"cmd"`
	Interval    string   `json:"interval"`
	Timeout     string   `json:"timeout"`
	StartPeriod string   `json:"start_period"`
	Retries     int      `json:"retries"`
}

// Rollout says how an egg's replicas are replaced by a new spec.
type Rollout struct {
	Order            string `json:"order"`
	MaxSurge         Surge  `json:"max_surge"`
	MinReady         string `json:"min_ready"`
	DrainTimeout     string `json:"drain_timeout"`
	ProgressDeadline string `json:"progress_deadline"`
	AutoRevert       bool   `json:"auto_revert"`
}

// Surge is how many slots of a host roll at once: Count if set, else Percent
// of the host's slots, at least one.
type Surge struct {
	Count   int `json:"count,omitempty"`
	Percent int `json:"percent,omitempty"`
}

// Slots returns the number of slots rolled at once on a host running n: 0
// when neither Count nor Percent is set, which leaves the choice to the
// agent's default.
func (s Surge) Slots(n int) int {
	switch {
	case s.Count > 0:
		return s.Count
	case s.Percent > 0:
		return max(1, n*s.Percent/100)
	}
	return 0
}

// Resources are an egg's limits (memory in bytes); zero means no limit.
type Resources struct {
	Memory int64   `json:"memory"`
	CPUs   float64 `json:"cpus"`
	Pids   int64   `json:"pids"`
}

// The mount types.
const (
	MountVolume = "volume" // Source is a volume's name: ${volume/<name>.name}
	MountBind   = "bind"   // Source is an absolute path on the host
)

// Mount is one of an egg's mounts.
type Mount struct {
	Type     string `json:"type"`
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only"`
	// Fenced says the volume has a failover policy: the egg's workloads are
	// fenced (contract.WorkloadSpec.Fenced).
	Fenced bool `json:"fenced,omitempty"`
}

// PullAuth is a registry login: its password is a secret's handle,
// ${secret/<name>.handle}, so its value travels as secret values do.
type PullAuth struct {
	Registry string `json:"registry"`
	Username string `json:"username"`
	Password string `json:"password"`
}

// SecretMount is a secret an egg mounts, by its handle: ${secret/<name>.handle}.
type SecretMount struct {
	Name   string `json:"name"`
	Handle string `json:"handle"`
	Target string `json:"target"`
}

// Placement is where an egg may run: the constraints of placement.Egg.
type Placement struct {
	Hosts      []string `json:"hosts"`
	Volume     string   `json:"volume"`
	VolumeHost string   `json:"volume_host"`
	// Beside is no longer written or read: an egg referencing another's
	// address used to be placed on its hosts. Records stored before then
	// carry it, and Decode is strict, so the field stays for them to decode;
	// an apply drops it (Egg.Uses says what it meant).
	Beside []Beside `json:"beside,omitempty"`
}

// Beside is what Placement.Beside held in records stored before eggs could
// reach each other across hosts: an egg whose address an egg references, and
// [${egg/<name>.hosts}] resolved to its host IDs. Nothing reads it.
type Beside struct {
	Egg   string   `json:"egg"`
	Hosts []string `json:"hosts"`
}

// Volume is the inputs of a volume/<name> resource: its labels, and the egg
// mounting it with that egg's placement and resources, from which its host is
// chosen.
type Volume struct {
	Labels    map[string]string `json:"labels"`
	Egg       string            `json:"egg"`
	Placement Placement         `json:"placement"`
	Resources Resources         `json:"resources"`
	// Backup is the volume's backups (hatch.yaml volumes.<name>.backup);
	// nil for none.
	Backup *VolumeBackup `json:"backup,omitempty"`
	// Failover is the volume's failover policy (hatch.yaml
	// volumes.<name>.failover; docs/BACKUPS.md); nil for none. It needs
	// Backup.
	Failover *VolumeFailover `json:"failover,omitempty"`
}

// VolumeFailover is a volume's failover policy.
type VolumeFailover struct {
	// After is how long the volume's host may be silent before the volume
	// may be restored elsewhere, a Go duration ("3m"). The plan requires it
	// to exceed the server's fence_after and request timeout plus the
	// egg's drain and stop timeouts.
	After string `json:"after"`
}

// VolumeBackup is a volume's backup policy (docs/BACKUPS.md).
type VolumeBackup struct {
	// Schedule is when backups are taken, in the syntax of an egg's
	// schedule (Cron with Timezone, or Every; its other fields unused);
	// nil: only `hatch volume backup`.
	Schedule *Schedule `json:"schedule,omitempty"`
	// Keep is how many good backups are kept (default 7); older ones are
	// forgotten and their chunks collected.
	Keep int `json:"keep,omitempty"`
	// Before and After run in the egg's running container around the copy.
	Before []string `json:"before,omitempty"`
	After  []string `json:"after,omitempty"`
	// Consistency is "hooks" (default: the egg keeps running) or "stop".
	Consistency string `json:"consistency,omitempty"`
}

// DefaultBackupKeep is VolumeBackup.Keep's default.
const DefaultBackupKeep = 7

// Network is the inputs of a network/<name> resource.
type Network struct {
	Internal bool              `json:"internal"`
	Labels   map[string]string `json:"labels"`
}

// Secret is the inputs of a secret/<name> resource as spec writes them:
// where the CLI reads the value (a file or a variable). The control plane
// adds the value's fingerprint when it stages it.
type Secret struct {
	File string `json:"file,omitempty"`
	Env  string `json:"env,omitempty"`
}

// Route is the inputs of a route/<host>[<path>] resource.
type Route struct {
	Host string `json:"host"`
	Path string `json:"path"`
	Egg  string `json:"egg"`
	Port int    `json:"port"`
	// UpstreamTimeout is a Go duration ("30s"), or empty for the ingress's
	// default.
	UpstreamTimeout string `json:"upstream_timeout,omitempty"`
	// TLS is "" (the control plane's default), "auto", "off" or "secret";
	// with "secret", Cert and Key reference the secrets holding the PEM
	// chain and key (${secret/<name>.handle}), and the provider reads
	// their values. HSTS adds Strict-Transport-Security to HTTPS answers.
	TLS  string `json:"tls,omitempty"`
	Cert string `json:"cert,omitempty"`
	Key  string `json:"key,omitempty"`
	HSTS bool   `json:"hsts,omitempty"`
	// Hosts is where the egg runs, written [${egg/<egg>.hosts}]: it makes
	// the route an update when the egg moves. Providers do not read it; the
	// egg's own placement says where its routes go.
	Hosts []string `json:"hosts"`
}

// Encode turns inputs into the JSON-compatible map package resource works
// with. It cannot fail on the types of this package (strings, finite
// numbers, booleans, slices and maps), so it panics if it does.
func Encode(v any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		panic("inputs: encode: " + err.Error())
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		panic("inputs: decode: " + err.Error())
	}
	return m
}

// Decode turns a resource's inputs into T, strictly: a field T does not
// declare is an error rather than dropped, so inputs written by something
// newer (or older) than the reader fail loudly instead of half applying.
func Decode[T any](inputs map[string]any) (T, error) {
	var v T
	b, err := json.Marshal(inputs)
	if err != nil {
		return v, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	err = dec.Decode(&v)
	return v, err
}
