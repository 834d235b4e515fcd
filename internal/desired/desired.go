package desired

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/placement"
	"github.com/hatchery/hatchery/internal/resource"
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

// Secrets keep the sealed values desired states carry: secrets' and the
// cluster's registry logins'.
type Secrets interface {
	store.SecretValues
	store.RegistryLogins
}

// Deps are what States work with.
type Deps struct {
	Desired  store.DesiredStates
	Statuses StatusReader
	Records  RecordReader
	Events   EventRecorder
	Secrets  Secrets
	Fleet    Fleet
	// Box seals secret values at rest and keys their fingerprints.
	Box *seal.Box
	// Scheduler is the placement policy; zero means placement.DefaultConfig().
	Scheduler placement.Config
	// ACME says the server has an ACME CA: routes of public DNS names are
	// then served over HTTPS by default (contract.TLSAuto).
	ACME bool
	// FenceAfter is the server's --fence-after, put in every host's state
	// (contract.DesiredState.FenceAfter); 0: no fencing.
	FenceAfter time.Duration
	Logger     *zap.Logger
	Now        func() time.Time
}

// States are the hosts' desired states over one store, and the operations
// that change them. They are safe for concurrent use: every change holds
// their lock (see the package doc).
type States struct {
	// mu serialises every read-modify-write of desired states (update), so
	// two operations placing eggs at once never overwrite each other's work.
	mu       sync.Mutex
	desired  store.DesiredStates
	statuses StatusReader
	records  RecordReader
	events   EventRecorder
	secrets  Secrets
	fleet    Fleet
	box      *seal.Box
	sched    *placement.Scheduler
	delay    time.Duration // the scheduler's reschedule delay
	acme     bool
	fence    time.Duration // every state's FenceAfter
	log      *zap.Logger
	now      func() time.Time // also stamps each write (store.DesiredState.UpdatedAt)
}

// New returns States; every dependency but Scheduler (which has a default)
// and ACME must be given.
func New(d Deps) (*States, error) {
	if d.Desired == nil || d.Statuses == nil || d.Records == nil || d.Events == nil || d.Secrets == nil ||
		d.Fleet == nil || d.Box == nil || d.Logger == nil || d.Now == nil {
		return nil, errors.New("desired: Desired, Statuses, Records, Events, Secrets, Fleet, Box, Logger and Now must be set")
	}
	cfg := d.Scheduler
	if cfg == (placement.Config{}) {
		cfg = placement.DefaultConfig()
	}
	sched, err := placement.New(cfg)
	if err != nil {
		return nil, err
	}
	return &States{desired: d.Desired, statuses: d.Statuses, records: d.Records, events: d.Events, secrets: d.Secrets,
		fleet: d.Fleet, box: d.Box, sched: sched, delay: cfg.RescheduleDelay, acme: d.ACME, fence: d.FenceAfter, log: d.Logger, now: d.Now}, nil
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
func (s *States) event(ctx context.Context, e store.Event) {
	e.Time = s.now()
	if _, err := s.events.AppendEvent(ctx, e); err != nil {
		s.log.Warn("event not recorded", zap.String("type", string(e.Type)), zap.Error(err))
	}
}
