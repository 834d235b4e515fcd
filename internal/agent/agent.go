package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/converge"
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

// relaysDir is the directory of relay sockets in the data directory.
const relaysDir = "relays"

// Agent is one host's agent: the poller, the converge loop, the heartbeat
// and the Docker event watcher, each on a goroutine the Agent owns between
// Start and Close. Its methods are safe for concurrent use.
type Agent struct {
	cfg     Config
	log     *zap.Logger
	now     func() time.Time
	cache   *Cache
	changes *Signal // a converge is wanted
	report  *Signal // a status report is wanted now
	// reachable fires when a status report goes through after failing: the
	// control plane is back, and a poll waiting out its back-off polls now.
	reachable *Signal
	docker    *logKeeper

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex // guards desired, status, started, heard and holdUntil
	desired *contract.DesiredState
	status  *contract.StatusReport
	started bool
	// heard is set once the control plane has answered a poll: the desired
	// state is then the control plane's, not the cache's.
	heard bool
	// holdUntil ends the hold on containers newer than the cache (Start +
	// StaleCacheWait), if the control plane has not answered by then.
	holdUntil time.Time

	// relayRoot holds one directory per relayed service, its socket inside.
	relayRoot string

	trust  trustWatch
	engine engineWatch

	// Owned by the loop goroutine (and by Close once the loop has ended).
	memFile   memoryFile
	mem       *memory
	crashLogs map[string]crashLog
	// cachedVersion is the version the cache holds, written at cacheWritten
	// (by the agent's clock); cacheFailing is set while writing it fails.
	cachedVersion string
	cacheWritten  time.Time
	cacheFailing  bool
	// stamp is the desired state being converged to and its generation,
	// written on every container the converge creates; topGeneration is the
	// highest generation seen on a container, and listed whether the
	// containers have been listed since Start. A new desired state gets a
	// generation above both the last one and every container's, so it is
	// never mistaken for an older one, and the count survives a cache that
	// could not be written: the containers carry it (see
	// containers.StateStamp).
	stamp         containers.StateStamp
	topGeneration int64
	listed        bool
	// holdingNewer is set while a converge from the cache holds back from
	// containers of a later state (logged when it starts and ends).
	holdingNewer bool
}

// crashLog is the log tail of one crash of a container, told apart from the
// next by the end of its back-off (which moves with every crash).
type crashLog struct {
	until time.Time
	lines []string
}

// New returns an agent with the desired state and memory it kept in its data
// directory, if any. It starts nothing: see Start.
func New(cfg Config) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With(zap.String("host", cfg.HostID))
	cache, err := OpenCache(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	a := &Agent{
		cfg: cfg, log: log, now: cfg.Now, cache: cache,
		changes: cfg.Changes, report: NewSignal(), reachable: NewSignal(),
		docker:    newLogKeeper(cfg.Docker, cfg.LogLines),
		memFile:   memoryFile{path: filepath.Join(cfg.DataDir, stateFile)},
		relayRoot: filepath.Join(cfg.DataDir, relaysDir),
		crashLogs: map[string]crashLog{},
	}
	if a.mem, err = a.memFile.load(); err != nil {
		return nil, err
	}
	cached, ok, err := cache.Load()
	d := cached.State
	switch {
	case err != nil:
		// A cache that cannot be read is not worth refusing to start for:
		// the control plane sends the state again.
		log.Error("desired-state cache unreadable; waiting for the control plane", zap.Error(err))
	case ok && d.HostID != cfg.HostID:
		log.Warn("cached desired state is for another host; ignoring it", zap.String("cached_host", d.HostID))
	case ok:
		a.desired = &d
		a.cachedVersion, a.cacheWritten = d.Version, cached.Written
		a.stamp = containers.StateStamp{Version: d.Version, Generation: cached.Generation}
		log.Info("desired state loaded from the cache", zap.String("version", d.Version), zap.Int("workloads", len(d.Workloads)),
			zap.Time("written", cached.Written), zap.Int64("generation", cached.Generation))
	}
	return a, nil
}

// Start launches the agent's goroutines and asks for a first converge (from
// the cached state, if any: the control plane may be down). It fails if the
// agent was started before.
func (a *Agent) Start() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started {
		return errors.New("agent already started")
	}
	a.started = true
	a.holdUntil = a.now().Add(a.cfg.StaleCacheWait)
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	a.goRun(func() { a.loop(ctx) })
	a.goRun(func() { a.poll(ctx) })
	a.goRun(func() { a.heartbeat(ctx) })
	if p, ok := a.cfg.Docker.(enginePinger); ok && a.cfg.EngineProbeInterval > 0 {
		a.goRun(func() { a.watchEngine(ctx, p) })
	}
	a.goRun(func() {
		watchEvents(ctx, a.cfg.Events, a.cfg.HostID, a.log, a.onEvent, a.changes.Fire)
	})
	a.changes.Fire()
	return nil
}

func (a *Agent) goRun(fn func()) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		fn()
	}()
}

// Close stops the agent's goroutines, waits for them (or for ctx), and saves
// its memory. Containers keep running: a restarted agent adopts them.
func (a *Agent) Close(ctx context.Context) error {
	a.mu.Lock()
	started := a.started
	a.mu.Unlock()
	if !started {
		return nil
	}
	a.cancel()
	done := make(chan struct{})
	go func() { a.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("close agent: %w", ctx.Err())
	}
	if err := a.memFile.save(a.mem); err != nil {
		return fmt.Errorf("close agent: %w", err)
	}
	return nil
}

// Notify asks for a converge (coalesced with any already pending).
func (a *Agent) Notify() { a.changes.Fire() }

// Status returns the last status report built, if any.
func (a *Agent) Status() (contract.StatusReport, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.status == nil {
		return contract.StatusReport{}, false
	}
	return *a.status, true
}

// Desired returns the desired state the agent converges towards, if it has
// one.
func (a *Agent) Desired() (contract.DesiredState, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.desired == nil {
		return contract.DesiredState{}, false
	}
	return *a.desired, true
}

// loop converges once per wake-up: a signalled change, the periodic timer,
// or the moment a decision the last plan waited on falls due (a crash-loop
// back-off ends, min_ready is reached, a progress deadline passes). One
// converge at a time, by construction: this goroutine is the only caller.
func (a *Agent) loop(ctx context.Context) {
	tick := time.NewTicker(a.cfg.ConvergeInterval)
	defer tick.Stop()
	due := time.NewTimer(time.Hour)
	due.Stop()
	defer due.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.changes.C():
		case <-tick.C:
		case <-due.C:
		}
		wakeAt := a.convergeSafely(ctx)
		due.Stop()
		if !wakeAt.IsZero() {
			due.Reset(max(wakeAt.Sub(a.now()), 0))
		}
	}
}

// convergeSafely runs one converge, turning a panic into a logged error so
// that one bad converge does not end the agent. It returns when the plan
// wants to be looked at again (zero: no such time).
func (a *Agent) convergeSafely(ctx context.Context) (wakeAt time.Time) {
	defer func() {
		if r := recover(); r != nil {
			a.log.Error("converge panicked; the loop goes on", zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
			a.setErrorStatus(fmt.Errorf("converge panicked: %v", r))
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, a.cfg.ConvergeTimeout)
	defer cancel()
	return a.converge(ctx)
}

// converge is one pass: converge towards the desired state (or only observe
// when there is none), remove the volumes and networks no longer wanted,
// feed the ingress, remember, and build the status report. It returns the
// plan's WakeAt.
func (a *Agent) converge(ctx context.Context) time.Time {
	now := a.now()
	desired, known, hold, fromCache := a.desiredAndHold(now)
	if !known {
		// Never heard of a desired state: change nothing, report what is.
		desired = contract.DesiredState{HostID: a.cfg.HostID}
	}
	desired, errs := withSafeNames(desired)
	// The engine converges the workloads and this host's relays; the
	// routing table and the report see the workloads only.
	withRelays, err := a.withRelays(desired)
	errs = append(errs, err)
	if ws, ok := a.cfg.Docker.(workloadSetter); ok {
		ws.SetWorkloads(withRelays.Workloads)
	}
	var plan converge.Plan
	var newerErr error
	if known {
		stamp, err := a.stampFor(ctx, desired.Version)
		if err != nil {
			// Without the containers' generations a new state's cannot be
			// told: converging now could stamp it below what runs.
			errs = append(errs, err)
			a.log.Warn("converge failed", zap.Error(errors.Join(errs...)))
			a.setErrorStatus(errs...)
			return time.Time{}
		}
		cacheErr := a.keepCache(desired, stamp.Generation, now)
		errs = append(errs, cacheErr)
		plan, err = converge.Converge(ctx, a.docker, withRelays, a.mem.History, now,
			converge.Options{Logger: a.log, HoldCreatedAfter: hold, Stamp: stamp, FromCache: fromCache,
				BeforeApply: func(actual []containers.Container) { a.routeBeforeSteps(desired, actual) }})
		if err != nil {
			errs = append(errs, fmt.Errorf("converge: %w", err))
		}
		a.noteFailures(ctx, plan)
		newerErr = a.noteNewer(plan, stamp)
		if newerErr == nil {
			// A cache older than what runs may mark for deletion a volume
			// the newer state uses again: housekeeping waits too.
			errs = append(errs, a.housekeep(ctx, withRelays))
		}
		if len(plan.Held) > 0 && len(plan.Newer) == 0 {
			a.log.Info("converging from the cache: containers created after it was written are left alone until the control plane answers",
				zap.Time("cache_written", hold), zap.Strings("held", stepStrings(plan.Held)))
			plan.WakeAt = earliest(plan.WakeAt, a.holdEnd())
		}
		if cacheErr != nil {
			plan.WakeAt = earliest(plan.WakeAt, now.Add(a.cfg.CacheRetryInterval))
		}
	}
	actual, err := a.cfg.Docker.List(ctx)
	if err != nil {
		errs = append(errs, err)
		a.log.Warn("converge failed", zap.Error(errors.Join(errs...)))
		a.setErrorStatus(errs...)
		return plan.WakeAt
	}
	a.noteGenerations(actual)
	if known {
		a.cfg.Mesh.SetPeers(desired.Peers)
	}
	// Without a desired state the table is empty: the ingress then answers
	// 404 for what it does not serve, where it answered 503 until told.
	errs = append(errs, a.route(desired, actual))
	errs = append(errs, a.memFile.save(a.mem))

	lines := errorLines(append(errs, newerErr)...)
	if tr, ok := a.cfg.Docker.(taskReporter); ok {
		lines = append(lines, taskErrors(tr.Failures())...)
	}
	if p := a.cfg.Router.HTTPSProblem(); p != "" {
		lines = append(lines, p)
	}
	report := buildReport(desired, withoutRelays(actual), a.mem, lines, now)
	report.Capacity, report.NoExec = a.cfg.Capacity, a.cfg.NoExec
	report.MeshAddresses = a.cfg.MeshAddresses
	report.HTTPPort, report.HTTPSPort = a.cfg.HTTPPort, a.cfg.HTTPSPort
	report.Challenges = slices.Sorted(slices.Values(a.cfg.Router.Challenges()))
	a.attachCrashLogs(ctx, &report)
	a.mu.Lock()
	a.status = &report
	a.mu.Unlock()
	a.report.Fire()

	switch {
	case errors.Join(errs...) != nil:
		a.log.Warn("converged with errors", zap.Int("steps", len(plan.Steps)), zap.Strings("errors", errorLines(errs...)))
	case !plan.Empty():
		a.log.Info("converged", zap.Int("steps", len(plan.Steps)), zap.Int("failures", len(plan.Failures)), zap.String("version", desired.Version))
	case known:
		a.log.Debug("converged: nothing to do", zap.String("version", desired.Version))
	}
	return plan.WakeAt
}

// withSafeNames leaves out the workloads whose names the agent cannot use,
// with an error for each: they go into container names, which the agent
// joins into paths (secret files), so a name such as "x/../../tmp" would
// reach outside the agent's directories. The control plane refuses such
// names; this guards against one that did not.
func withSafeNames(d contract.DesiredState) (contract.DesiredState, []error) {
	var errs []error
	safe := d.Workloads[:0:0]
	for _, w := range d.Workloads {
		if !containers.ValidNamePart(w.Namespace) || !containers.ValidNamePart(w.Project) || !containers.ValidNamePart(w.Egg) {
			errs = append(errs, fmt.Errorf("workload %q refused: its namespace, project and egg must each be letters, digits, '_', '.' or '-', not starting with '.' or '-'", w.ID()))
			continue
		}
		safe = append(safe, w)
	}
	d.Workloads = safe
	return d, errs
}

// keepCache writes the desired state to the cache unless the cache holds it
// already. A write that fails is retried by the next converge (the loop
// wakes for it): a cache left stale would be converged to at the next start.
// The error is logged when writing starts failing and when it works again;
// meanwhile it is in every status report.
func (a *Agent) keepCache(d contract.DesiredState, generation int64, now time.Time) error {
	if d.Version == a.cachedVersion {
		return nil
	}
	if err := a.cache.Save(d, now, generation); err != nil {
		if !a.cacheFailing {
			a.log.Error("cannot cache the desired state; retrying", zap.Error(err),
				zap.String("version", d.Version), zap.Duration("retry_every", a.cfg.CacheRetryInterval))
			a.cacheFailing = true
		}
		return fmt.Errorf("%w (retrying every %s; until it works, a restart would converge to version %q)",
			err, a.cfg.CacheRetryInterval, cmp.Or(a.cachedVersion, "none"))
	}
	if a.cacheFailing {
		a.log.Info("desired state cached again", zap.String("version", d.Version))
		a.cacheFailing = false
	}
	a.cachedVersion, a.cacheWritten = d.Version, now
	return nil
}

// desiredAndHold returns the desired state to converge towards, if any,
// whether it is the cache's (the control plane has not answered: containers
// of a later generation are left alone, see converge.HoldNewer) and, when
// it is and StaleCacheWait has not passed since Start, when the cache was
// written: containers created after that are left alone too (see
// converge.Hold; for containers of older agents, which carry no
// generation). All are read under one lock: read apart,
// a poll answered between the two reads lifted the hold of a converge
// towards the cache's state (seen: a stateful replica newer than the cache
// replaced at a restart, then replaced again by the next converge).
func (a *Agent) desiredAndHold(now time.Time) (d contract.DesiredState, known bool, holdSince time.Time, fromCache bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.desired == nil {
		return contract.DesiredState{}, false, time.Time{}, false
	}
	if !a.heard && now.Before(a.holdUntil) {
		holdSince = a.cacheWritten
	}
	return *a.desired, true, holdSince, !a.heard
}

// stampFor returns the stamp of the desired state version: the current one
// if it is that version's, else a new generation, above the last one and
// above every container's (listed first if they have not been since Start:
// a container may carry a generation the cache never recorded).
func (a *Agent) stampFor(ctx context.Context, version string) (containers.StateStamp, error) {
	if version == a.stamp.Version {
		return a.stamp, nil
	}
	if !a.listed {
		actual, err := a.cfg.Docker.List(ctx)
		if err != nil {
			return containers.StateStamp{}, fmt.Errorf("list containers for the generation of version %s: %w", version, err)
		}
		a.noteGenerations(actual)
	}
	a.stamp = containers.StateStamp{Version: version, Generation: max(a.stamp.Generation, a.topGeneration) + 1}
	return a.stamp, nil
}

// noteGenerations records the highest generation on the containers.
func (a *Agent) noteGenerations(actual []containers.Container) {
	a.listed = true
	for _, c := range actual {
		a.topGeneration = max(a.topGeneration, c.Stamp.Generation)
	}
}

// noteNewer turns a plan held back from containers newer than the cached
// state into an error for the status report (the host's problem, in `hatch
// hosts`), logged when the hold begins and when it ends. The hold lasts
// until the control plane answers, however long: only it knows the state
// those containers were made for.
func (a *Agent) noteNewer(plan converge.Plan, stamp containers.StateStamp) error {
	if len(plan.Newer) == 0 {
		if a.holdingNewer {
			a.log.Info("no container is newer than the desired state any more; converging", zap.String("version", stamp.Version))
			a.holdingNewer = false
		}
		return nil
	}
	top := plan.Newer[0]
	for _, c := range plan.Newer {
		if c.Stamp.Generation > top.Stamp.Generation {
			top = c
		}
	}
	if !a.holdingNewer {
		a.log.Warn("the cached desired state is older than the containers running: holding every change until the control plane answers",
			zap.String("cached_version", stamp.Version), zap.Int64("cached_generation", stamp.Generation),
			zap.String("newer_version", top.Stamp.Version), zap.Int64("newer_generation", top.Stamp.Generation),
			zap.Int("newer_containers", len(plan.Newer)), zap.Strings("held", stepStrings(plan.Held)))
		a.holdingNewer = true
	}
	return fmt.Errorf("desired-state cache holds version %s (generation %d), older than %d containers created for version %s (generation %d) (its write failed?): holding %d changes until the control plane answers; restarts in place go on",
		stamp.Version, stamp.Generation, len(plan.Newer), top.Stamp.Version, top.Stamp.Generation, len(plan.Held))
}

func (a *Agent) holdEnd() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.holdUntil
}

// earliest returns the earlier of two times, a zero one meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

func stepStrings(steps []converge.Step) []string {
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = s.String()
	}
	return out
}

// noteFailures keeps, for each rollout the plan gave up on, the last log
// lines of its failing container, and forgets those of rollouts the history
// no longer counts as failed (the spec changed since).
func (a *Agent) noteFailures(ctx context.Context, plan converge.Plan) {
	stopped := a.docker.take()
	for _, f := range plan.Failures {
		id := failureContainer(plan, f)
		lines, ok := stopped[id]
		if !ok {
			lines = a.docker.tail(ctx, id)
		}
		a.mem.FailureLogs[f.WorkloadID] = failureLog{SpecHash: f.SpecHash, ContainerID: id, Lines: lines}
		a.log.Warn("rollout failed", zap.String("workload", f.WorkloadID), zap.String("spec", f.SpecHash),
			zap.String("reason", f.Reason), zap.String("container", id))
	}
	for id, fl := range a.mem.FailureLogs {
		if f, ok := a.mem.History.FailedRollouts[id]; !ok || f.SpecHash != fl.SpecHash {
			delete(a.mem.FailureLogs, id)
		}
	}
}

// housekeep deletes the volumes the desired state marks for deletion and the
// networks no desired workload uses (and no container holds).
func (a *Agent) housekeep(ctx context.Context, desired contract.DesiredState) error {
	hk, ok := a.cfg.Docker.(housekeeper)
	if !ok {
		return nil
	}
	var keep []string
	for _, w := range desired.Workloads {
		keep = append(keep, w.Networks...)
	}
	slices.Sort(keep)
	return errors.Join(hk.RemoveVolumes(ctx, desired.Volumes), hk.PruneNetworks(ctx, slices.Compact(keep)))
}

// withRelays returns the desired state with the relays it calls for added
// to its workloads. Without a relay image it adds none and says so.
func (a *Agent) withRelays(desired contract.DesiredState) (contract.DesiredState, error) {
	relays := relayWorkloads(desired, a.cfg.RelayImage, a.relayRoot)
	if len(relays) == 0 {
		return desired, nil
	}
	if a.cfg.RelayImage == "" {
		return desired, fmt.Errorf("%d relays wanted, but this agent has no relay image", len(relays))
	}
	// A relay's socket directory must exist before its container is
	// created: Docker refuses a bind mount of a missing path.
	for _, r := range relays {
		if err := os.MkdirAll(r.Binds[0].Source, 0o755); err != nil {
			return desired, fmt.Errorf("relay %s: %w", r.ID(), err)
		}
	}
	desired.Workloads = append(slices.Clone(desired.Workloads), relays...)
	return desired, nil
}

// withoutRelays leaves out the relays' containers: what the status report
// shows are the eggs.
func withoutRelays(actual []containers.Container) []containers.Container {
	out := make([]containers.Container, 0, len(actual))
	for _, c := range actual {
		if !isRelay(c.WorkloadID) {
			out = append(out, c)
		}
	}
	return out
}

// route gives the ingress the routing table for what runs now.
func (a *Agent) route(desired contract.DesiredState, actual []containers.Container) error {
	if err := a.cfg.Router.Update(routingTable(desired, actual, a.mem.History, a.relayRoot)); err != nil {
		return fmt.Errorf("update ingress: %w", err)
	}
	return a.removeStaleRelayDirs(desired)
}

// routeBeforeSteps gives the ingress the routing table for what runs as a
// converge's steps are about to start. A replica first seen healthy in this
// pass joins the pool here, before the same plan drains the container it
// replaces: were the table updated only after the pass, the egg would have
// no backend on this host between the drain and that update, and with every
// host rolling at once (a restart of the egg), none anywhere. A table that
// fails to apply is reported by the route after the pass.
func (a *Agent) routeBeforeSteps(desired contract.DesiredState, actual []containers.Container) {
	if err := a.cfg.Router.Update(routingTable(desired, actual, a.mem.History, a.relayRoot)); err != nil {
		a.log.Debug("routing table before the converge steps not applied", zap.Error(err))
	}
}

// removeStaleRelayDirs removes the socket directories of services that no
// longer call for relays. It runs after the ingress closed their sockets;
// their relays are being removed by the converge.
func (a *Agent) removeStaleRelayDirs(desired contract.DesiredState) error {
	entries, err := os.ReadDir(a.relayRoot)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("relay sockets: %w", err)
	}
	wanted := make(map[string]bool)
	for _, s := range desired.Services {
		if needsRelay(s) {
			wanted[filepath.Base(relayDir(a.relayRoot, s))] = true
		}
	}
	var errs []error
	for _, e := range entries {
		if !wanted[e.Name()] {
			errs = append(errs, os.RemoveAll(filepath.Join(a.relayRoot, e.Name())))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("relay sockets: %w", err)
	}
	return nil
}

// attachCrashLogs adds the log tail of crashed and crash-looping containers,
// read once per exit.
func (a *Agent) attachCrashLogs(ctx context.Context, r *contract.StatusReport) {
	live := make(map[string]bool, len(r.Containers))
	for i := range r.Containers {
		c := &r.Containers[i]
		live[c.ContainerID] = true
		if c.LogTail != nil || !wantsLogTail(*c) {
			continue
		}
		cl, ok := a.crashLogs[c.ContainerID]
		if !ok || !cl.until.Equal(c.CrashLoopUntil) {
			cl = crashLog{until: c.CrashLoopUntil, lines: a.docker.tail(ctx, c.ContainerID)}
			a.crashLogs[c.ContainerID] = cl
		}
		c.LogTail = cl.lines
	}
	for id := range a.crashLogs {
		if !live[id] {
			delete(a.crashLogs, id)
		}
	}
}

// setErrorStatus records a converge that failed before it could see the
// containers: the last report's containers stay, with the new errors.
func (a *Agent) setErrorStatus(errs ...error) {
	a.mu.Lock()
	r := contract.StatusReport{HostID: a.cfg.HostID, Time: a.now(), Capacity: a.cfg.Capacity, MeshAddresses: a.cfg.MeshAddresses,
		NoExec: a.cfg.NoExec}
	if a.status != nil {
		r = *a.status
	}
	r.Errors = errorLines(errs...)
	a.status = &r
	a.mu.Unlock()
	a.report.Fire()
}

// onEvent handles one Docker event: a container that is gone leaves the
// ingress at once (before any converge), then a converge looks at it.
func (a *Agent) onEvent(kind containerEvent, containerID string) {
	if kind == eventGone {
		a.cfg.Router.Gone(containerID)
	}
	a.changes.Fire()
}

// poll long-polls the desired state until ctx ends. A new version is cached
// and converged towards; errors are retried with jittered exponential
// back-off, logged when the control plane becomes unreachable and again when
// it is back. A status report that goes through ends the back-off at once:
// after an outage, an apply must not wait up to PollRetryMax to arrive.
func (a *Agent) poll(ctx context.Context) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = a.cfg.PollRetryMin, a.cfg.PollRetryMax, 0
	b.RandomizationFactor = 0.5
	failing := false
	for ctx.Err() == nil {
		version := ""
		if d, ok := a.Desired(); ok {
			version = d.Version
		}
		// The first poll does not wait: until the control plane answers,
		// the agent holds back from containers newer than its cache.
		wait := a.cfg.PollWait
		if !a.hasHeard() {
			wait = 0
		}
		began := time.Now()
		d, err := a.cfg.ControlPlane.DesiredState(ctx, version, wait)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = a.accept(d, version)
		}
		untrusted := a.checkTrust(err)
		switch {
		case err == nil || errors.Is(err, ErrNotModified):
			a.setHeard()
			if failing {
				a.log.Info("control plane reachable again")
				failing = false
			}
			b.Reset()
			// A server that answers "unchanged" at once, again and again,
			// must not make the agent spin.
			if (err != nil || d.Version == version) && time.Since(began) < a.cfg.PollRetryMin {
				sleep(ctx, b.NextBackOff())
			}
		default:
			wait := b.NextBackOff()
			if untrusted {
				// A configuration error, not an outage: checkTrust logs it.
			} else if !failing {
				a.log.Warn("cannot get the desired state; containers keep running, converging from the cache",
					zap.Error(err), zap.Duration("retry_in", wait))
				failing = true
			} else {
				a.log.Debug("desired state poll failed", zap.Error(err), zap.Duration("retry_in", wait))
			}
			// A report that went through since the last poll (even before
			// this failure) ends the wait: at worst one poll too many.
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
			case <-timer.C:
			case <-a.reachable.C():
			}
			timer.Stop()
		}
	}
}

// accept takes a desired state from the control plane: a new version is
// converged towards at once (the converge caches it first).
func (a *Agent) accept(d contract.DesiredState, held string) error {
	if d.HostID != a.cfg.HostID {
		return fmt.Errorf("desired state for host %q, but this is host %q", d.HostID, a.cfg.HostID)
	}
	if d.Version == "" && (len(d.Workloads) > 0 || len(d.Volumes) > 0) {
		d.Seal() // a server that sent no version: the content's hash is one
	}
	if d.Version == held {
		// Unchanged; or, with nothing held, the empty state (version "") of
		// a host the control plane has never given anything: an agent that
		// holds nothing stays hands-off rather than converging to nothing.
		return nil
	}
	// The loop caches it before converging towards it (and retries a
	// failed write).
	a.mu.Lock()
	a.desired = &d
	a.heard = true // the control plane's own: nothing is held back from it
	a.mu.Unlock()
	a.log.Info("new desired state", zap.String("version", d.Version), zap.Int("workloads", len(d.Workloads)))
	a.changes.Fire()
	return nil
}

// hasHeard reports whether the control plane has answered a poll.
func (a *Agent) hasHeard() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.heard
}

// setHeard records that the control plane answered; the first time, with
// a desired state held, a converge follows, which no longer holds anything
// back.
func (a *Agent) setHeard() {
	a.mu.Lock()
	first := !a.heard && a.desired != nil
	a.heard = true
	a.mu.Unlock()
	if first {
		a.changes.Fire()
	}
}

// heartbeat sends the latest status report every HeartbeatInterval, and at
// once after each converge, from the first converge (or failed attempt) on. It runs on its own goroutine so that a slow
// control plane never holds up a converge, and a long converge never
// silences the heartbeat.
func (a *Agent) heartbeat(ctx context.Context) {
	t := time.NewTicker(a.cfg.HeartbeatInterval)
	defer t.Stop()
	failing := false
	server := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.report.C():
		}
		r, ok := a.Status()
		if !ok {
			// Nothing seen yet: an empty report would tell the control plane
			// that nothing runs here. The first converge comes at once.
			continue
		}
		r.Time = a.now()
		r.Engine = a.engine.current()
		rctx, cancel := context.WithTimeout(ctx, max(a.cfg.HeartbeatInterval, 5*time.Second))
		err := a.cfg.ControlPlane.ReportStatus(rctx, r)
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case a.checkTrust(err):
			// A configuration error, not an outage: checkTrust logs it.
		case err != nil && !failing:
			a.log.Warn("cannot report status", zap.Error(err))
			failing = true
		case err == nil && failing:
			a.log.Info("status reported again")
			failing = false
			a.reachable.Fire()
		}
		if err == nil {
			server = a.noteServer(server)
		}
	}
}

// serverNamer is a control plane client that knows several servers and
// says which one it talks to now (HTTPClient).
type serverNamer interface {
	Server() string
}

// noteServer logs a move to another of the control plane's servers (the
// one it talked to stopped answering); last is the server of the last
// report, and it returns the current one.
func (a *Agent) noteServer(last string) string {
	n, ok := a.cfg.ControlPlane.(serverNamer)
	if !ok {
		return last
	}
	now := n.Server()
	if last != "" && now != last {
		a.log.Info("now talking to another server of the control plane", zap.String("server", now), zap.String("was", last))
	}
	return now
}
