package fleet

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

// This file is where each
// egg of a project stands, worked out on the server from the hosts' desired
// states and reports, so that a client (hatch status, the rollout following
// of hatch apply) never reads a desired state, which carries secret values
// meant for agents only. The answer holds no spec but replica counts and
// whether a container is at its spec; a workload's secret values are never
// even opened here.

// statusHost is one host as a project's status needs it.
type statusHost struct {
	ID, Name string
	State    store.HostState
	// Workloads are the project's workloads in the host's desired state.
	Workloads []contract.WorkloadSpec
	// Runs are the project's runs in the host's desired state: run ID to
	// egg.
	Runs map[string]string
	// Containers are those its agent last reported of Workloads; nil
	// before a report.
	Containers []contract.ContainerStatus
	// Errors are the problems its agent last reported.
	Errors []string
	// Engine is set while its agent reports that its Docker Engine does
	// not answer: its containers are then not to be believed.
	Engine *contract.EngineProblem
	// NoExec: its agent last reported it refuses exec (--no-exec).
	NoExec bool
}

func (h statusHost) label() string { return cmp.Or(h.Name, h.ID) }

// projectStatus works out where each egg of the project stands, from its
// hosts (removed ones left out) and its deployed records (which say how many
// replicas found no host, and why). Eggs come sorted by name, their hosts by
// name. It is pure: the clock (for crash-loop back-offs) is an argument.
func projectStatus(namespace, project string, hosts []statusHost, records []*resource.Deployed, now time.Time) api.ProjectStatus {
	out := api.ProjectStatus{Namespace: namespace, Project: project, Eggs: []api.EggStatus{}}
	tallies := map[string]*eggTally{}
	tally := func(egg string) *eggTally {
		t := tallies[egg]
		if t == nil {
			t = &eggTally{EggStatus: api.EggStatus{Name: egg, Rollout: api.Rollout{State: phaseDone}, Hosts: []api.EggHost{}}}
			tallies[egg] = t
		}
		return t
	}
	for _, h := range hosts {
		if h.State == store.HostUp {
			out.HostsUp++
		}
		for _, w := range h.Workloads {
			if w.Namespace == namespace && w.Project == project {
				tally(w.Egg).addHost(h, w, now)
			}
		}
	}
	for _, r := range records {
		if r.Type == "egg" {
			waiting, _ := r.Outputs["waiting"].(string)
			tally(r.Name).addUnplaced(resource.Int(r.Outputs["unplaced"]), waiting)
		}
	}
	for _, t := range tallies {
		out.Eggs = append(out.Eggs, t.finish())
	}
	slices.SortFunc(out.Eggs, func(a, b api.EggStatus) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// eggTally adds an egg up host by host.
type eggTally struct {
	api.EggStatus
	notUp   []string // "host b is down", for hosts not up that should run some, or not heard from yet
	waiting string   // why replicas are not placed
}

// addHost counts the egg's workload w on host h. A host not up counts no
// replica as ready and keeps the egg waiting for it.
func (t *eggTally) addHost(h statusHost, w contract.WorkloadSpec, now time.Time) {
	hash := contract.SpecHash(w)
	p := assess(w, hash, h.Containers)
	view := api.EggHost{ID: h.ID, Name: h.Name, State: string(h.State), Desired: w.Replicas, Ready: p.ready, Rollout: p.phase,
		Containers: []api.ContainerStatus{}, Errors: h.Errors}
	for _, c := range h.Containers {
		if c.WorkloadID != w.ID() {
			continue
		}
		view.Containers = append(view.Containers, api.ContainerStatus{Slot: c.Slot, State: c.State, Healthy: c.Healthy,
			Current: w.Current(hash, c), Restarts: c.Restarts, CrashLoopUntil: c.CrashLoopUntil,
			RolloutFailure: c.RolloutFailure, LogTail: c.LogTail})
		t.Restarts += c.Restarts
		if c.CrashLoopUntil.After(now) {
			t.CrashLooping++
		}
	}
	t.Hosts = append(t.Hosts, view)
	t.Desired += w.Replicas
	// An unknown host has not reported since the server started (or since
	// it joined): its last report, if any, is the best there is, and the
	// egg waits for its next one rather than showing a rollout that is not
	// happening.
	up := h.State == store.HostUp || h.State == store.HostUnknown
	if h.State == store.HostUnknown && w.Replicas > 0 {
		t.notUp = append(t.notUp, fmt.Sprintf("waiting for host %s's first report", h.label()))
	}
	switch {
	case up && h.Engine != nil:
		// The containers are the last the agent could list: none counts.
		if w.Replicas > 0 {
			t.notUp = append(t.notUp, fmt.Sprintf("host %s's Docker Engine has not answered since %s", h.label(),
				h.Engine.Since.UTC().Format(time.TimeOnly)))
			t.worsen(phaseProgressing)
		}
	case !up && w.Replicas > 0:
		// Nothing rolls on a host that is down: its replicas wait for it
		// (shown as "rolling", an egg whose only host was down looked busy).
		t.notUp = append(t.notUp, fmt.Sprintf("host %s is %s", h.label(), h.State))
		t.worsen(phaseWaiting)
	case p.phase == phaseFailed:
		t.Ready += p.ready
		if t.Rollout.State != phaseFailed { // the first failure found says why
			t.Rollout = api.Rollout{State: phaseFailed, Reason: fmt.Sprintf("on %s: %s", h.label(), p.reason), LogTail: p.logTail}
		}
	default:
		t.Ready += p.ready
		t.worsen(p.phase)
	}
	if up {
		t.Previous += p.others
	}
}

// addUnplaced counts replicas the scheduler found no host for: desired, and
// keeping the egg waiting.
func (t *eggTally) addUnplaced(n int, why string) {
	if n <= 0 {
		return
	}
	t.Unplaced += n
	t.Desired += n
	t.waiting = why
	t.worsen(phaseWaiting)
}

// finish sorts the hosts and says why the rollout is not done, unless it
// failed (the failure says it).
func (t *eggTally) finish() api.EggStatus {
	slices.SortFunc(t.Hosts, func(a, b api.EggHost) int {
		return cmp.Or(cmp.Compare(cmp.Or(a.Name, a.ID), cmp.Or(b.Name, b.ID)), cmp.Compare(a.ID, b.ID))
	})
	switch {
	case t.Rollout.State == phaseFailed:
	case t.Unplaced > 0:
		t.Rollout.Reason = fmt.Sprintf("%d not placed", t.Unplaced)
		if t.waiting != "" {
			t.Rollout.Reason += ": " + t.waiting
		}
	case len(t.notUp) > 0:
		t.Rollout.Reason = strings.Join(t.notUp, ", ")
	}
	return t.EggStatus
}

// worsen moves the egg's rollout state to p if p is further from done:
// failed, then waiting, then progressing, then done.
func (t *eggTally) worsen(p rolloutPhase) {
	rank := map[rolloutPhase]int{phaseDone: 0, phaseProgressing: 1, phaseWaiting: 2, phaseFailed: 3}
	if rank[p] > rank[t.Rollout.State] {
		t.Rollout.State = p
	}
}

// ProjectStatus works out where each egg of the project stands, from the
// hosts' desired states and reports, so that a client (hatch status, the
// rollout following of hatch apply) never reads a desired state, which
// carries secret values meant for agents only. A project with no record, no
// apply and no workload on any host gives api.CodeNotFound.
func (s *Service) ProjectStatus(ctx context.Context, ns, name string) (api.ProjectStatus, error) {
	key := resource.Project(ns, name)
	records, err := s.deps.Projects.ListResources(ctx, key)
	if err != nil {
		return api.ProjectStatus{}, err
	}
	applies, err := s.deps.Applies.Applies(ctx, key)
	if err != nil {
		return api.ProjectStatus{}, err
	}
	hosts, err := s.statusHosts(ctx, ns, name)
	if err != nil {
		return api.ProjectStatus{}, err
	}
	deployed := slices.ContainsFunc(hosts, func(h statusHost) bool { return len(h.Workloads) > 0 })
	if len(records) == 0 && len(applies) == 0 && !deployed {
		return api.ProjectStatus{}, api.NotFound("no project %q in namespace %q", name, ns)
	}
	return projectStatus(ns, name, hosts, records, s.now()), nil
}

// statusHosts reads every host not removed: its liveness, the project's
// workloads in its desired state and, of its last report, the containers of
// those workloads only (a host is trusted with what is placed on it: a
// container it claims for a workload placed elsewhere is acted on nowhere).
func (s *Service) statusHosts(ctx context.Context, namespace, project string) ([]statusHost, error) {
	hosts, err := s.deps.Statuses.ListHosts(ctx)
	if err != nil {
		return nil, err
	}
	identities, err := s.hostIdentities(ctx)
	if err != nil {
		return nil, err
	}
	desired, reports, err := s.statesAndReports(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]statusHost, 0, len(hosts))
	for _, h := range hosts {
		id := identities[h.ID]
		if !id.RemovedAt.IsZero() {
			continue
		}
		sh := statusHost{ID: h.ID, Name: id.Name, State: h.State}
		if sh.Workloads, sh.Runs, err = projectWorkloads(desired[h.ID], namespace, project); err != nil {
			return nil, err
		}
		if st := reports[h.ID]; st != nil {
			report, err := contract.DecodeStatusReport(bytes.NewReader(st.Report))
			if err != nil {
				return nil, fmt.Errorf("host %s: stored report: %w", h.ID, err)
			}
			sh.Errors, sh.NoExec, sh.Engine = report.Errors, report.NoExec, report.Engine
			sh.Containers = placedOnly(sh.Workloads, report.Containers)
		}
		out = append(out, sh)
	}
	return out, nil
}

// projectWorkloads returns the project's workloads in a host's stored
// desired state, and its runs (run ID to egg). The state is decoded as
// stored, its secret values sealed, and those are dropped too: spec hashes
// leave them out, and nothing else needs them.
func projectWorkloads(stored store.DesiredState, namespace, project string) ([]contract.WorkloadSpec, map[string]string, error) {
	if len(stored.Doc) == 0 {
		return nil, nil, nil
	}
	d, err := contract.DecodeDesiredState(bytes.NewReader(stored.Doc))
	if err != nil {
		return nil, nil, fmt.Errorf("host %s: stored desired state: %w", stored.HostID, err)
	}
	var out []contract.WorkloadSpec
	for _, w := range d.Workloads {
		if w.Namespace != namespace || w.Project != project {
			continue
		}
		for i := range w.Secrets {
			w.Secrets[i].Value = ""
		}
		w.PullAuth = w.PullAuth.WithoutPassword()
		out = append(out, w)
	}
	var runs map[string]string
	for _, r := range d.Runs {
		if r.Workload.Namespace == namespace && r.Workload.Project == project {
			if runs == nil {
				runs = map[string]string{}
			}
			runs[r.ID] = r.Workload.Egg
		}
	}
	return out, runs, nil
}
