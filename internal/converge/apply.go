package converge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

// DefaultConcurrency is how many steps Apply runs at once unless told.
const DefaultConcurrency = 4

// Options tune Apply and Converge. Logger is required.
type Options struct {
	// Concurrency bounds the steps run at once (DefaultConcurrency if < 1).
	Concurrency int
	// Logger logs each step. Required.
	Logger *zap.Logger
	// OnStep, if set, is called after each step is attempted, with its error,
	// from the goroutine that ran it (so possibly concurrently).
	OnStep func(Step, error)
	// HoldCreatedAfter, if set, makes Converge leave alone the containers
	// created after it (see Hold): the agent sets it while it converges from
	// a cache written then, before the control plane has answered.
	HoldCreatedAfter time.Time
	// Stamp is written on every container Apply creates: the desired state
	// it is created for (see containers.StateStamp).
	Stamp containers.StateStamp
	// FromCache says the desired state was read from the agent's cache, at
	// Stamp's generation, and no control plane has confirmed it: if a
	// container was created for a later generation, the cache is older than
	// what runs and Converge holds every step but restarts in place (see
	// HoldNewer). Unlike HoldCreatedAfter, this guard has no time limit and
	// reads no clock.
	FromCache bool
	// BeforeApply, if set, is called by Converge with the containers it
	// listed, once the history has observed them and before the plan's
	// steps run. The agent gives its ingress the replicas that just became
	// healthy there: the same plan drains the containers they replace, and
	// the pool must have the new one before it loses the old.
	BeforeApply func(actual []containers.Container)
	// HoldStarts, if set, is asked with each listing (runs' containers
	// included) which workloads may start no container now, by ID, with
	// the reason: their start and replace steps are left out of the plan
	// (see WithoutStarts). The agent holds a stateful egg's replica while a
	// run of the egg on its volume has not ended.
	HoldStarts func(listed []containers.Container) map[string]string
	// Failures are rollouts known to have failed outside the diff, recorded
	// in the history before it (the agent's ImageFailures): the diff then
	// makes no new attempt at them.
	Failures []Failure
}

// Validate reports options Apply and Converge cannot work with.
func (o Options) Validate() error {
	if o.Logger == nil {
		return errors.New("converge options: no logger (Logger)")
	}
	return nil
}

// Apply executes a plan against the docker client. It is idempotent: a step
// whose effect is already in place (or in progress) is a cheap no-op, since the
// client only starts slow work and refuses to start it twice. Independent steps
// (all of a plan's steps are: each concerns its own container or slot) run
// concurrently, a failure on one step does not abort the rest, and the errors
// are returned joined, each naming the step's action, workload and slot, so
// the caller can log and carry on; the next converge retries what did not
// land. A cancelled ctx stops Apply from starting more steps.
func Apply(ctx context.Context, client containers.Client, desired contract.DesiredState, plan Plan, opts Options) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	log := opts.Logger
	limit := opts.Concurrency
	if limit < 1 {
		limit = DefaultConcurrency
	}
	specs := make(map[string]*contract.WorkloadSpec, len(desired.Workloads))
	for i := range desired.Workloads {
		w := &desired.Workloads[i]
		if _, dup := specs[w.ID()]; !dup {
			specs[w.ID()] = w
		}
	}

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex // guards errs
		errs []error
	)
	sem := make(chan struct{}, limit)
	for _, s := range plan.Steps {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			mu.Lock()
			errs = append(errs, fmt.Errorf("apply: %w", ctx.Err()))
			mu.Unlock()
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			err := applyStep(ctx, client, desired.HostID, opts.Stamp, specs[s.WorkloadID], s)
			if err != nil {
				err = fmt.Errorf("%s %s/%d: %w", s.Action, s.WorkloadID, s.ReplicaIndex, err)
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			log.Info("converge step", zap.String("action", string(s.Action)), zap.String("workload", s.WorkloadID),
				zap.Int("slot", s.ReplicaIndex), zap.String("container", s.ContainerID),
				zap.String("reason", s.Reason), zap.Error(err))
			if opts.OnStep != nil {
				opts.OnStep(s, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// applyStep makes the one client call a step stands for. spec is the step's
// workload, nil when it is no longer desired.
func applyStep(ctx context.Context, client containers.Client, hostID string, stamp containers.StateStamp, spec *contract.WorkloadSpec, s Step) error {
	drainTimeout, stopTimeout := contract.DefaultDrainTimeout, contract.DefaultStopTimeout
	if spec != nil {
		drainTimeout, stopTimeout = spec.DrainTimeout(), spec.EffectiveStopTimeout()
	}
	stop := containers.StopRequest{ID: s.ContainerID, WorkloadID: s.WorkloadID, Slot: s.ReplicaIndex,
		DrainTimeout: drainTimeout, StopTimeout: stopTimeout}
	switch s.Action {
	case ActionStart, ActionReplace:
		if spec == nil {
			return errors.New("workload is not desired")
		}
		return client.Start(ctx, containers.StartRequest{HostID: hostID, Spec: *spec, SpecHash: s.SpecHash,
			Slot: s.ReplicaIndex, Replace: s.ContainerID, Stamp: stamp})
	case ActionStop:
		return client.Stop(ctx, stop)
	case ActionRoll, ActionDrain:
		return client.Drain(ctx, stop)
	case ActionRestart:
		return client.Restart(ctx, containers.RestartRequest{ID: s.ContainerID, WorkloadID: s.WorkloadID,
			Slot: s.ReplicaIndex, StartedAt: s.StartedAt, StopTimeout: stopTimeout, DrainTimeout: drainTimeout})
	default:
		return fmt.Errorf("unknown action %q", s.Action)
	}
}

// Converge is the full diff-then-apply cycle: list actual containers, update
// the history with what they show, compute the plan and apply it, recording
// restarts and failed rollouts in the history. It returns the plan (for
// logging) and any converge errors. history is required (NewHistory for a
// fresh one); a converge must not run concurrently with another on the same
// history.
func Converge(ctx context.Context, client containers.Client, desired contract.DesiredState, history *History, now time.Time, opts Options) (Plan, error) {
	if history == nil {
		return Plan{}, errors.New("converge: no history")
	}
	if err := opts.Validate(); err != nil {
		return Plan{}, err
	}
	listed, err := client.List(ctx)
	if err != nil {
		return Plan{}, fmt.Errorf("list containers: %w", err)
	}
	// Runs' containers are the agent's runs' business, not replicas: no
	// history, no hold, never before the ingress.
	actual, _ := containers.SplitRuns(listed)
	history.Observe(desired, actual, now)
	for _, f := range opts.Failures {
		history.RecordFailure(f, now)
	}
	plan := Diff(desired, actual, history, now)
	if opts.FromCache {
		plan = HoldNewer(plan, actual, desired.HostID, opts.Stamp.Generation, history, now)
	}
	if !opts.HoldCreatedAfter.IsZero() {
		plan = Hold(plan, actual, desired.HostID, opts.HoldCreatedAfter)
	}
	if opts.HoldStarts != nil {
		if held := opts.HoldStarts(listed); len(held) > 0 {
			var left []Step
			plan, left = WithoutStarts(plan, held)
			for _, s := range left {
				opts.Logger.Info("start held", zap.Stringer("step", s), zap.String("reason", held[s.WorkloadID]))
			}
		}
	}
	for _, f := range plan.Failures {
		history.RecordFailure(f, now)
	}
	var mu sync.Mutex // guards history while steps run
	onStep := opts.OnStep
	opts.OnStep = func(s Step, err error) {
		if err == nil {
			mu.Lock()
			history.Record(s, now)
			mu.Unlock()
		}
		if onStep != nil {
			onStep(s, err)
		}
	}
	if opts.BeforeApply != nil && len(plan.Steps) > 0 {
		opts.BeforeApply(actual)
	}
	return plan, Apply(ctx, client, desired, plan, opts)
}
