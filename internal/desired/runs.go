package desired

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/placement"
	"github.com/hatchery/hatchery/internal/resource"
)

// Runs of eggs (contract.Run) in the hosts' desired states: the jobs
// service delivers a recorded run into the state of the one host that runs
// it, asks for its stop there, and takes it out once its end is recorded.
// Each is one read-modify-write of the desired states, like every change;
// the caller holds the project's lease and fences its writes with it.

// ErrRunHost is wrapped by the errors of a run that no host may take now:
// no eligible host is up, or the host it is pinned to may not run it.
var ErrRunHost = errors.New("no host may run it")

// ErrRunConflict is wrapped by the error of a run of a stateful egg whose
// replica runs, asked without stopping it: the run would be a second
// container on the egg's volume.
var ErrRunConflict = errors.New("a run would be a second container on the egg's volume")

// RunDelivery is a run to put in a host's desired state.
type RunDelivery struct {
	ID string
	// Egg is the egg's deployed record: the run's container is made from
	// its current spec.
	Egg *resource.Deployed
	// Command replaces the egg's command (nil: the egg's own).
	Command []string
	Timeout time.Duration
	// Host pins the run to a host (its ID or name); "" lets placement
	// choose among the hosts that may run the egg.
	Host string
	// StopEgg, for a stateful egg, stops its replica while the run is in
	// the desired state (ReleaseRuns with its egg puts it back); a
	// stateless egg's replicas are left alone.
	StopEgg bool
	// Stop asks the host to stop the run (it is never started if it has
	// not started yet).
	Stop bool
	// TTY gives the run's container a terminal and its operator's input
	// (contract.Run.TTY).
	TTY bool
}

// DeliverRuns puts each run in the desired state of the host that runs it
// and returns that host's ID by run ID. A run already in a host's state
// stays there (a retry, or a takeover redelivering, duplicates nothing).
// The runs that no host may take are returned apart, each with its error
// (wrapping ErrRunHost or ErrRunConflict); the others are delivered.
// before, if not nil, is called with both once the hosts are chosen and
// before anything is written: its error writes nothing (a manual run is
// recorded there, so that it is recorded before it is delivered, and not
// at all when it is refused).
func (s *States) DeliverRuns(ctx context.Context, project string, runs []RunDelivery,
	before func(hosts map[string]string, refused map[string]error) error) (hosts map[string]string, refused map[string]error, err error) {
	type prepared struct {
		RunDelivery
		egg    Egg
		values map[string]contract.SecretValue
	}
	var list []prepared
	refused = map[string]error{}
	for _, r := range runs {
		if err := checkEgg(r.Egg); err != nil {
			refused[r.ID] = fmt.Errorf("%w: %w", ErrRunHost, err)
			continue
		}
		e, err := NewEgg(project, r.Egg.Name, r.Egg.Inputs, r.Egg.Source, RevisionOf(r.Egg.Outputs))
		if err != nil {
			return nil, nil, err
		}
		e, values, err := s.eggValues(ctx, project, e)
		if err != nil {
			return nil, nil, err
		}
		list = append(list, prepared{RunDelivery: r, egg: e, values: values})
	}
	hosts = map[string]string{}
	err = s.update(ctx, func(v *view) error {
		for _, r := range list {
			if host, ok := v.runHost(r.ID); ok {
				hosts[r.ID] = host
				continue
			}
			host, err := s.runHostFor(ctx, v, r.egg, r.Host, r.StopEgg)
			if err != nil {
				if errors.Is(err, ErrRunHost) || errors.Is(err, ErrRunConflict) {
					refused[r.ID] = err
					continue
				}
				return err
			}
			w, err := r.egg.workload(host, 1, r.values)
			if err != nil {
				return err
			}
			if r.Command != nil {
				w.Command = r.Command
			}
			w.Replicas, w.Restart = 1, contract.RestartNo
			w.Routes, w.Ports, w.Health, w.Rollout = nil, nil, contract.HealthCheck{}, contract.Rollout{}
			if r.StopEgg && r.egg.in.Placement.Volume != "" {
				v.scaleWorkload(r.egg.id(), host, 0)
			}
			d := v.states[host]
			d.Runs = append(d.Runs, contract.Run{ID: r.ID, Workload: w, Timeout: r.Timeout, Stop: r.Stop, TTY: r.TTY})
			slices.SortFunc(d.Runs, func(a, b contract.Run) int { return strings.Compare(a.ID, b.ID) })
			hosts[r.ID] = host
		}
		if before != nil {
			return before(hosts, refused)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return hosts, refused, nil
}

// runHostFor chooses the host of a run of e: placement's choice of one
// replica among the hosts that may run it (a stateful egg's volume host),
// or the pinned host if it is one of those. A stateful egg whose replica
// runs is refused unless stopEgg.
func (s *States) runHostFor(ctx context.Context, v *view, e Egg, pinned string, stopEgg bool) (string, error) {
	pe := e.schedulerEgg(nil)
	pe.Replicas = 1
	if pinned != "" {
		h, ok := v.hostByIDOrName(pinned)
		if !ok {
			return "", fmt.Errorf("%w: host %q is not in the fleet", ErrRunHost, pinned)
		}
		if len(pe.Placement) > 0 && !slices.Contains(pe.Placement, h.Name) {
			return "", fmt.Errorf("%w: egg %s may run on %s only, not on host %s", ErrRunHost, e.name, strings.Join(pe.Placement, ", "), h.Name)
		}
		pe.Placement = []string{h.Name}
	}
	dec, err := s.sched.Place(ctx, pe, v.scheduled(), s.now())
	var unplaceable *placement.UnplaceableError
	switch {
	case errors.As(err, &unplaceable):
		return "", fmt.Errorf("%w: %w", ErrRunHost, err)
	case err != nil:
		return "", err
	}
	var host string
	for id, n := range dec.Slots {
		if n > 0 {
			host = id
		}
	}
	if host == "" {
		why := "no eligible host is up"
		if dec.Waiting != "" {
			why = dec.Waiting
		}
		return "", fmt.Errorf("%w: %s", ErrRunHost, why)
	}
	if pe.Volume != "" && !stopEgg {
		if n := v.slotsOf(e.id())[host]; n > 0 {
			return "", fmt.Errorf("%w: egg %s runs on host %s with volume %s (stop it for the run with --stop)",
				ErrRunConflict, e.name, v.name(host), pe.Volume)
		}
	}
	return host, nil
}

// StopRuns asks the hosts of these runs to stop them.
func (s *States) StopRuns(ctx context.Context, ids []string) error {
	return s.update(ctx, func(v *view) error {
		for _, d := range v.states {
			for i := range d.Runs {
				if slices.Contains(ids, d.Runs[i].ID) {
					d.Runs[i].Stop = true
				}
			}
		}
		return nil
	})
}

// ReleaseRuns takes these runs out of their hosts' desired states (their
// containers are removed), and then places again the eggs given (those
// whose replica a run stopped: StopEgg), by their records.
func (s *States) ReleaseRuns(ctx context.Context, project string, ids []string, eggs []*resource.Deployed) error {
	err := s.update(ctx, func(v *view) error {
		for _, d := range v.states {
			d.Runs = slices.DeleteFunc(d.Runs, func(r contract.Run) bool { return slices.Contains(ids, r.ID) })
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, rec := range eggs {
		e, err := NewEgg(project, rec.Name, rec.Inputs, rec.Source, RevisionOf(rec.Outputs))
		if err != nil {
			return err
		}
		if _, err := s.place(ctx, project, e); err != nil {
			return fmt.Errorf("start egg %s again after its run: %w", rec.Name, err)
		}
	}
	return nil
}

// runHost returns the host whose state holds the run.
func (v *view) runHost(id string) (string, bool) {
	for host, d := range v.states {
		if slices.ContainsFunc(d.Runs, func(r contract.Run) bool { return r.ID == id }) {
			return host, true
		}
	}
	return "", false
}

// hostByIDOrName returns the listed host with that ID, else the one not
// removed with that name.
func (v *view) hostByIDOrName(s string) (placement.Host, bool) {
	if h, ok := v.host(s); ok {
		return h, true
	}
	for _, h := range v.hosts {
		if h.Name == s && !h.Removed {
			return h, true
		}
	}
	return placement.Host{}, false
}

// holdForRuns keeps a stateful egg's replica stopped on each host whose
// state holds a run of it (the run's stop-first window: --stop), whoever
// places the egg meanwhile (an apply, a restart): the run and a replica
// would be two containers on the egg's volume. ReleaseRuns places the egg
// again once the run is out.
func (v *view) holdForRuns(e Egg, specs map[string]contract.WorkloadSpec) {
	if e.in.Placement.Volume == "" {
		return
	}
	for host, w := range specs {
		if slices.ContainsFunc(v.states[host].Runs, func(r contract.Run) bool { return r.Workload.ID() == e.id() }) {
			w.Replicas = 0
			specs[host] = w
		}
	}
}

// scaleWorkload sets the workload's replicas on host (its entry stays).
func (v *view) scaleWorkload(id, host string, replicas int) {
	d := v.states[host]
	for i := range d.Workloads {
		if d.Workloads[i].ID() == id {
			d.Workloads[i].Replicas = replicas
		}
	}
}
