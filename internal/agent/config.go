package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

// Mesh is the transport between agents as the agent feeds it: the valid
// host set from each desired state. A host that leaves the set is cut off
// at once.
type Mesh interface {
	SetPeers(peers []contract.Peer)
}

// ControlPlane is the control plane as the agent needs it. HTTPClient is the
// real one; tests use an httptest server behind it, or a fake.
type ControlPlane interface {
	// DesiredState long-polls the host's desired state: it returns at once
	// when the server's version differs from version, else waits up to wait
	// for a change (ErrNotModified, or the same state, when none came).
	DesiredState(ctx context.Context, version string, wait time.Duration) (contract.DesiredState, error)
	// ReportStatus sends a status report (also the heartbeat).
	ReportStatus(ctx context.Context, r contract.StatusReport) error
}

// Optional capabilities of the Docker client (the real adapter has them all;
// the in-memory fake has none of the first three).
type (
	// workloadSetter is told the desired workloads before each converge, so
	// that its health monitor probes their containers as their specs say.
	workloadSetter interface {
		SetWorkloads(specs []contract.WorkloadSpec)
	}
	// housekeeper removes what the desired state no longer wants besides
	// containers: volumes marked for deletion, networks nothing uses.
	housekeeper interface {
		RemoveVolumes(ctx context.Context, vols []contract.VolumeSpec) error
		PruneNetworks(ctx context.Context, keep []string) error
	}
	// taskReporter tells the last failure of each background task.
	taskReporter interface {
		Failures() []containers.TaskFailure
	}
)

// Config wires an Agent. Start from DefaultConfig.
type Config struct {
	// HostID is this host's ID (from the join).
	HostID string
	// DataDir holds the desired-state cache, its seal key and the agent's
	// memory (crash history, failed rollouts).
	DataDir string
	// Docker is the host's Docker, as the converge engine drives it.
	Docker containers.Client
	// ControlPlane is where the desired state comes from and status goes.
	ControlPlane ControlPlane
	// Events is Docker's event stream: a container that dies or changes
	// health triggers a converge at once.
	Events EventSource
	// Router is the ingress: it gets the routing table after each converge
	// and hears at once of containers that died.
	Router Router
	// Mesh is the transport between agents: it gets the valid host set of
	// every desired state (its server and client accept, and reach, only
	// those hosts).
	Mesh Mesh
	// MeshAddresses are where peers reach this host's mesh port, tried in
	// order: reported with every status, so the control plane passes them
	// on in every host's Peers.
	MeshAddresses []string
	// HTTPPort and HTTPSPort are where the ingress listens (0: not), for
	// the status report.
	HTTPPort, HTTPSPort int
	// Changes is the signal the Docker adapter fires when a task ends or a
	// container's health changes (docker.Config.OnChange = Changes.Fire):
	// each firing asks for a converge.
	Changes *Signal
	// Logger receives the agent's logs.
	Logger *zap.Logger
	// Now is the agent's clock, handed to the converge engine (time.Now).
	Now func() time.Time

	// RelayImage is the image of the relays that stand for eggs on this
	// host's networks (relay.ImageFromBinary's Ref, which the Docker
	// adapter builds on first use). A desired state that calls for relays
	// reports an error without it.
	RelayImage string

	// Capacity, if known, is reported with every status for placement.
	Capacity *contract.HostCapacity
	// NoExec is reported with every status: the host's sessions refuse
	// exec (`hatch agent --no-exec`), and the control plane refuses it first.
	NoExec bool

	// ConvergeInterval is the period of the timer converge (30s).
	ConvergeInterval time.Duration
	// ConvergeTimeout bounds one converge's calls (2m): a hung Docker call
	// fails the converge instead of stopping the loop.
	ConvergeTimeout time.Duration
	// HeartbeatInterval is the period of the status heartbeat (2s).
	HeartbeatInterval time.Duration
	// EngineProbeInterval is how often the Docker Engine is asked whether
	// it answers (2s; 0: never), and EngineProbeTimeout how long it has to
	// (3s): past it, the engine is reported unresponsive.
	EngineProbeInterval, EngineProbeTimeout time.Duration
	// PollWait is how long the server may hold a desired-state long poll (30s).
	PollWait time.Duration
	// PollRetryMin and PollRetryMax bound the jittered back-off between
	// failed polls (500ms, 30s).
	PollRetryMin, PollRetryMax time.Duration
	// LogLines is how many log lines of a failed container go in the report (20).
	LogLines int
	// StaleCacheWait bounds how long, after Start, a desired state read from
	// the cache is held back from the containers created after the cache
	// was written, until the control plane first answers (10s). See
	// converge.Hold.
	StaleCacheWait time.Duration
	// CacheRetryInterval is how often a desired state that could not be
	// cached is written again (5s).
	CacheRetryInterval time.Duration
	// UntrustedLogInterval is how often a control plane whose certificate
	// does not verify against the pinned CA is logged as an error (1m).
	UntrustedLogInterval time.Duration
}

// DefaultConfig returns the timings `hatch agent` uses, on the real clock.
// The caller adds the host, the data directory and the dependencies.
func DefaultConfig() Config {
	return Config{
		Now:                  time.Now,
		ConvergeInterval:     30 * time.Second,
		ConvergeTimeout:      2 * time.Minute,
		HeartbeatInterval:    2 * time.Second,
		EngineProbeInterval:  2 * time.Second,
		EngineProbeTimeout:   3 * time.Second,
		PollWait:             30 * time.Second,
		PollRetryMin:         500 * time.Millisecond,
		PollRetryMax:         30 * time.Second,
		LogLines:             20,
		StaleCacheWait:       10 * time.Second,
		CacheRetryInterval:   5 * time.Second,
		UntrustedLogInterval: time.Minute,
	}
}

// Validate reports every setting that cannot work, missing dependencies
// included.
func (c Config) Validate() error {
	var errs []error
	if c.HostID == "" {
		errs = append(errs, errors.New("no host ID"))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("no data directory"))
	}
	if c.Docker == nil {
		errs = append(errs, errors.New("no Docker client"))
	}
	if c.ControlPlane == nil {
		errs = append(errs, errors.New("no control plane client"))
	}
	if c.Events == nil {
		errs = append(errs, errors.New("no Docker event source (Events)"))
	}
	if c.Router == nil {
		errs = append(errs, errors.New("no router (Router)"))
	}
	if c.Mesh == nil {
		errs = append(errs, errors.New("no mesh (Mesh)"))
	}
	if c.Changes == nil {
		errs = append(errs, errors.New("no change signal (Changes)"))
	}
	if c.Logger == nil {
		errs = append(errs, errors.New("no logger (Logger)"))
	}
	if c.Now == nil {
		errs = append(errs, errors.New("no clock (Now)"))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"ConvergeInterval", c.ConvergeInterval}, {"ConvergeTimeout", c.ConvergeTimeout},
		{"HeartbeatInterval", c.HeartbeatInterval}, {"PollWait", c.PollWait},
		{"PollRetryMin", c.PollRetryMin}, {"PollRetryMax", c.PollRetryMax},
		{"CacheRetryInterval", c.CacheRetryInterval}, {"UntrustedLogInterval", c.UntrustedLogInterval}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", d.name, d.v))
		}
	}
	if c.PollRetryMax < c.PollRetryMin {
		errs = append(errs, errors.New("PollRetryMax is below PollRetryMin"))
	}
	if c.StaleCacheWait < 0 {
		errs = append(errs, fmt.Errorf("StaleCacheWait must not be negative, got %s", c.StaleCacheWait))
	}
	if c.LogLines < 0 {
		errs = append(errs, errors.New("LogLines is negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("agent config: %w", err)
	}
	return nil
}
