package deploy

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/provider"
	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/spec"
	"github.com/hatchery/hatchery/internal/store"
)

// The history of a project's applies, and rollbacks to one of them. An
// apply's record keeps its inputs (resources, with secret fingerprints but
// never a secret value, and dependencies) for as long as the history keeps
// the record (Config.KeepApplies), and the blobs it was built from are kept
// from collection with it (store.BlobRetention). A rollback is a plan made
// of those inputs, applied like any other: same checks, same lease, same
// rolls, and itself an apply of the history that can be rolled back.

// maxSummaryChanges is how many changes an apply's one-line summary names.
const maxSummaryChanges = 4

// changeSummary is an apply's one-line summary: its changes as the plan
// shows them, by key ("~ egg/web [env, source], + volume/data"), unchanged
// ones left out, the first few named.
func changeSummary(destroy bool, changes []api.Change) string {
	var parts []string
	changes = slices.Clone(changes)
	slices.SortFunc(changes, func(a, b api.Change) int { return cmp.Compare(a.Key, b.Key) })
	for _, c := range changes {
		if c.Action == symbols[reconciler.ActionUnchanged] {
			continue
		}
		p := c.Action + " " + c.Key
		if len(c.Changed) > 0 {
			p += " [" + strings.Join(c.Changed, ", ") + "]"
		}
		parts = append(parts, p)
	}
	prefix := ""
	if destroy {
		prefix = "destroy: "
	}
	switch {
	case len(parts) == 0:
		return prefix + "no changes"
	case len(parts) > maxSummaryChanges:
		return fmt.Sprintf("%s%s and %d more", prefix, strings.Join(parts[:maxSummaryChanges], ", "), len(parts)-maxSummaryChanges)
	}
	return prefix + strings.Join(parts, ", ")
}

// specDigest identifies an apply's spec and build sources: the resources
// (their inputs and source blobs) and the dependencies, in a canonical
// order. A secret's fingerprint is left out: a rollback takes secrets at
// their current values, and still applies the spec of the apply it names,
// whose digest it then shows.
func specDigest(in planInputs) string {
	type res struct {
		Type   resource.Kind  `json:"type"`
		Name   string         `json:"name"`
		Inputs map[string]any `json:"inputs"`
		Source string         `json:"source,omitempty"`
	}
	rs := make([]res, len(in.Resources))
	for i, d := range in.Resources {
		inputs := d.Inputs
		if d.Type == resource.Secret {
			inputs = resource.Clone(d.Inputs)
			delete(inputs, provider.FingerprintInput)
		}
		rs[i] = res{Type: d.Type, Name: d.Name, Inputs: inputs, Source: d.Source}
	}
	slices.SortFunc(rs, func(a, b res) int { return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.Name, b.Name)) })
	deps := slices.Clone(in.Dependencies)
	slices.SortFunc(deps, func(a, b api.Dependency) int {
		return cmp.Or(cmp.Compare(a.Child, b.Child), cmp.Compare(a.Parent, b.Parent), cmp.Compare(a.Condition, b.Condition))
	})
	b, err := json.Marshal(struct {
		Resources    []res            `json:"resources"`
		Dependencies []api.Dependency `json:"dependencies"`
	}{rs, deps}) // map keys sorted
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// recordOf is what an apply's record keeps of its plan: its inputs (none
// for a destroy: there is nothing to roll back to), summary and digest.
func recordOf(doc storedPlan) (inputs []byte, digest string, err error) {
	in := planInputs{Resources: doc.Resources, Dependencies: doc.Dependencies, Notify: doc.Notify}
	if doc.Destroy {
		return nil, "", nil
	}
	inputs, err = json.Marshal(in)
	if err != nil {
		return nil, "", fmt.Errorf("encode the apply's inputs: %w", err)
	}
	return inputs, specDigest(in), nil
}

// ToApply shows an apply's record.
func ToApply(a store.Apply) api.Apply {
	return api.Apply{ID: a.ID, Started: a.Started, Finished: a.Finished, Outcome: string(a.Outcome), Message: a.Message,
		Actor: a.Actor, Summary: a.Summary, Digest: a.Digest, RollbackOf: a.RollbackOf, Rollbackable: a.HasInputs}
}

// History returns the project's kept applies, newest first; a project
// with neither applies nor resources gives api.CodeNotFound.
func (s *Service) History(ctx context.Context, namespace, name string) (api.ApplyHistory, error) {
	p := resource.Project(namespace, name)
	applies, err := s.deps.Applies.Applies(ctx, p)
	if err != nil {
		return api.ApplyHistory{}, err
	}
	if len(applies) == 0 {
		res, err := s.deps.Projects.ListResources(ctx, p)
		if err != nil {
			return api.ApplyHistory{}, err
		}
		if len(res) == 0 {
			return api.ApplyHistory{}, api.NotFound("no project %q in namespace %q", name, namespace)
		}
	}
	out := api.ApplyHistory{Namespace: namespace, Project: name, Keep: s.cfg.KeepApplies, Applies: make([]api.Apply, len(applies))}
	for i, a := range applies {
		out.Applies[i] = ToApply(a)
	}
	return out, nil
}

// Rollback plans applying again the spec and build sources of apply `to`
// of the project (0: the last successful apply before the newest one).
// Secrets are taken at their current values, and the plan says so; a
// volume deleted since is created empty, and the plan says that too. It
// refuses, changing nothing, an apply the history no longer keeps, one
// whose build context was collected, and one using a secret the project no
// longer has (api.CodeGone). The plan is applied with Apply, as any other.
func (s *Service) Rollback(ctx context.Context, project string, to int64) (api.Plan, error) {
	applies, err := s.deps.Applies.Applies(ctx, project)
	if err != nil {
		return api.Plan{}, err
	}
	target, err := rollbackTarget(project, applies, to, s.cfg.KeepApplies)
	if err != nil {
		return api.Plan{}, err
	}
	raw, err := s.deps.Applies.ApplyInputs(ctx, project, target.ID)
	if errors.Is(err, store.ErrNotFound) {
		return api.Plan{}, api.Errorf(api.CodeGone, "apply %d of %s left the history meanwhile: `hatch history` lists those kept", target.ID, project)
	}
	if err != nil {
		return api.Plan{}, err
	}
	var in planInputs
	if err := json.Unmarshal(raw, &in); err != nil {
		return api.Plan{}, fmt.Errorf("inputs of apply %d: %w", target.ID, err)
	}
	for i, d := range in.Resources {
		if err := spec.CheckResource(&resource.Desired{Type: d.Type, Name: d.Name, Inputs: d.Inputs},
			spec.Limits{MaxReplicas: s.cfg.MaxReplicas}); err != nil {
			return api.Plan{}, api.BadRequest("apply %d's resources[%d] (%s %q) no longer pass this server's checks: %s",
				target.ID, i, d.Type, d.Name, oneLine(err))
		}
		if d.Source == "" {
			continue
		}
		ok, err := s.deps.Sources.HasSource(ctx, d.Source)
		if err != nil {
			return api.Plan{}, err
		}
		if !ok {
			return api.Plan{}, api.Errorf(api.CodeGone, "apply %d built %s %s from blob %s, which is gone from the server: "+
				"apply the project's files of that version instead", target.ID, d.Type, d.Name, d.Source)
		}
	}
	current, err := s.deps.Resources.ListResources(ctx, project)
	if err != nil {
		return api.Plan{}, err
	}
	deployed := map[string]*resource.Deployed{}
	for _, r := range current {
		deployed[r.Key()] = r
	}
	var notes []string
	for i := range in.Resources {
		d := &in.Resources[i]
		key := resource.Key(d.Type, d.Name)
		switch d.Type {
		case resource.Secret:
			fp, _ := deployedInput(deployed[key], provider.FingerprintInput)
			if fp == "" {
				return api.Plan{}, api.Errorf(api.CodeGone, "apply %d uses %s, which %s no longer has, and a rollback never brings back "+
					"an old secret value: apply the project's files of that version instead", target.ID, key, project)
			}
			d.Inputs = resource.Clone(d.Inputs)
			d.Inputs[provider.FingerprintInput] = fp
			notes = append(notes, key+": taken at its current value, not at apply "+fmt.Sprint(target.ID)+"'s")
		case resource.Volume:
			if deployed[key] != nil {
				continue
			}
			kept, err := s.deps.Providers.VolumeKept(ctx, project, d.Name)
			if err != nil {
				return api.Plan{}, err
			}
			if !kept {
				notes = append(notes, fmt.Sprintf("%s is gone (deleted since apply %d): it is created empty", key, target.ID))
			}
		}
	}
	in.rollbackOf, in.notes = target.ID, notes
	return s.makePlan(ctx, project, in)
}

// deployedInput returns a string input of a deployed resource ("" if there
// is none).
func deployedInput(r *resource.Deployed, name string) (string, bool) {
	if r == nil || r.Pending {
		return "", false
	}
	v, ok := r.Inputs[name].(string)
	return v, ok
}

// rollbackTarget picks the apply a rollback applies again: to, or the last
// successful one older than the newest record.
func rollbackTarget(project string, applies []store.Apply, to int64, keep int) (store.Apply, error) {
	if len(applies) == 0 {
		return store.Apply{}, api.NotFound("%s has no apply to roll back to", project)
	}
	var target *store.Apply
	if to > 0 {
		for i := range applies {
			if applies[i].ID == to {
				target = &applies[i]
			}
		}
		if target == nil {
			if to < applies[len(applies)-1].ID {
				return store.Apply{}, api.Errorf(api.CodeGone, "apply %d of %s is too old: the history keeps the last %d "+
					"(hatch server --keep-applies), from apply %d on", to, project, keep, applies[len(applies)-1].ID)
			}
			return store.Apply{}, api.NotFound("no apply %d of %s: `hatch history` lists them", to, project)
		}
	} else {
		for i := range applies[1:] {
			if applies[i+1].Outcome == store.ApplySucceeded {
				target = &applies[i+1]
				break
			}
		}
		if target == nil {
			return store.Apply{}, api.NotFound("%s has no successful apply before apply %d to roll back to: name one with --to",
				project, applies[0].ID)
		}
	}
	switch {
	case target.Outcome == store.ApplyRunning:
		return store.Apply{}, api.Errorf(api.CodeConflict, "apply %d of %s is still running: wait for it to end", target.ID, project)
	case !target.HasInputs && strings.HasPrefix(target.Summary, "destroy"):
		return store.Apply{}, api.BadRequest("apply %d of %s destroyed it: there is nothing to roll back to (hatch destroy does that)",
			target.ID, project)
	case !target.HasInputs:
		return store.Apply{}, api.Errorf(api.CodeGone, "apply %d of %s was recorded before the server kept what a rollback needs: "+
			"apply the project's files of that version instead", target.ID, project)
	}
	return *target, nil
}
