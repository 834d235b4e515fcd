package contract

import (
	"net"
	"strings"
	"time"
)

// WorkloadSpec is the part of an egg that one host runs: everything the agent
// needs to create, check, roll and stop its containers. Durations travel as
// nanoseconds; a zero value means "the default" wherever a default exists (see
// the accessor methods), so an older control plane that omits a field still
// gets sensible behaviour.
type WorkloadSpec struct {
	Namespace string `json:"namespace"`
	Project   string `json:"project"`
	Egg       string `json:"egg"`

	// BlobID is the content digest of the source Blob the image is built from.
	// Internal: never shown to users.
	BlobID string `json:"blob_id,omitempty"`
	// Image is an image reference to pull; exactly one of Image and Build is
	// set. With the default pull policy it is pinned, "repo@sha256:...",
	// to the digest the control plane resolved at plan (PinImage), so
	// every host runs the same bytes.
	Image string     `json:"image,omitempty"`
	Build *BuildSpec `json:"build,omitempty"`
	// Pull is when the agent pulls Image (PullPolicy); "" is PullDigest.
	// Not in the spec hash: it changes when the agent pulls, not what a
	// container is (a pinned Image is in the hash). An older agent ignores
	// it and pulls an image only when it is absent.
	Pull PullPolicy `json:"pull,omitempty"`
	// PullAuth is the login for the registry Image is pulled from, when the
	// project or the cluster has one for its host. Not in the spec hash: a
	// new password pulls nothing and rolls nothing; its Handle is in the
	// state's version, so the agent still gets the new one.
	PullAuth *RegistryAuth `json:"pull_auth,omitempty"`

	// Fenced says the egg mounts a volume with a failover policy: its
	// containers stop while the agent's status reports go unanswered for
	// DesiredState.FenceAfter, and never start from the agent's cache
	// (docs/BACKUPS.md, "Failover"). Not in the spec hash: the agent, not
	// the container, acts on it. An older agent ignores it.
	Fenced bool `json:"fenced,omitempty"`

	// Replicas is the number of slots this host runs (0..Replicas-1); 0 is cold.
	Replicas int `json:"replicas"`
	// Revision is bumped by `hatch rollout restart` to roll with the same spec.
	Revision int `json:"revision,omitempty"`

	Command    []string          `json:"command,omitempty"`
	Entrypoint []string          `json:"entrypoint,omitempty"`
	User       string            `json:"user,omitempty"`
	WorkingDir string            `json:"working_dir,omitempty"`
	Env        map[string]string `json:"env,omitempty"`

	// Port is the port the egg listens on inside its container: the agent's
	// probes and proxy use it.
	Port int `json:"port,omitempty"`
	// Ports are published on the host, served by the agent's proxy.
	Ports []PublishedPort `json:"ports,omitempty"`
	// Routes are the hostnames (and path prefixes) the ingress sends here.
	Routes []Route `json:"routes,omitempty"`
	// Aliases are the egg's extra names: consumers reach it by its name and
	// these on the networks they share with it, through the relays that
	// carry them (DesiredState.Services, their Names), never through its own
	// containers. Not in the spec hash: relays, not the egg's containers,
	// change with them.
	Aliases []string `json:"aliases,omitempty"`
	// NetworkAliases are the DNS names the containers carry on each of
	// their networks, beyond their own unique container name. The agent
	// sets them on its relays: the replicas of an egg with a port carry
	// none, so that Docker's DNS answers the egg's name with its relays
	// alone, never with a replica still booting or already draining. An
	// egg without a port has no relay (a relay listens on the port): the
	// control plane gives its replicas its names, reached directly by
	// consumers on their own host only.
	NetworkAliases []string `json:"network_aliases,omitempty"`
	// Uses are the eggs of the workload's project whose address it
	// references, by name, sorted: the control plane's record of which eggs
	// its host serves for it (DesiredState.Services, their Names and
	// Networks), kept here because a workload is what moves between hosts.
	// Not in the spec hash: a relay, not the container, changes with it.
	Uses []string `json:"uses,omitempty"`

	Health  HealthCheck   `json:"health,omitzero"`
	Restart RestartPolicy `json:"restart,omitempty"`

	Volumes []VolumeMount `json:"volumes,omitempty"`
	// Binds are host-path bind mounts (allowed, with a warning: they tie the
	// egg to a host).
	Binds []BindMount `json:"binds,omitempty"`
	// Secrets are written by the agent to files mounted read-only at
	// /run/secrets/<name>.
	Secrets  []SecretFile      `json:"secrets,omitempty"`
	Tmpfs    []string          `json:"tmpfs,omitempty"`
	ReadOnly bool              `json:"read_only,omitempty"`
	CapAdd   []string          `json:"cap_add,omitempty"`
	CapDrop  []string          `json:"cap_drop,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	// Networks are the Docker names of the networks the containers join, the
	// first at create and the others before start.
	Networks  []string  `json:"networks,omitempty"`
	Resources Resources `json:"resources,omitzero"`
	Rollout   Rollout   `json:"rollout,omitzero"`

	StopSignal  string        `json:"stop_signal,omitempty"`
	StopTimeout time.Duration `json:"stop_timeout,omitempty"`
}

// BuildSpec says how to build the image from the workload's source Blob (the
// build context).
type BuildSpec struct {
	Dockerfile string            `json:"dockerfile,omitempty"`
	Args       map[string]string `json:"args,omitempty"`
	Target     string            `json:"target,omitempty"`
}

// PublishedPort is a host port the agent's proxy forwards to the workload.
type PublishedPort struct {
	HostPort      int    `json:"host_port"`
	ContainerPort int    `json:"container_port"`
	Protocol      string `json:"protocol,omitempty"` // "tcp" (the default)
}

// Route is a hostname, optionally with a path prefix, the ingress sends here.
type Route struct {
	Host       string `json:"host"`
	PathPrefix string `json:"path_prefix,omitempty"`
	// UpstreamTimeout bounds the ingress's wait for a replica's response
	// headers; zero is the ingress's default.
	UpstreamTimeout time.Duration `json:"upstream_timeout,omitempty"`
	// TLS is how the route's host is served over HTTPS: TLSOff (plain
	// HTTP only), TLSAuto (a certificate the control plane obtains from its
	// ACME CA) or TLSSecret (the user's certificate from secrets). Every
	// route of a hostname has the same TLS settings, across projects. The
	// certificate itself travels in DesiredState.Certificates.
	TLS string `json:"tls,omitempty"`
	// HSTS adds Strict-Transport-Security to the route's HTTPS answers
	// (opt-in: a browser remembers it for a year).
	HSTS bool `json:"hsts,omitempty"`
}

// The TLS modes of a Route.
const (
	TLSOff    = ""
	TLSAuto   = "auto"
	TLSSecret = "secret"
)

// PublicName reports whether host is a name an ACME CA can validate: not
// localhost or under it, not an IP address, not a single label. Such a
// route is served over HTTPS by default when the control plane has an ACME
// CA.
func PublicName(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	switch {
	case host == "localhost", strings.HasSuffix(host, ".localhost"), !strings.Contains(host, "."):
		return false
	case net.ParseIP(host) != nil:
		return false
	}
	return true
}

// Same reports whether r and o are the same claim (host and prefix),
// whatever their settings.
func (r Route) Same(o Route) bool { return r.Host == o.Host && r.PathPrefix == o.PathPrefix }

// HealthCheck says how a container's health is judged. HTTP and TCP are
// probed by the agent; Cmd is a Docker HEALTHCHECK run inside the container
// (and so, with its timings, part of the container's configuration). With
// none of them, a running container counts as healthy.
type HealthCheck struct {
	HTTP string   `json:"http,omitempty"`
	TCP  bool     `json:"tcp,omitempty"`
	Cmd  []string `json:"cmd,omitempty"`

	Interval    time.Duration `json:"interval,omitempty"`
	Timeout     time.Duration `json:"timeout,omitempty"`
	StartPeriod time.Duration `json:"start_period,omitempty"`
	// Retries is the number of consecutive failed checks before a container
	// counts as unhealthy (default 3).
	Retries int `json:"retries,omitempty"`
}

// RestartPolicy says what happens when a container's process exits.
type RestartPolicy string

const (
	// RestartAlways restarts on any exit, under the crash-loop back-off (the
	// default: services).
	RestartAlways RestartPolicy = "always"
	// RestartOnFailure restarts only after a non-zero exit.
	RestartOnFailure RestartPolicy = "on-failure"
	// RestartNo runs the container once per spec hash (a one-shot job).
	RestartNo RestartPolicy = "no"
)

// PullPolicy says how an egg's image tag becomes the image its containers
// run (`pull:` in hatch.yaml).
type PullPolicy string

const (
	// PullDigest (the default, also "") has the control plane resolve the
	// tag to a digest at plan, through the registry: the workload's Image
	// is pinned to it and the agent pulls it when absent.
	PullDigest PullPolicy = "digest"
	// PullAlways has the agent pull the tag before every new container,
	// whatever it has: hosts may run different bytes if the tag moves.
	PullAlways PullPolicy = "always"
	// PullMissing has the agent pull the tag only when the host has no
	// image of that name (images built or loaded on the host, registries
	// the control plane cannot reach). The control plane never asks the
	// registry.
	PullMissing PullPolicy = "missing"
)

// VolumeMount mounts a named volume.
type VolumeMount struct {
	// Name is the volume's name in the project file.
	Name string `json:"name"`
	// DockerName is its name on the Docker host.
	DockerName string `json:"docker_name"`
	Target     string `json:"target"`
	ReadOnly   bool   `json:"read_only,omitempty"`
}

// BindMount mounts a path of the host.
type BindMount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// SecretFile is a secret the agent writes to a file and mounts read-only at
// /run/secrets/<Name>.
type SecretFile struct {
	Name string `json:"name"`
	// Handle is an opaque identity of the value (its ID and a keyed hash):
	// a new value has a new handle, which is what rolls the workload.
	Handle string `json:"handle"`
	// Value is the secret itself. It is never logged (see SecretValue).
	Value SecretValue `json:"value,omitempty"`
}

// RegistryAuth is a login to an image registry, which the agent hands to
// the Engine's pull.
type RegistryAuth struct {
	// Registry is the registry's host[:port], as in the image reference
	// ("ghcr.io", "127.0.0.1:5000"; "docker.io" for Docker Hub).
	Registry string `json:"registry"`
	Username string `json:"username"`
	// Handle identifies the password (a secret's handle, or a cluster
	// login's), so a new password changes the state's version.
	Handle string `json:"handle"`
	// Password is never logged (see SecretValue), and sealed at rest.
	Password SecretValue `json:"password,omitempty"`
}

// SecretValue is a secret's content. It formats as a placeholder so that a
// spec printed or logged with %v or %s does not leak it; JSON carries it as is.
type SecretValue string

// String returns a placeholder, never the value.
func (SecretValue) String() string { return "[secret]" }

// GoString returns a placeholder, never the value.
func (SecretValue) GoString() string { return "[secret]" }

// Resources limits a container. Zero means no limit.
type Resources struct {
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	NanoCPUs    int64 `json:"nano_cpus,omitempty"`
	PIDs        int64 `json:"pids,omitempty"`
}

// Rollout settings govern how a new spec replaces the running containers.
type Rollout struct {
	Order RolloutOrder `json:"order,omitempty"`
	// MaxSurge is the number of slots rolled at once on this host (default
	// 25% of the replicas rounded up, at least 1).
	MaxSurge int `json:"max_surge,omitempty"`
	// MinReady is how long a replacement must stay healthy before the old
	// container goes.
	MinReady time.Duration `json:"min_ready,omitempty"`
	// DrainTimeout bounds how long in-flight requests may finish (default 10s).
	DrainTimeout time.Duration `json:"drain_timeout,omitempty"`
	// ProgressDeadline fails the rollout when a replacement is not healthy
	// by then (default 5m).
	ProgressDeadline time.Duration `json:"progress_deadline,omitempty"`
	// AutoRevert asks the control plane to put the previous spec back when the
	// rollout fails. The agent only reports the failure.
	AutoRevert bool `json:"auto_revert,omitempty"`
}

// RolloutOrder is start-first (the default) or stop-first.
type RolloutOrder string

const (
	StartFirst RolloutOrder = "start-first"
	StopFirst  RolloutOrder = "stop-first"
)

// Defaults for fields left zero.
const (
	DefaultHealthRetries    = 3
	DefaultDrainTimeout     = 10 * time.Second
	DefaultStopTimeout      = 10 * time.Second
	DefaultProgressDeadline = 5 * time.Minute
)

// ID returns the workload's identity, "namespace/project/egg", which the
// agent labels its containers with.
func (w WorkloadSpec) ID() string { return WorkloadID(w.Namespace, w.Project, w.Egg) }

// WorkloadID is the one spelling of an egg's workload ID,
// "namespace/project/egg": labels, desired states, the ingress and the mesh
// all name an egg by it.
func WorkloadID(namespace, project, egg string) string { return namespace + "/" + project + "/" + egg }

// Stateful reports whether the workload rolls stop-old-then-start-new: it
// mounts a named volume (one writer at a time), or asks for stop-first.
func (w WorkloadSpec) Stateful() bool {
	return len(w.Volumes) > 0 || w.Rollout.Order == StopFirst
}

// RestartPolicy returns the restart policy, "always" when unset.
func (w WorkloadSpec) RestartPolicy() RestartPolicy {
	if w.Restart == "" {
		return RestartAlways
	}
	return w.Restart
}

// MaxSurge returns how many slots may be mid-roll at once: Rollout.MaxSurge,
// or 25% of the replicas rounded up; at least 1.
func (w WorkloadSpec) MaxSurge() int {
	n := w.Rollout.MaxSurge
	if n <= 0 {
		n = (w.Replicas + 3) / 4
	}
	return max(n, 1)
}

// HealthRetries returns the failed-check threshold (default 3).
func (w WorkloadSpec) HealthRetries() int {
	if w.Health.Retries <= 0 {
		return DefaultHealthRetries
	}
	return w.Health.Retries
}

// DrainTimeout returns Rollout.DrainTimeout or its default.
func (w WorkloadSpec) DrainTimeout() time.Duration {
	return orDefault(w.Rollout.DrainTimeout, DefaultDrainTimeout)
}

// ProgressDeadline returns Rollout.ProgressDeadline or its default.
func (w WorkloadSpec) ProgressDeadline() time.Duration {
	return orDefault(w.Rollout.ProgressDeadline, DefaultProgressDeadline)
}

// EffectiveStopTimeout returns StopTimeout or its default.
func (w WorkloadSpec) EffectiveStopTimeout() time.Duration {
	return orDefault(w.StopTimeout, DefaultStopTimeout)
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// WithoutPassword returns a copy of a without its password (nil for nil):
// what may be hashed, shown or stored unsealed.
func (a *RegistryAuth) WithoutPassword() *RegistryAuth {
	if a == nil {
		return nil
	}
	c := *a
	c.Password = ""
	return &c
}
