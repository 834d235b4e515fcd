package provider

import (
	"fmt"
	"time"

	"github.com/hatchery/hatchery/internal/desired"
	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/seal"
	"github.com/hatchery/hatchery/internal/store"
)

// Deps are what a Set works with: the hosts' desired states' own, and the
// providers'.
type Deps struct {
	desired.Deps
	// SecretGrace is how long a staged secret value not in use is kept (a
	// pending plan may need it); zero means DefaultSecretGrace.
	SecretGrace time.Duration
	// OnTLSAuto is called when a route served with TLSAuto lands, so the
	// ACME client obtains its certificate at apply time (nil: nothing).
	OnTLSAuto func()
}

// DefaultSecretGrace keeps staged secret values as long as a plan lives by
// default.
const DefaultSecretGrace = time.Hour

// Set is the five providers over the hosts' desired states. The States are
// embedded because the control plane also runs them directly, on the same
// lock: on eggs outside an apply (rollout restart, auto-revert,
// rescheduling), for the plan's preview and for the ACME client's
// certificates; it holds one Set for all of it. A Set is safe for concurrent
// use, as States are.
type Set struct {
	*desired.States
	secrets store.SecretValues
	box     *seal.Box
	grace   time.Duration
	onAuto  func()
	now     func() time.Time
}

// New returns a Set; every dependency but Scheduler, ACME, SecretGrace and
// OnTLSAuto (which have defaults) must be given.
func New(d Deps) (*Set, error) {
	states, err := desired.New(d.Deps)
	if err != nil {
		return nil, fmt.Errorf("provider: %w", err)
	}
	s := &Set{States: states, secrets: d.Secrets, box: d.Box, grace: d.SecretGrace, onAuto: d.OnTLSAuto, now: d.Now}
	if s.grace <= 0 {
		s.grace = DefaultSecretGrace
	}
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
