package spec

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

// Project is a loaded project file: typed, defaulted and checked. Sections are
// sorted by name, so that everything derived from a Project is deterministic.
//
// String settings that end up in resource inputs (env values, command,
// entrypoint, image, labels...) are held in the resource package's input
// encoding: ${env.*} is already substituted, references to other resources
// are canonical (${egg/db.address}), and a literal "${" is written "$${".
type Project struct {
	Name string
	// File is the project file's path as it was given; error lines name it.
	File string
	// Dir is the directory relative paths in the file (build contexts, secret
	// files, bind mounts) are relative to: the project file's directory.
	Dir string

	Eggs     []*Egg
	Volumes  []*Volume
	Networks []*Network
	Secrets  []*Secret
	// Registries are the logins for the registries the eggs' images are
	// pulled from, by host.
	Registries []*Registry

	// Notify are the project's own webhooks (notify:), sent with its plan:
	// its notified events are posted to them from its apply on. Not
	// resources, their URLs are held as plain text (${env.*} substituted),
	// not in the input encoding.
	Notify []inputs.NotifyTarget

	// Warnings are problems that do not stop a deploy (a bind mount ties an
	// egg to one host, a volume nothing mounts...).
	Warnings []Diagnostic
}

// Egg is one entry of `eggs:`, with every default applied.
type Egg struct {
	Name string
	Line int // the line of its name

	// Exactly one of Build and Image is set.
	Build *Build
	Image string
	// Pull is when the image is pulled (`pull:`), "" for the default
	// (contract.PullDigest); never set with Build.
	Pull contract.PullPolicy

	Replicas    int // 0 = cold: kept, not running
	Command     []string
	Entrypoint  []string
	User        string
	WorkingDir  string
	Port        int // the port it listens on in its container; 0 = none
	Ports       []PortMapping
	Env         map[string]string
	Health      *Health // nil: the image's HEALTHCHECK, else tcp on Port, else "running"
	Routes      []Route
	Aliases     []string
	Rollout     Rollout
	Restart     Restart
	Resources   Resources
	Volumes     []Mount
	Tmpfs       []string
	ReadOnly    bool
	CapAdd      []string
	CapDrop     []string
	Labels      map[string]string
	Secrets     []string
	Networks    []string // never empty: "default" when the file lists none
	DependsOn   []DependsOn
	StopSignal  string
	StopTimeout time.Duration
	Placement   Placement
	// Schedule, when set, makes the egg a job run on a schedule: it has no
	// long-running replicas (Replicas is 0), no routes, ports or health
	// check. Held as its inputs are (durations canonical, defaults left
	// unset for schedule.FromInputs to apply), checked by schedule.FromInputs.
	Schedule *inputs.Schedule

	// lines maps a field name ("replicas", "rollout.order") to its line, for
	// the checks that run on the typed model.
	lines map[string]int
	// refs are the output references found in its settings, with their lines,
	// so that the project's checks can point at them; an egg whose address is
	// referenced is also where this one is placed.
	refs []lineRef
	// tlsRefs are the secrets its routes' certificates and keys come from.
	tlsRefs []lineRef
}

// lineRef is a reference to another resource's output and where it was written.
type lineRef struct {
	resource.Ref
	Line int
}

// line returns the line of one of the egg's fields, or the egg's own line
// when the field was not written.
func (e *Egg) line(field string) int {
	if l, ok := e.lines[field]; ok {
		return l
	}
	return e.Line
}

// Stateful reports whether the egg mounts a named volume: it then runs one
// replica and rolls stop-first (one volume, one writer).
func (e *Egg) Stateful() bool {
	for _, m := range e.Volumes {
		if m.Type == MountVolume {
			return true
		}
	}
	return false
}

// Build says how to build an egg's image from a directory.
type Build struct {
	// Context is the build directory relative to Project.Dir, cleaned, with
	// forward slashes (so the inputs do not depend on where hatch runs).
	Context    string
	Dockerfile string // relative to Context; default "Dockerfile"
	Args       map[string]string
	Target     string
}

// PortMapping publishes a container port on every host running the egg.
type PortMapping struct {
	Published int
	Target    int
	Protocol  string // "tcp" (the only one for now)
	Line      int
}

// Health is an egg's health check. At most one of HTTP, TCP and Cmd is set;
// with none, the timings apply to the fallback check.
type Health struct {
	HTTP        string   // path probed on Port
	TCP         bool     // connect to Port
	Cmd         []string // a Docker HEALTHCHECK: ["CMD", ...] or ["CMD-SHELL", "..."]
	Interval    time.Duration
	Timeout     time.Duration
	StartPeriod time.Duration
	Retries     int
}

// Route sends a hostname, optionally a path prefix, to an egg's Port through
// the ingress of the hosts running it.
type Route struct {
	Host string
	Path string // a prefix starting with "/", "/" for the whole host
	// UpstreamTimeout bounds the ingress's wait for a replica's response
	// headers (zero: the ingress's default, 30s); a replica past it leaves
	// the pool at once. Set in the object form of a route.
	UpstreamTimeout time.Duration
	// TLS is how the route's host is served over HTTPS: "" (the control
	// plane's default: auto for a public DNS name when it has an ACME CA,
	// else plain HTTP), TLSAuto, TLSOff, or TLSSecret with CertSecret and
	// KeySecret naming the secrets holding the PEM certificate chain and
	// key. Every route of a hostname has the same TLS settings.
	TLS                   string
	CertSecret, KeySecret string
	// HSTS adds Strict-Transport-Security to the route's HTTPS answers.
	HSTS bool
	Line int
}

// The values of Route.TLS.
const (
	TLSDefault = ""
	TLSAuto    = "auto"
	TLSOff     = "off"
	TLSSecret  = "secret"
)

// tlsSettings is what must agree between the routes of one hostname.
func (r Route) tlsSettings() string {
	return r.TLS + "|" + r.CertSecret + "|" + r.KeySecret + "|" + fmt.Sprint(r.HSTS)
}

// PublicName reports whether host is a name an ACME CA can validate
// (contract.PublicName).
func PublicName(host string) bool { return contract.PublicName(host) }

// Name is the route's resource name: the host, followed by the path unless it
// is "/" (route/shop.localhost, route/api.localhost/v1).
func (r Route) Name() string {
	if r.Path == "/" {
		return r.Host
	}
	return r.Host + r.Path
}

// Rollout says how an egg's replicas are replaced by a new spec.
type Rollout struct {
	Order            Order
	MaxSurge         Surge
	MinReady         time.Duration
	DrainTimeout     time.Duration
	ProgressDeadline time.Duration
	AutoRevert       bool
}

// Order is the order in which a slot's old and new containers swap.
type Order string

// The rollout orders.
const (
	StartFirst Order = "start-first"
	StopFirst  Order = "stop-first"
)

// Surge is how many slots of a host roll at once: Count if set, else Percent
// of the host's slots, at least one. It is the input type itself, so the
// model and the inputs cannot disagree on it.
type Surge = inputs.Surge

// Restart is an egg's restart policy.
type Restart string

// The restart policies. RestartNo makes the egg a one-shot job: it runs once
// per spec, and a dependent with condition completed waits for its success.
const (
	RestartAlways    Restart = "always"
	RestartOnFailure Restart = "on-failure"
	RestartNo        Restart = "no"
)

// Resources are an egg's limits; zero means no limit.
type Resources struct {
	Memory int64   // bytes
	CPUs   float64 // cores
	Pids   int64
}

// MountType says what a mount's source is.
type MountType string

// The mount types.
const (
	MountVolume MountType = inputs.MountVolume // a volume of `volumes:`, by name
	MountBind   MountType = inputs.MountBind   // a directory of the host (allowed, with a warning)
)

// Mount is one entry of an egg's `volumes:`.
type Mount struct {
	Type MountType
	// Source is the volume's name, or the bind mount's absolute host path.
	Source   string
	Target   string
	ReadOnly bool
	Line     int
}

// DependsOn is one entry of an egg's `depends_on:`.
type DependsOn struct {
	Egg       string
	Condition resource.Condition
	Line      int
}

// Placement restricts the hosts an egg may run on.
type Placement struct {
	Hosts []string // host names; empty = any host
}

// Volume is one entry of `volumes:`.
type Volume struct {
	Name   string
	Line   int
	Labels map[string]string
	// Backup is the volume's backup policy (backup:), as its inputs hold
	// it; nil for none.
	Backup *inputs.VolumeBackup
	// BackupLine is the line of backup:, 0 when the file has none.
	BackupLine int
	// Failover is the volume's failover policy (failover:); nil for none.
	Failover *inputs.VolumeFailover
	// FailoverLine is the line of failover:, 0 when the file has none.
	FailoverLine int
}

// Network is one entry of `networks:`, or the project's default network.
type Network struct {
	Name     string
	Line     int // 0 for a default network the file does not configure
	Internal bool
	Labels   map[string]string
}

// DefaultNetwork is the name of the network of the eggs that list none.
const DefaultNetwork = "default"

// Secret is one entry of `secrets:`. The loader never reads its value.
type Secret struct {
	Name string
	Line int
	// Exactly one of File and Env is set. File is relative to Project.Dir
	// (cleaned, forward slashes) unless absolute.
	File string
	Env  string
}

// Path returns a path the file names (a build context, a secret file), as
// held in the model, the way the running hatch command reaches it: joined to
// Dir unless absolute.
func (p *Project) Path(rel string) string {
	rel = filepath.FromSlash(unescape(rel))
	if filepath.IsAbs(rel) {
		return rel
	}
	return filepath.Join(p.Dir, rel)
}

// Egg returns the egg with the given name.
func (p *Project) Egg(name string) (*Egg, bool) {
	for _, e := range p.Eggs {
		if e.Name == name {
			return e, true
		}
	}
	return nil, false
}
