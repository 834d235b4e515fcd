// Package fleet is the control plane's view of its hosts and what runs on
// them: their liveness (a host is down after a timeout without a report,
// never within one timeout of the server's start), their reports and the
// rollout events those give, where each egg of a project stands, the joining
// and removal of hosts with their tokens, the event log, and the collection
// of blobs nothing references. Its Service takes and returns plain Go values
// (package api's); it never connects to a host: agents only ever pull.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/blob"
	"github.com/hatchery/hatchery/internal/placement"
	"github.com/hatchery/hatchery/internal/store"
)

// Config tunes the fleet's background work. Start from DefaultConfig.
type Config struct {
	// LivenessTimeout is how long a host may go without a report before it is
	// marked down (agents report every 2 s).
	LivenessTimeout time.Duration
	// BlobGrace is how long an unreferenced blob is kept after its upload or
	// its last HEAD, and BlobGCInterval how often unreferenced blobs are sought.
	BlobGrace      time.Duration
	BlobGCInterval time.Duration
	// MaxHostCapacity caps what a host's report of its capacity is believed
	// at (hatch server --max-host-memory, --max-host-cpus).
	MaxHostCapacity placement.Resources
	// LoopbackMesh accepts loopback mesh addresses in reports: set when
	// the server itself listens on loopback, so its agents share its
	// machine (`hatch up`, tests). Otherwise a loopback address could only
	// make every peer dial its own machine (see CheckMeshAddresses).
	LoopbackMesh bool
}

// DefaultConfig returns the defaults documented in docs/API.md.
func DefaultConfig() Config {
	return Config{LivenessTimeout: 6 * time.Second, BlobGrace: time.Hour, BlobGCInterval: 10 * time.Minute,
		MaxHostCapacity: placement.DefaultMaxHostCapacity}
}

// Validate reports every setting that cannot work.
func (c Config) Validate() error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"liveness timeout", c.LivenessTimeout}, {"blob grace", c.BlobGrace}, {"blob gc interval", c.BlobGCInterval}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("fleet config: %s must be positive, not %v", d.name, d.v))
		}
	}
	if c.MaxHostCapacity.Memory <= 0 || c.MaxHostCapacity.MilliCPU <= 0 {
		errs = append(errs, fmt.Errorf("fleet config: the host capacity cap must be positive, not %v", c.MaxHostCapacity))
	}
	return errors.Join(errs...)
}

// DesiredStates is what the fleet reads of the hosts' desired states.
type DesiredStates interface {
	DesiredState(ctx context.Context, hostID string) (store.DesiredState, error)
	AllDesiredStates(ctx context.Context) ([]store.DesiredState, error)
	DesiredPeersVersion(ctx context.Context) (string, error)
}

// Deps are what the service works with; every one is required. Each store
// interface is the narrow one its part needs; one store usually provides
// them all.
type Deps struct {
	Liveness   store.Liveness
	Statuses   store.Statuses
	Desired    DesiredStates
	Events     store.Events
	Retention  store.BlobRetention
	Applies    store.ApplyHistory
	Projects   store.Projects
	JoinTokens store.JoinTokens
	Members    store.Members
	// AdminTokens keeps the named admin tokens.
	AdminTokens store.AdminTokens
	// Capacities keeps the hosts' capacity baselines and pins.
	Capacities store.HostCapacities
	// Blobs are collected by CollectBlobs.
	Blobs BlobCollector
	// Fingerprint is the served CA's fingerprint, which every token the
	// fleet issues carries.
	Fingerprint string
	// HostCA signs the certificates hosts present to each other on the
	// mesh (authority.HostCA): a CA of their own, never the one clients pin.
	HostCA HostSigner
	// Peers rewrites the valid host set in every host's desired state
	// (desired.States): the fleet calls it when that set or a host's mesh
	// addresses change, and once at start.
	Peers PeerSyncer
	// Registries keeps and delivers the cluster-wide registry logins
	// (desired.States).
	Registries RegistryLogins
	Logger     *zap.Logger
	// Now is the clock.
	Now func() time.Time
}

func (d Deps) validate() error {
	if d.Liveness == nil || d.Statuses == nil || d.Desired == nil || d.Events == nil || d.Retention == nil ||
		d.Applies == nil || d.Projects == nil || d.JoinTokens == nil || d.Members == nil || d.AdminTokens == nil || d.Capacities == nil || d.Blobs == nil ||
		d.HostCA == nil || d.Peers == nil || d.Registries == nil || d.Logger == nil || d.Now == nil {
		return errors.New("fleet: every dependency must be set")
	}
	if err := CheckFingerprint(d.Fingerprint); err != nil {
		return fmt.Errorf("fleet: the tokens it issues need the CA's fingerprint: %w", err)
	}
	return nil
}

// BlobCollector removes the blobs nothing references once past their
// grace: blob.Store and postgres.Blobs are ones.
type BlobCollector interface {
	Collect(ctx context.Context, referenced []string, grace time.Duration) ([]blob.Info, error)
}

// HostSigner issues host certificates; authority.HostCA is the one.
type HostSigner interface {
	// SignHost signs the key of a PEM CSR for hostID; an error wrapping
	// authority.ErrBadCSR is the request's fault.
	SignHost(csrPEM []byte, hostID string, now time.Time) ([]byte, error)
	// CertPEM is the host CA's certificate.
	CertPEM() []byte
}

// PeerSyncer rewrites every host's valid host set; desired.States are one.
type PeerSyncer interface {
	SyncPeers(ctx context.Context) error
}

// syncPeers brings every host's valid host set up to date after why; a
// failure is logged, not returned: what caused it has happened, and the next
// change or start writes the set again.
func (s *Service) syncPeers(ctx context.Context, why string) {
	if err := s.deps.Peers.SyncPeers(ctx); err != nil {
		s.log.Warn("the hosts' valid host set was not rewritten", zap.String("after", why), zap.Error(err))
	}
}

// coalescer runs a function in the background for many callers at once: a
// kick while it runs has it run once more when it is done, and its runs
// start at least gap apart, so a burst of kicks costs a run or two per gap.
type coalescer struct {
	gap time.Duration

	mu             sync.Mutex // guards the fields below
	running, again bool
}

// kick runs fn in the background, or has the run going on run once more
// (its own function: every caller's does the same work).
func (c *coalescer) kick(fn func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running {
		c.again = true
		return
	}
	c.running = true
	go c.run(fn)
}

func (c *coalescer) run(fn func()) {
	for {
		started := time.Now()
		fn()
		time.Sleep(c.gap - time.Since(started))
		c.mu.Lock()
		if !c.again {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.again = false
		c.mu.Unlock()
	}
}

// peerSyncGap spaces the peer syncs that reports ask for: a host's new mesh
// addresses reach its peers within about this long, and a fleet starting
// sends every host a handful of peer lists, not one per host.
const peerSyncGap = time.Second

// Service is the fleet. Start brings the hosts' valid host sets up to date;
// RunLoops runs the liveness monitor and the blob collector on the one
// server that runs the background loops (package leader).
type Service struct {
	cfg  Config
	deps Deps
	log  *zap.Logger
	now  func() time.Time

	liveness *liveness
	rollouts *rolloutTracker
	// reportedPeers coalesces the peer syncs that reports of new mesh
	// addresses ask for: a fleet starting reports them all at once, and
	// each new peer list goes to every host.
	reportedPeers *coalescer
	hosts         *hostsMetric
	// baselines holds the IDs of the hosts this server knows have a
	// capacity baseline, so a report records one once (recordBaseline).
	baselines sync.Map
}

// New returns a fleet; nothing runs until Start.
func New(cfg Config, deps Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := deps.validate(); err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, deps: deps, log: deps.Logger, now: deps.Now, rollouts: newRolloutTracker(),
		reportedPeers: &coalescer{gap: peerSyncGap},
		hosts:         newHostsMetric(deps.Liveness, deps.Now, deps.Logger.With(zap.String("component", "metrics")))}
	s.liveness = &liveness{store: deps.Liveness, timeout: cfg.LivenessTimeout, now: deps.Now,
		log: deps.Logger.With(zap.String("component", "liveness"))}
	return s, nil
}

// Collector is the fleet's Prometheus collector: hosts by liveness state,
// read from the store at scrape time, so every server gives the same figures.
func (s *Service) Collector() prometheus.Collector { return s.hosts }

// Start begins the fleet's life on this server. The loops run apart
// (RunLoops), on one server at a time.
func (s *Service) Start(ctx context.Context) error {
	// States written by an older server carry no valid host set, and the
	// mesh accepts nobody until they do.
	s.syncPeers(ctx, "start")
	return nil
}

// BeginLoops begins the fleet's background work on this server: every host
// becomes unknown (this server has not been watching them: silence is
// counted from now). RunLoops then runs it. The server calls both while it
// holds the loops' lease, with ctx fenced by it (package leader), so none
// of their writes lands once another server took the loops over.
func (s *Service) BeginLoops(ctx context.Context) error {
	if err := s.liveness.begin(ctx); err != nil {
		return fmt.Errorf("mark hosts unknown: %w", err)
	}
	return nil
}

// RunLoops runs the liveness monitor and the blob collector until ctx ends.
func (s *Service) RunLoops(ctx context.Context) {
	var loops sync.WaitGroup
	// Liveness checks four times per timeout, so a silent host is down
	// within 1.25 timeouts of its last report.
	loops.Go(func() {
		every(ctx, s.liveness.timeout/4, s.liveness.check, s.log.With(zap.String("component", "liveness")))
	})
	loops.Go(func() {
		every(ctx, s.cfg.BlobGCInterval, s.CollectBlobs, s.log.With(zap.String("component", "blob-gc")))
	})
	loops.Wait()
}

// every runs fn each interval until ctx ends, logging its failures.
func every(ctx context.Context, interval time.Duration, fn func(context.Context) error, log *zap.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := fn(ctx); err != nil && ctx.Err() == nil {
			logFailure(log, "periodic work failed", err)
		}
	}
}

// logFailure logs a loop's failure; one refused by the loops' fence says
// so: this server no longer holds the loops, and another runs them.
func logFailure(log *zap.Logger, msg string, err error) {
	if errors.Is(err, store.ErrFenced) {
		log.Warn("a background loop's write was refused (fenced): this server no longer holds the loops' lease", zap.Error(err))
		return
	}
	log.Warn(msg, zap.Error(err))
}

// CheckLiveness marks down, now, every host silent for longer than the
// liveness timeout; the monitor does it four times per timeout.
func (s *Service) CheckLiveness(ctx context.Context) error { return s.liveness.check(ctx) }

// CollectBlobs removes, now, the blobs nothing references that are past
// their grace. It is what the blob collector runs every BlobGCInterval, and
// may be called by whichever server runs the background loops: on
// PostgreSQL, servers collecting at once remove each blob once, and a blob
// touched meanwhile is kept.
func (s *Service) CollectBlobs(ctx context.Context) error {
	refs, err := s.deps.Retention.ReferencedBlobs(ctx)
	if err != nil {
		return err
	}
	removed, err := s.deps.Blobs.Collect(ctx, refs, s.cfg.BlobGrace)
	for _, b := range removed {
		s.log.Info("collected unreferenced blob", zap.String("digest", b.Digest), zap.Int64("bytes", b.Size))
	}
	return err
}
