package desired

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/cenkalti/backoff/v4"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/placement"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/store"
)

// PlaceEgg places e and writes its workloads, keeping the slots an earlier
// placement gave it, and returns its outputs (eggOutputs), with previous as
// the spec auto-revert would put back (nil: none).
func (s *States) PlaceEgg(ctx context.Context, project string, e Egg, previous *Previous) (map[string]any, error) {
	pl, err := s.place(ctx, project, e)
	if err != nil {
		return nil, err
	}
	return eggOutputs(e, pl, previous), nil
}

// RemoveEgg removes the egg's workloads from every host.
func (s *States) RemoveEgg(ctx context.Context, project, name string) error {
	id, err := workloadID(project, name)
	if err != nil {
		return err
	}
	return s.update(ctx, func(v *view) error {
		v.setWorkload(id, nil)
		return nil
	})
}

// EggReady says whether the deployed egg meets cond, from the replicas its
// hosts' latest reports list; the reason says what it waits for.
func (s *States) EggReady(ctx context.Context, project string, r *resource.Deployed, cond resource.Condition) (bool, string, error) {
	e, err := NewEgg(project, r.Name, r.Inputs, r.Source, RevisionOf(r.Outputs))
	if err != nil {
		return false, "", err
	}
	if e.Scheduled() {
		// No replica to wait for: its runs are its schedule's, not the apply's.
		return true, "", nil
	}
	v, err := s.read(ctx)
	if err != nil {
		return false, "", err
	}
	entries := v.workloadsOf(e.id())
	reports := make(map[string][]contract.ContainerStatus, len(entries))
	for host := range entries {
		st, err := s.statuses.Status(ctx, host)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return false, "", err
		}
		rep, err := contract.DecodeStatusReport(bytes.NewReader(st.Report))
		if err != nil {
			return false, "", err
		}
		if rep.Engine != nil {
			continue // its containers are the last its agent could list: none counts
		}
		reports[host] = rep.Containers
	}
	waiting, _ := r.Outputs["waiting"].(string)
	return readiness(e, entries, reports, cond, waiting, v.name)
}

// placed is where the scheduler put an egg.
type placed struct {
	hosts    []string // host IDs holding slots, sorted
	unplaced int
	waiting  string
}

// place decides where e runs and writes its workloads. Secret values and the
// egg's routes are read first, outside the lock.
func (s *States) place(ctx context.Context, project string, e Egg) (placed, error) {
	e, values, err := s.eggValues(ctx, project, e)
	if err != nil {
		return placed{}, err
	}
	routes, err := s.routesOf(ctx, project, e.name)
	if err != nil {
		return placed{}, err
	}
	var pl placed
	err = s.update(ctx, func(v *view) error {
		dec, err := s.decide(ctx, v, e)
		if err != nil {
			return err
		}
		specs := make(map[string]contract.WorkloadSpec, len(dec.Slots))
		for host, n := range dec.Slots {
			w, err := e.workload(host, n, values)
			if err != nil {
				return err
			}
			w.Routes = routes
			specs[host] = w
		}
		if err := v.checkPorts(project, e.ports()); err != nil {
			return err
		}
		for _, r := range routes { // the egg's routes go wherever it goes
			if err := v.checkRoute(project, r); err != nil {
				return err
			}
		}
		v.holdForRuns(e, specs)
		v.holdForVolumeTasks(e, specs)
		v.setWorkload(e.id(), specs)
		pl = placedOf(dec)
		return nil
	})
	return pl, err
}

// decide asks the scheduler. An egg that fits nowhere fails for good, unless
// no host is live yet (agents still starting): then it is retried.
func (s *States) decide(ctx context.Context, v *view, e Egg) (placement.Decision, error) {
	dec, err := s.placeReplicas(ctx, v, e)
	var unplaceable *placement.UnplaceableError
	switch {
	case err == nil:
		return dec, nil
	case errors.As(err, &unplaceable) && !v.anyLive():
		return dec, fmt.Errorf("%w (no host is live yet: waiting for an agent to report)", err)
	default:
		return dec, backoff.Permanent(err)
	}
}

// placeReplicas asks the scheduler where e's long-running replicas go: for
// a scheduled egg nowhere, since it has none (each of its runs is placed on
// its own when it starts, by the jobs service), so a scheduled egg is on no
// host's workloads and an egg that becomes scheduled leaves them all.
func (s *States) placeReplicas(ctx context.Context, v *view, e Egg) (placement.Decision, error) {
	if e.Scheduled() {
		return placement.Decision{}, nil
	}
	return s.sched.Place(ctx, e.schedulerEgg(v.slotsOf(e.id())), v.scheduled(), s.now())
}

func placedOf(d placement.Decision) placed {
	pl := placed{unplaced: d.Unplaced, waiting: d.Waiting}
	for host := range d.Slots {
		pl.hosts = append(pl.hosts, host)
	}
	slices.Sort(pl.hosts)
	return pl
}

// Previous is what an egg was before its last spec change: what
// auto-revert puts back.
type Previous struct {
	Inputs map[string]any
	Source string
}

// eggOutputs are an egg's outputs: the declared ones (inputs.Outputs), and
// those the control plane reads (revision, unplaced, waiting, previous).
func eggOutputs(e Egg, pl placed, previous *Previous) map[string]any {
	hosts := make([]any, len(pl.hosts))
	for i, h := range pl.hosts {
		hosts[i] = h
	}
	out := map[string]any{inputs.OutputAddress: e.address(), inputs.OutputHosts: hosts}
	if e.revision > 0 {
		out["revision"] = e.revision
	}
	if pl.unplaced > 0 {
		out["unplaced"] = pl.unplaced
	}
	if pl.waiting != "" {
		out["waiting"] = pl.waiting
	}
	if previous != nil {
		out["previous"] = map[string]any{"inputs": previous.Inputs, "source": previous.Source}
	}
	return out
}

// RevisionOf reads an egg's revision output (absent: 0).
func RevisionOf(outputs map[string]any) int { return resource.Int(outputs["revision"]) }

// PreviousOf reads an egg's previous output, if any.
func PreviousOf(outputs map[string]any) *Previous {
	m, ok := outputs["previous"].(map[string]any)
	if !ok {
		return nil
	}
	inputs, ok := m["inputs"].(map[string]any)
	if !ok {
		return nil
	}
	source, _ := m["source"].(string)
	return &Previous{Inputs: resource.Clone(inputs), Source: source}
}

// HostsOf reads an egg's hosts output.
func HostsOf(outputs map[string]any) []string {
	list, _ := outputs[inputs.OutputHosts].([]any)
	out := make([]string, 0, len(list))
	for _, h := range list {
		if s, ok := h.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// secretValues opens the values of the handles an egg uses.
func (s *States) secretValues(ctx context.Context, project string, files []contract.SecretFile) (map[string]contract.SecretValue, error) {
	values := make(map[string]contract.SecretValue, len(files))
	for _, f := range files {
		name, fp, ok := parseHandle(f.Handle)
		if !ok {
			return nil, backoff.Permanent(fmt.Errorf("secret %s: %q is not a secret handle", f.Name, f.Handle))
		}
		stored, err := s.secrets.SecretValue(ctx, project, name, fp)
		if errors.Is(err, store.ErrNotFound) {
			return nil, backoff.Permanent(fmt.Errorf("secret %s: its value is not stored (plan again, sending it)", name))
		}
		if err != nil {
			return nil, err
		}
		plain, err := s.box.Open(stored.Sealed)
		if err != nil {
			return nil, backoff.Permanent(fmt.Errorf("secret %s: %w", name, err))
		}
		values[f.Handle] = contract.SecretValue(plain)
	}
	return values, nil
}

// routesOf returns the routes of an egg, from the project's route records:
// they are the truth wherever the egg runs or moves.
func (s *States) routesOf(ctx context.Context, project, egg string) ([]contract.Route, error) {
	recs, err := s.records.ListResources(ctx, project)
	if err != nil {
		return nil, err
	}
	var out []contract.Route
	for _, r := range recs {
		if r.Type != resource.Route || r.Inputs["egg"] != egg {
			continue
		}
		in, err := decode[inputs.Route](r.Key(), r.Inputs)
		if err != nil {
			return nil, err
		}
		route, err := routeOf(in, s.acme)
		if err != nil {
			return nil, err
		}
		out = append(out, route)
	}
	sortRoutes(out)
	return out, nil
}

// readiness says whether an egg meets cond, from its entries (host ->
// workload) and the containers its hosts report. hostName names hosts in
// reasons.
func readiness(e Egg, entries map[string]contract.WorkloadSpec, reports map[string][]contract.ContainerStatus,
	cond resource.Condition, waiting string, hostName func(string) string) (bool, string, error) {
	want := 0
	for _, w := range entries {
		want += w.Replicas
	}
	if want < e.in.Replicas {
		reason := fmt.Sprintf("%d/%d replicas placed", want, e.in.Replicas)
		if waiting != "" {
			reason += ": " + waiting
		}
		return false, reason, nil
	}
	ready := 0
	for _, host := range slices.Sorted(maps.Keys(entries)) {
		w := entries[host]
		hash := contract.SpecHash(w)
		seen := map[int]bool{}
		for _, c := range reports[host] {
			if !w.Current(hash, c) || seen[c.Slot] {
				continue
			}
			switch {
			case c.RolloutFailure != "":
				return false, "", backoff.Permanent(fmt.Errorf("egg %s: rollout failed on host %s: %s", e.name, hostName(host), c.RolloutFailure))
			case cond == resource.ConditionCompleted && w.Failed(c):
				return false, "", backoff.Permanent(fmt.Errorf("job %s failed on host %s (slot %d crashed)", e.name, hostName(host), c.Slot))
			case cond == resource.ConditionCompleted && w.Finished(c),
				cond != resource.ConditionCompleted && w.ReplicaReady(c):
				seen[c.Slot] = true
				ready++
			}
		}
	}
	if ready >= want {
		return true, "", nil
	}
	if cond == resource.ConditionCompleted {
		return false, fmt.Sprintf("%d/%d replicas completed", ready, want), nil
	}
	return false, fmt.Sprintf("%d/%d replicas healthy at the new spec", ready, want), nil
}
