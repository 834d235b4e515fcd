package placement

import (
	"errors"
	"fmt"
	"time"
)

// DefaultRescheduleDelay is how long a host may be down before its stateless
// replicas are moved elsewhere: long enough to ride out a missed heartbeat,
// short enough that users barely notice a dead host.
const DefaultRescheduleDelay = 2 * time.Second

// ErrInvalidInput is wrapped by every error that reports malformed input (a
// negative replica count, a duplicate host ID...). Such an error is the
// caller's bug, so retrying the same call cannot help.
var ErrInvalidInput = errors.New("placement: invalid input")

// Config holds the scheduler's policy.
type Config struct {
	// RescheduleDelay is how long after a host was marked down its stateless
	// replicas are moved to live hosts. Until then they stay put, so a short
	// network blip moves nothing.
	RescheduleDelay time.Duration
}

// DefaultConfig returns the policy Hatchery runs with.
func DefaultConfig() Config { return Config{RescheduleDelay: DefaultRescheduleDelay} }

// Validate reports a policy the scheduler cannot follow.
func (c Config) Validate() error {
	if c.RescheduleDelay < 0 {
		return fmt.Errorf("scheduler config: reschedule delay %v is negative", c.RescheduleDelay)
	}
	return nil
}

// HostState is a host's liveness as the control plane last saw it.
type HostState string

const (
	// HostLive hosts heartbeat on time; only they receive new replicas.
	HostLive HostState = "live"
	// HostDown hosts missed their heartbeats since Host.DownSince.
	HostDown HostState = "down"
	// HostUnknown hosts have not been heard from since the control plane
	// started: they are probably fine, so their replicas stay, but nothing new
	// is sent their way until they report.
	HostUnknown HostState = "unknown"
)

// Resources is an amount of memory and CPU. CPU is counted in thousandths so
// that sums and comparisons are exact (the spec's `cpus: 0.5` is 500).
type Resources struct {
	Memory   int64 // bytes
	MilliCPU int64 // 1000 is one CPU
}

func (r Resources) plus(o Resources) Resources {
	return Resources{Memory: r.Memory + o.Memory, MilliCPU: r.MilliCPU + o.MilliCPU}
}

func (r Resources) minus(o Resources) Resources {
	return Resources{Memory: r.Memory - o.Memory, MilliCPU: r.MilliCPU - o.MilliCPU}
}

func (r Resources) times(n int) Resources {
	return Resources{Memory: r.Memory * int64(n), MilliCPU: r.MilliCPU * int64(n)}
}

func (r Resources) negative() bool { return r.Memory < 0 || r.MilliCPU < 0 }

// Allocation is one workload already placed on a host.
type Allocation struct {
	Workload string // the workload ID, namespace/project/egg
	Slots    int
	PerSlot  Resources // what each slot requested
}

// Host is one Docker host as the scheduler sees it.
type Host struct {
	ID   string // the host's ID: what Decision.Slots and Egg fields refer to
	Name string // the name users write in placement.hosts
	// State is the host's liveness. Removed overrides it.
	State HostState
	// DownSince is when the host was marked down; required when State is
	// HostDown, ignored otherwise.
	DownSince time.Time
	// Removed is set by `hatch hosts remove`: the host never gets replicas
	// again and its stateless ones move at once.
	Removed  bool
	Capacity Resources
	// Placed lists the workloads already on the host. Entries for the egg being
	// placed are ignored (its Current placement is what counts), so a caller
	// may pass every workload of the host without filtering.
	Placed []Allocation
}

// Egg is the egg to place, with everything that constrains where it may go.
type Egg struct {
	Namespace, Project, Name string

	Replicas   int
	PerReplica Resources // requested memory and CPU of each replica

	// Volume names the egg's volume if it is stateful; VolumeHost is the ID of
	// the host the volume lives on (chosen by ChooseVolumeHost when the volume
	// was created). A stateful egg runs there or nowhere.
	Volume     string
	VolumeHost string

	// Placement lists the host names of the egg's placement.hosts; empty
	// means any host. The eggs whose address it references do not constrain
	// it: every host reaches every egg (through the agents' mesh).
	Placement []string

	// Current is where the egg's replicas are now: host ID -> slot count.
	// The scheduler keeps every slot that is still valid, so an unchanged egg
	// on unchanged hosts moves nothing.
	Current map[string]int
}

// ID returns the egg's workload ID, namespace/project/egg, which is how
// Allocation.Workload names it.
func (e *Egg) ID() string { return e.Namespace + "/" + e.Project + "/" + e.Name }

func (e *Egg) stateful() bool { return e.Volume != "" }

// validate reports malformed input, each problem wrapped in ErrInvalidInput.
func validate(egg *Egg, hosts []Host) error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidInput}, args...)...))
	}
	if egg.Name == "" {
		bad("egg has no name")
	}
	if egg.Replicas < 0 {
		bad("egg %s: replicas %d is negative", egg.Name, egg.Replicas)
	}
	if egg.PerReplica.negative() {
		bad("egg %s: negative resources %+v", egg.Name, egg.PerReplica)
	}
	if egg.stateful() && egg.VolumeHost == "" {
		bad("egg %s: volume %s has no host yet (choose one with ChooseVolumeHost)", egg.Name, egg.Volume)
	}
	for id, n := range egg.Current {
		if n < 0 {
			bad("egg %s: %d slots on host %s is negative", egg.Name, n, id)
		}
	}
	seen := make(map[string]bool, len(hosts))
	for i := range hosts {
		h := &hosts[i]
		switch {
		case h.ID == "":
			bad("host %q has no ID", h.Name)
			continue
		case seen[h.ID]:
			bad("host ID %s appears twice", h.ID)
		}
		seen[h.ID] = true
		switch h.State {
		case HostLive, HostUnknown:
		case HostDown:
			if h.DownSince.IsZero() && !h.Removed {
				bad("host %s is down but has no DownSince", h.ID)
			}
		default:
			bad("host %s: unknown state %q", h.ID, h.State)
		}
		if h.Capacity.negative() {
			bad("host %s: negative capacity %+v", h.ID, h.Capacity)
		}
		for _, a := range h.Placed {
			if a.Slots < 0 || a.PerSlot.negative() {
				bad("host %s: allocation of %s is negative", h.ID, a.Workload)
			}
		}
	}
	return errors.Join(errs...)
}
