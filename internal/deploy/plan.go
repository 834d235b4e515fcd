package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/desired"
	"github.com/hatchery/hatchery/internal/graph"
	"github.com/hatchery/hatchery/internal/provider"
	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/spec"
	"github.com/hatchery/hatchery/internal/store"
)

// storedPlan is a plan as the service keeps it until apply: what rebuilds
// the graph (secret values are staged apart, sealed; the inputs carry their
// fingerprints), the options, and the state it was made against.
type storedPlan struct {
	Resources     []api.DesiredResource `json:"resources"`
	Dependencies  []api.Dependency      `json:"dependencies"`
	Destroy       bool                  `json:"destroy,omitempty"`
	DeleteVolumes bool                  `json:"delete_volumes,omitempty"`
	StateHash     string                `json:"state_hash"`
	// Summary is one line of what the plan changes, for the history.
	Summary string `json:"summary,omitempty"`
	// RollbackOf is the apply whose inputs a rollback plan applies again.
	RollbackOf int64 `json:"rollback_of,omitempty"`
	// Notify are the project's webhooks, kept with the apply (NotifyTargets).
	Notify []inputs.NotifyTarget `json:"notify,omitempty"`
}

// blobs are the digests the plan's resources are built from.
func (p storedPlan) blobs() []string {
	var out []string
	for _, d := range p.Resources {
		if d.Source != "" {
			out = append(out, d.Source)
		}
	}
	return out
}

var symbols = map[reconciler.Action]string{
	reconciler.ActionCreate: "+", reconciler.ActionUpdate: "~", reconciler.ActionDelete: "-", reconciler.ActionUnchanged: "=",
}

// Plan works out what applying req to the project ("<namespace>/<project>")
// would change, and keeps the plan for Apply until PlanTTL passes. Secret
// values are staged, sealed, apart from the plan. A request that cannot
// make a plan gives an *api.Error naming the field; a plan that conflicts
// with another project (a route held) gives one with api.CodeConflict.
func (s *Service) Plan(ctx context.Context, project string, req api.PlanRequest) (api.Plan, error) {
	if err := checkPlanRequest(req, spec.Limits{MaxReplicas: s.cfg.MaxReplicas}); err != nil {
		return api.Plan{}, err
	}
	if err := checkFailover(req.Resources, s.cfg.FenceAfter, s.cfg.RequestTimeout); err != nil {
		return api.Plan{}, err
	}
	for i, d := range req.Resources {
		if d.Source == "" {
			continue
		}
		ok, err := s.deps.Sources.HasSource(ctx, d.Source)
		if err != nil {
			return api.Plan{}, err
		}
		if !ok {
			return api.Plan{}, api.BadRequest("resources[%d].source: blob %s is not uploaded (PUT /api/v1/blobs/{digest} first)", i, d.Source)
		}
	}
	resources := slices.Clone(req.Resources)
	for i := range resources {
		d := &resources[i]
		if d.Type != resource.Secret {
			continue
		}
		fp, err := s.deps.Providers.StageSecret(ctx, project, d.Name, []byte(req.Secrets[d.Name]))
		if err != nil {
			return api.Plan{}, err
		}
		d.Inputs = resource.Clone(d.Inputs)
		if d.Inputs == nil {
			d.Inputs = map[string]any{}
		}
		d.Inputs[provider.FingerprintInput] = fp
	}
	resources, err := s.pinImages(ctx, resources, req.Secrets)
	if err != nil {
		return api.Plan{}, err
	}
	return s.makePlan(ctx, project, planInputs{Resources: resources, Dependencies: req.Dependencies,
		Destroy: req.Destroy, DeleteVolumes: req.DeleteVolumes, Notify: req.Notify})
}

// planInputs are what a plan is made of: the resources with their secrets
// staged (fingerprints in their inputs), and for a rollback the apply it
// takes them from and what the plan should say about it.
type planInputs struct {
	Resources     []api.DesiredResource `json:"resources"`
	Dependencies  []api.Dependency      `json:"dependencies"`
	Destroy       bool                  `json:"destroy,omitempty"`
	DeleteVolumes bool                  `json:"delete_volumes,omitempty"`
	// Notify are the project's webhooks: a rollback brings back those of
	// the apply it repeats, as it does the rest of its spec.
	Notify     []inputs.NotifyTarget `json:"notify,omitempty"`
	rollbackOf int64
	notes      []string
}

// makePlan plans checked inputs against the project's deployed state and
// stores the plan for Apply.
func (s *Service) makePlan(ctx context.Context, project string, in planInputs) (api.Plan, error) {
	if _, err := s.deps.Plans.DeleteExpiredPlans(ctx, s.now()); err != nil {
		return api.Plan{}, err
	}
	resources := in.Resources
	req := api.PlanRequest{Dependencies: in.Dependencies, Destroy: in.Destroy, DeleteVolumes: in.DeleteVolumes}
	g, err := buildGraph(resources, req.Dependencies)
	if err != nil {
		return api.Plan{}, err
	}
	records, err := s.deps.Resources.ListResources(ctx, project)
	if err != nil {
		return api.Plan{}, err
	}
	opts := provider.Options{DeleteVolumes: req.DeleteVolumes}
	plan, err := s.reconcilerFor(s.deps.Providers.Registry(opts), s.log).Plan(ctx, project, g)
	if errors.Is(err, reconciler.ErrInvalidGraph) {
		return api.Plan{}, api.BadRequest("resources: %v", err)
	}
	if err != nil {
		return api.Plan{}, err
	}
	sources := map[string]string{}
	for _, d := range resources {
		sources[resource.Key(d.Type, d.Name)] = d.Source
	}
	changes := make([]desired.PlanChange, len(plan.Changes))
	for i, c := range plan.Changes {
		changes[i] = desired.PlanChange{Change: c, Source: sources[c.Key]}
	}
	hosts, err := s.deps.Providers.Preview(ctx, project, changes, records, opts.DeleteVolumes)
	var conflict *desired.ConflictError
	if errors.As(err, &conflict) {
		return api.Plan{}, api.Errorf(api.CodeConflict, "%v", conflict)
	}
	if err != nil {
		return api.Plan{}, err
	}
	notifyChanged, err := s.notifyChanged(ctx, project, in)
	if err != nil {
		return api.Plan{}, err
	}
	failovers, err := s.failoverNotes(ctx, project, records)
	if err != nil {
		return api.Plan{}, err
	}
	notes := append(append(slices.Clone(in.notes), imageMoves(records, resources)...), failovers...)
	if notifyChanged {
		notes = append(slices.Clone(notes), fmt.Sprintf("notify: the project's webhooks change (%d from this apply on)", len(in.Notify)))
	}
	now := s.now()
	out := api.Plan{ID: "plan-" + randomID(), Project: project, Created: now, Expires: now.Add(s.cfg.PlanTTL),
		Destroy: req.Destroy, DeleteVolumes: req.DeleteVolumes, HasChanges: plan.HasChanges() || req.DeleteVolumes || notifyChanged,
		Summary: map[string]int{}, Changes: make([]api.Change, 0, len(plan.Changes)), Hosts: make([]api.HostSteps, len(hosts)),
		RollbackOf: in.rollbackOf, Notes: notes}
	for i, h := range hosts {
		out.Hosts[i] = api.HostSteps{Host: h.Host, Name: h.Name, Steps: h.Steps}
	}
	for _, c := range plan.Changes {
		out.Summary[string(c.Action)]++
		out.Changes = append(out.Changes, toChange(c))
	}
	stored := storedPlan{Resources: resources, Dependencies: req.Dependencies, Destroy: req.Destroy,
		DeleteVolumes: req.DeleteVolumes, StateHash: stateHash(records), Summary: changeSummary(req.Destroy, out.Changes),
		RollbackOf: in.rollbackOf, Notify: in.Notify}
	doc, err := json.Marshal(stored)
	if err != nil {
		return api.Plan{}, err
	}
	if err := s.deps.Plans.PutPlan(ctx, store.StoredPlan{ID: out.ID, Project: project, Created: now, Expires: out.Expires,
		Blobs: stored.blobs(), Doc: doc}); err != nil {
		return api.Plan{}, err
	}
	return out, nil
}

// Destroy plans the deletion of everything the project has, its volumes too
// when volumes is set. The plan is applied like any other.
func (s *Service) Destroy(ctx context.Context, project string, volumes bool) (api.Plan, error) {
	return s.Plan(ctx, project, api.PlanRequest{Destroy: true, DeleteVolumes: volumes})
}

// checkPlanRequest refuses a request that cannot make a plan, naming the
// field: among them every resource the loader (hatch validate) would not
// have written, since a request need not come from it.
func checkPlanRequest(req api.PlanRequest, lim spec.Limits) error {
	if req.Destroy && len(req.Resources) > 0 {
		return api.BadRequest("resources: a destroy plan has none (it deletes everything the project has)")
	}
	if req.DeleteVolumes && !req.Destroy {
		return api.BadRequest("delete_volumes: only with destroy (a volume left out of the file is kept)")
	}
	for i, t := range req.Notify {
		if err := inputs.CheckNotifyTarget(t); err != nil {
			return api.BadRequest("notify[%d]: %v", i, err)
		}
	}
	secrets := map[string]bool{}
	for i, d := range req.Resources {
		if d.Type == "" || d.Name == "" {
			return api.BadRequest("resources[%d]: type and name are required", i)
		}
		if err := spec.CheckResource(&resource.Desired{Type: d.Type, Name: d.Name, Inputs: d.Inputs}, lim); err != nil {
			return api.BadRequest("resources[%d] (%s %q) %s", i, d.Type, d.Name, oneLine(err))
		}
		if d.Type == resource.Secret {
			secrets[d.Name] = true
			if _, ok := req.Secrets[d.Name]; !ok {
				return api.BadRequest("secrets.%s: no value sent for secret %s (the CLI reads it from its file or variable)", d.Name, d.Name)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(req.Secrets)) {
		if !secrets[name] {
			return api.BadRequest("secrets.%s: no secret resource of that name", name)
		}
	}
	return nil
}

// oneLine writes the problems of a joined error on one line.
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

// buildGraph builds and checks the desired graph.
func buildGraph(resources []api.DesiredResource, deps []api.Dependency) (*graph.Graph, error) {
	rs := make([]*resource.Desired, len(resources))
	for i, d := range resources {
		rs[i] = &resource.Desired{Type: d.Type, Name: d.Name, Inputs: d.Inputs, Source: d.Source}
	}
	ds := make([]*resource.Dependency, len(deps))
	for i, d := range deps {
		cond := resource.Condition(d.Condition)
		switch cond {
		case resource.ConditionCreated, resource.ConditionHealthy, resource.ConditionCompleted:
		case "created", "started":
			cond = resource.ConditionCreated
		default:
			return nil, api.BadRequest("dependencies[%d].condition: %q is not created, healthy or completed", i, d.Condition)
		}
		ds[i] = &resource.Dependency{Parent: d.Parent, Child: d.Child, Condition: cond}
	}
	g, err := graph.New(rs, ds)
	if err != nil {
		return nil, api.BadRequest("resources: %v", err)
	}
	return g, nil
}

// toChange shows a change; a secret's inputs show its source, never its
// value or fingerprint.
func toChange(c reconciler.Change) api.Change {
	out := api.Change{Action: symbols[c.Action], Key: c.Key, ID: c.ID, Changed: c.Changed, Unknown: c.Unknown, Inputs: c.Inputs}
	if resource.KindOf(c.Key) == resource.Secret {
		out.Inputs = map[string]any{"value": api.Sensitive}
		for k, v := range c.Inputs {
			if k != provider.FingerprintInput {
				out.Inputs[k] = v
			}
		}
		out.Changed = slices.Clone(c.Changed)
		for i, k := range out.Changed {
			if k == provider.FingerprintInput {
				out.Changed[i] = "value"
			}
		}
		slices.Sort(out.Changed)
	}
	if c.Action == reconciler.ActionUnchanged {
		out.Inputs = nil
	}
	return out
}

// loadPlan reads a stored plan of the project.
func (s *Service) loadPlan(ctx context.Context, project, id string) (storedPlan, error) {
	p, err := s.deps.Plans.Plan(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && !s.now().Before(p.Expires) {
		return storedPlan{}, api.NotFound("no plan %q (plans last %v and are used once): plan again", id, s.cfg.PlanTTL)
	}
	if err != nil {
		return storedPlan{}, err
	}
	if p.Project != project {
		return storedPlan{}, api.BadRequest("plan: %s is a plan of %s, not of %s", id, p.Project, project)
	}
	var doc storedPlan
	if err := json.Unmarshal(p.Doc, &doc); err != nil {
		return storedPlan{}, fmt.Errorf("stored plan %s: %w", id, err)
	}
	return doc, nil
}
