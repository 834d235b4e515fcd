package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hatchery/hatchery/internal/graph"
	"github.com/hatchery/hatchery/internal/provider"
	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

// planRequest is the body of POST .../plan: the project's desired resources
// as the CLI built them (package spec's mapping of hatch.yaml, or of a
// Compose file), the explicit dependencies, and the value of every secret
// resource, read by the CLI from its file or environment. A destroy plan has
// no resources; with delete_volumes it deletes the project's volumes too.
type planRequest struct {
	Resources     []desiredJSON     `json:"resources"`
	Dependencies  []dependencyJSON  `json:"dependencies"`
	Secrets       map[string]string `json:"secrets"`
	Destroy       bool              `json:"destroy"`
	DeleteVolumes bool              `json:"delete_volumes"`
}

type desiredJSON struct {
	Type   resource.Kind  `json:"type"`
	Name   string         `json:"name"`
	Inputs map[string]any `json:"inputs"`
	// Source is the digest of an uploaded blob the resource is built from.
	Source string `json:"source,omitempty"`
}

type dependencyJSON struct {
	Parent    string `json:"parent"`
	Child     string `json:"child"`
	Condition string `json:"condition,omitempty"`
}

// storedPlanDoc is a plan as the server keeps it until apply: what rebuilds
// the graph (secret values are staged apart, sealed; the inputs carry their
// fingerprints), the options, and the state it was made against.
type storedPlanDoc struct {
	Resources     []desiredJSON    `json:"resources"`
	Dependencies  []dependencyJSON `json:"dependencies"`
	Destroy       bool             `json:"destroy,omitempty"`
	DeleteVolumes bool             `json:"delete_volumes,omitempty"`
	StateHash     string           `json:"state_hash"`
}

// planJSON is a plan as the API shows it.
type planJSON struct {
	ID            string               `json:"id"`
	Project       string               `json:"project"`
	Created       time.Time            `json:"created"`
	Expires       time.Time            `json:"expires"`
	Destroy       bool                 `json:"destroy,omitempty"`
	DeleteVolumes bool                 `json:"delete_volumes,omitempty"`
	HasChanges    bool                 `json:"has_changes"`
	Summary       map[string]int       `json:"summary"`
	Changes       []changeJSON         `json:"changes"`
	Hosts         []provider.HostSteps `json:"hosts"`
}

// changeJSON is one resource's planned change: "+" create, "~" update (with
// the changed inputs), "-" delete, "=" unchanged.
type changeJSON struct {
	Action  string         `json:"action"`
	Key     string         `json:"key"`
	ID      string         `json:"id,omitempty"`
	Changed []string       `json:"changed,omitempty"`
	Unknown []string       `json:"unknown,omitempty"`
	Inputs  map[string]any `json:"inputs,omitempty"`
}

// sensitive is what a plan shows of a secret's value.
const sensitive = "(sensitive)"

var symbols = map[reconciler.Action]string{
	reconciler.ActionCreate: "+", reconciler.ActionUpdate: "~", reconciler.ActionDelete: "-", reconciler.ActionUnchanged: "=",
}

var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,39}$`)

// projectOf returns "<namespace>/<project>" from the path, checked.
func projectOf(r *http.Request) (string, error) {
	ns, name := r.PathValue("namespace"), r.PathValue("project")
	if !namePattern.MatchString(ns) || !namePattern.MatchString(name) {
		return "", badRequest("path: namespace %q and project %q must be [a-z0-9-], 1 to 40 characters", ns, name)
	}
	return ns + "/" + name, nil
}

func (a *applier) postPlan(w http.ResponseWriter, r *http.Request) error {
	var req planRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	return a.plan(w, r, req)
}

// postDestroy plans the deletion of everything the project has.
func (a *applier) postDestroy(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Volumes bool `json:"volumes"`
	}
	if r.ContentLength != 0 {
		if err := decodeJSON(r, &req); err != nil {
			return err
		}
	}
	return a.plan(w, r, planRequest{Destroy: true, DeleteVolumes: req.Volumes})
}

func (a *applier) plan(w http.ResponseWriter, r *http.Request, req planRequest) error {
	ctx := r.Context()
	project, err := projectOf(r)
	if err != nil {
		return err
	}
	if err := req.check(); err != nil {
		return err
	}
	if _, err := a.deps.Plans.DeleteExpiredPlans(ctx, a.s.now()); err != nil {
		return err
	}
	for i, d := range req.Resources {
		if d.Source == "" {
			continue
		}
		ok, err := a.s.deps.Blobs.HasSource(ctx, d.Source)
		if err != nil {
			return err
		}
		if !ok {
			return badRequest("resources[%d].source: blob %s is not uploaded (PUT /api/v1/blobs/{digest} first)", i, d.Source)
		}
	}
	for i := range req.Resources {
		d := &req.Resources[i]
		if d.Type != "secret" {
			continue
		}
		fp, err := a.deps.Providers.StageSecret(ctx, project, d.Name, []byte(req.Secrets[d.Name]))
		if err != nil {
			return err
		}
		d.Inputs = resource.Clone(d.Inputs)
		if d.Inputs == nil {
			d.Inputs = map[string]any{}
		}
		d.Inputs[provider.FingerprintInput] = fp
	}
	g, err := buildGraph(req.Resources, req.Dependencies)
	if err != nil {
		return err
	}
	records, err := a.deps.Resources.ListResources(ctx, project)
	if err != nil {
		return err
	}
	opts := provider.Options{DeleteVolumes: req.DeleteVolumes}
	plan, err := a.reconcilerFor(a.deps.Providers.Registry(opts), a.log).Plan(ctx, project, g)
	if errors.Is(err, reconciler.ErrInvalidGraph) {
		return badRequest("resources: %v", err)
	}
	if err != nil {
		return err
	}
	sources := map[string]string{}
	for _, d := range req.Resources {
		sources[resource.Key(d.Type, d.Name)] = d.Source
	}
	changes := make([]provider.PlanChange, len(plan.Changes))
	for i, c := range plan.Changes {
		changes[i] = provider.PlanChange{Change: c, Source: sources[c.Key]}
	}
	hosts, err := a.deps.Providers.Preview(ctx, project, changes, records, opts)
	var conflict *provider.ConflictError
	if errors.As(err, &conflict) {
		return errorf(http.StatusConflict, "conflict", "%v", conflict)
	}
	if err != nil {
		return err
	}
	now := a.s.now()
	out := planJSON{ID: "plan-" + randomID(), Project: project, Created: now, Expires: now.Add(a.cfg.PlanTTL),
		Destroy: req.Destroy, DeleteVolumes: req.DeleteVolumes, HasChanges: plan.HasChanges() || req.DeleteVolumes,
		Summary: map[string]int{}, Changes: make([]changeJSON, 0, len(plan.Changes)), Hosts: hosts}
	if out.Hosts == nil {
		out.Hosts = []provider.HostSteps{}
	}
	for _, c := range plan.Changes {
		out.Summary[string(c.Action)]++
		out.Changes = append(out.Changes, toChangeJSON(c))
	}
	doc, err := json.Marshal(storedPlanDoc{Resources: req.Resources, Dependencies: req.Dependencies, Destroy: req.Destroy,
		DeleteVolumes: req.DeleteVolumes, StateHash: stateHash(records)})
	if err != nil {
		return err
	}
	var blobs []string
	for _, d := range req.Resources {
		if d.Source != "" {
			blobs = append(blobs, d.Source)
		}
	}
	if err := a.deps.Plans.PutPlan(ctx, store.StoredPlan{ID: out.ID, Project: project, Created: now, Expires: out.Expires,
		Blobs: blobs, Doc: doc}); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// check refuses a request that cannot make a plan, naming the field.
func (req *planRequest) check() error {
	if req.Destroy && len(req.Resources) > 0 {
		return badRequest("resources: a destroy plan has none (it deletes everything the project has)")
	}
	if req.DeleteVolumes && !req.Destroy {
		return badRequest("delete_volumes: only with destroy (a volume left out of the file is kept)")
	}
	secrets := map[string]bool{}
	for i, d := range req.Resources {
		if d.Type == "" || d.Name == "" {
			return badRequest("resources[%d]: type and name are required", i)
		}
		if d.Type == "secret" {
			secrets[d.Name] = true
			if _, ok := req.Secrets[d.Name]; !ok {
				return badRequest("secrets.%s: no value sent for secret %s (the CLI reads it from its file or variable)", d.Name, d.Name)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(req.Secrets)) {
		if !secrets[name] {
			return badRequest("secrets.%s: no secret resource of that name", name)
		}
	}
	return nil
}

// buildGraph builds and checks the desired graph.
func buildGraph(resources []desiredJSON, deps []dependencyJSON) (*graph.Graph, error) {
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
			return nil, badRequest("dependencies[%d].condition: %q is not created, healthy or completed", i, d.Condition)
		}
		ds[i] = &resource.Dependency{Parent: d.Parent, Child: d.Child, Condition: cond}
	}
	g, err := graph.New(rs, ds)
	if err != nil {
		return nil, badRequest("resources: %v", err)
	}
	return g, nil
}

// toChangeJSON shows a change; a secret's inputs show its source, never its
// value or fingerprint.
func toChangeJSON(c reconciler.Change) changeJSON {
	out := changeJSON{Action: symbols[c.Action], Key: c.Key, ID: c.ID, Changed: c.Changed, Unknown: c.Unknown, Inputs: c.Inputs}
	if strings.HasPrefix(c.Key, "secret/") {
		out.Inputs = map[string]any{"value": sensitive}
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
func (a *applier) loadPlan(r *http.Request, project, id string) (storedPlanDoc, error) {
	p, err := a.deps.Plans.Plan(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) || err == nil && !a.s.now().Before(p.Expires) {
		return storedPlanDoc{}, notFoundf("no plan %q (plans last %v and are used once): plan again", id, a.cfg.PlanTTL)
	}
	if err != nil {
		return storedPlanDoc{}, err
	}
	if p.Project != project {
		return storedPlanDoc{}, badRequest("plan: %s is a plan of %s, not of %s", id, p.Project, project)
	}
	var doc storedPlanDoc
	if err := json.Unmarshal(p.Doc, &doc); err != nil {
		return storedPlanDoc{}, fmt.Errorf("stored plan %s: %w", id, err)
	}
	return doc, nil
}
