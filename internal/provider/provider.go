package provider

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/placement"
	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/seal"
	"github.com/hatchery/hatchery/internal/store"
)

// StatusReader reads the hosts' latest status reports (readiness).
type StatusReader interface {
	Status(ctx context.Context, hostID string) (store.Status, error)
}

// RecordReader lists a project's deployed resources (an egg reads its routes'
// records, so that its routes follow it wherever it runs).
type RecordReader interface {
	ListResources(ctx context.Context, project string) ([]*resource.Deployed, error)
}

// EventRecorder appends to the event log.
type EventRecorder interface {
	AppendEvent(ctx context.Context, e store.Event) (int64, error)
}

// Deps are what a Set works with.
type Deps struct {
	Desired  store.DesiredStates
	Statuses StatusReader
	Records  RecordReader
	Events   EventRecorder
	Secrets  store.SecretValues
	Fleet    Fleet
	// Box seals secret values at rest and keys their fingerprints.
	Box *seal.Box
	// Scheduler is the placement policy; zero means placement.DefaultConfig().
	Scheduler placement.Config
	// SecretGrace is how long a staged secret value not in use is kept (a
	// pending plan may need it); zero means DefaultSecretGrace.
	SecretGrace time.Duration
	// ACME says the server has an ACME CA: routes of public DNS names are
	// then served over HTTPS by default (contract.TLSAuto).
	ACME bool
	// OnTLSAuto is called when a route served with TLSAuto lands, so the
	// ACME client obtains its certificate at apply time (nil: nothing).
	OnTLSAuto func()
	Logger    *zap.Logger      // nil: no logs
	Now       func() time.Time // nil: time.Now
}

// DefaultSecretGrace keeps staged secret values as long as a plan lives by
// default.
const DefaultSecretGrace = time.Hour

// Set is the five providers over one store, and the egg operations outside an
// apply. It is safe for concurrent use: every change of desired states holds
// its lock (see the package doc).
type Set struct {
	states   *states
	statuses StatusReader
	records  RecordReader
	events   EventRecorder
	secrets  store.SecretValues
	box      *seal.Box
	sched    *placement.Scheduler
	delay    time.Duration // the scheduler's reschedule delay
	fleet    Fleet
	grace    time.Duration
	acme     bool
	onAuto   func()
	log      *zap.Logger
	now      func() time.Time
}

// New returns a Set; every dependency but Scheduler and SecretGrace (which
// have defaults) must be given.
func New(d Deps) (*Set, error) {
	if d.Desired == nil || d.Statuses == nil || d.Records == nil || d.Events == nil || d.Secrets == nil ||
		d.Fleet == nil || d.Box == nil || d.Logger == nil || d.Now == nil {
		return nil, errors.New("provider: Desired, Statuses, Records, Events, Secrets, Fleet, Box, Logger and Now must be set")
	}
	cfg := d.Scheduler
	if cfg == (placement.Config{}) {
		cfg = placement.DefaultConfig()
	}
	sched, err := placement.New(cfg)
	if err != nil {
		return nil, err
	}
	s := &Set{statuses: d.Statuses, records: d.Records, events: d.Events, secrets: d.Secrets, box: d.Box,
		sched: sched, delay: cfg.RescheduleDelay, fleet: d.Fleet, grace: d.SecretGrace, acme: d.ACME, onAuto: d.OnTLSAuto, log: d.Logger, now: d.Now}
	if s.grace <= 0 {
		s.grace = DefaultSecretGrace
	}
	s.states = &states{desired: d.Desired, fleet: d.Fleet, box: d.Box, log: s.log, now: d.Now}
	return s, nil
}

// Options change how a Registry's providers act, per apply.
type Options struct {
	// DeleteVolumes makes a volume's deletion delete its data (hatch destroy
	// --volumes); without it a deleted volume is retained on its host.
	DeleteVolumes bool
}

// Registry returns the providers of the five types for one apply.
func (s *Set) Registry(opts Options) reconciler.Registry {
	return reconciler.Registry{
		resource.Egg:     eggProvider{s},
		resource.Volume:  volumeProvider{s, opts},
		resource.Network: networkProvider{},
		resource.Secret:  secretProvider{s},
		resource.Route:   routeProvider{s},
	}
}

// outputsOf is the outputs package inputs declares for a kind: those its
// provider declares to the reconciler and reports.
func outputsOf(k resource.Kind) []string {
	outputs, _ := inputs.Outputs(k)
	return outputs
}

// workloadID is the workload ID (contract.WorkloadID) of egg in project,
// a "namespace/name" key.
func workloadID(project, egg string) (string, error) {
	ns, name, err := resource.SplitProject(project)
	if err != nil {
		return "", backoff.Permanent(err)
	}
	return contract.WorkloadID(ns, name, egg), nil
}

// event records an event; a failure is logged, not returned: the change it
// describes has landed and is what matters.
func (s *Set) event(ctx context.Context, e store.Event) {
	e.Time = s.now()
	if _, err := s.events.AppendEvent(ctx, e); err != nil {
		s.log.Warn("event not recorded", zap.String("type", string(e.Type)), zap.Error(err))
	}
}
