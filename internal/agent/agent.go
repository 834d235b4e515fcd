package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/converge"
)

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
	fence  fenceWatch
	// tasks runs the volume tasks this process began.
	tasks *taskExecutor

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
	a.tasks = newTaskExecutor(log, cfg.Now, cfg.Changes.Fire)
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
	a.fence.start(a.now())
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
	// The loop has ended: the memory keeps the volume tasks as it last saw
	// them (running), so the next process reports them cut short.
	if err := a.tasks.close(ctx); err != nil {
		return fmt.Errorf("close agent: %w", err)
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
		// The cache keeps the Fenced workloads; the converge does not while
		// the fence is up, and starts none of them until a server confirms
		// the host.
		fv := a.fence.view(desired.FenceAfter, !fromCache)
		withRelays, fenceWake, fenceErr := a.applyFence(withRelays, fv, now)
		errs = append(errs, fenceErr)
		holdFenced := fenceHoldsStarts(fv)
		var pullFailures []converge.Failure
		if tr, ok := a.cfg.Docker.(taskReporter); ok {
			pullFailures = converge.ImageFailures(withRelays, tr.Failures())
		}
		plan, err = converge.Converge(ctx, a.docker, withRelays, a.mem.History, now,
			converge.Options{Logger: a.log, HoldCreatedAfter: hold, Stamp: stamp, FromCache: fromCache, Failures: pullFailures,
				BeforeApply: func(actual []containers.Container) { a.routeBeforeSteps(desired, actual) },
				HoldStarts: func(listed []containers.Container) map[string]string {
					held := runHolds(desired, listed)
					if holdFenced {
						maps.Copy(held, fenceHolds(withRelays))
					}
					return held
				}})
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
		plan.WakeAt = earliest(plan.WakeAt, fenceWake)
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
	// Runs' containers are no replicas: neither routed nor reported as
	// containers. The runs are handled after the converge, on this
	// listing, so that a run waits for a replica the converge just began
	// to stop.
	replicas, _ := containers.SplitRuns(actual)
	var runs []contract.RunStatus
	var volumeTasks []contract.VolumeTaskStatus
	if known {
		var runErrs []error
		var runWake time.Time
		runs, runErrs, runWake = a.handleRuns(ctx, desired, actual, fromCache, now)
		errs = append(errs, runErrs...)
		plan.WakeAt = earliest(plan.WakeAt, runWake)
		var taskErrs []error
		volumeTasks, taskErrs = a.handleVolumeTasks(ctx, desired, fromCache, now)
		errs = append(errs, taskErrs...)
	}
	// Without a desired state (the cache unreadable) the ingress keeps
	// what it serves: the data plane an earlier agent fed serves its table
	// on, where an empty one would answer 404 for every route until the
	// control plane answers; a new one answers 503 until told.
	if known {
		errs = append(errs, a.route(desired, replicas))
	}
	errs = append(errs, a.memFile.save(a.mem))

	lines := errorLines(append(errs, newerErr)...)
	if tr, ok := a.cfg.Docker.(taskReporter); ok {
		lines = append(lines, taskErrors(withoutRunTasks(tr.Failures()))...)
	}
	if p := a.cfg.Router.HTTPSProblem(); p != "" {
		lines = append(lines, p)
	}
	report := buildReport(desired, withoutRelays(replicas), a.mem, lines, now)
	report.Runs = runs
	report.VolumeTasks = volumeTasks
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
		if !contract.ValidNamePart(w.Namespace) || !contract.ValidNamePart(w.Project) || !contract.ValidNamePart(w.Egg) {
			errs = append(errs, fmt.Errorf("workload %q refused: its namespace, project and egg must each be letters, digits, '_', '.' or '-', not starting with '.' or '-'", w.ID()))
			continue
		}
		safe = append(safe, w)
	}
	d.Workloads = safe
	return d, errs
}

// earliest returns the earlier of two times, a zero one meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
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
	keep = append(keep, runNetworks(desired.Runs)...)
	slices.Sort(keep)
	return errors.Join(hk.RemoveVolumes(ctx, desired.Volumes), hk.PruneNetworks(ctx, slices.Compact(keep)))
}

// onEvent handles one Docker event: a container that is gone leaves the
// ingress at once (before any converge), then a converge looks at it.
func (a *Agent) onEvent(kind containerEvent, containerID string) {
	if kind == eventGone {
		a.cfg.Router.Gone(containerID)
	}
	a.changes.Fire()
}
