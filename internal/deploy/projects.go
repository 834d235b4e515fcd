package deploy

import (
	"context"
	"strings"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/resource"
)

// toResource shows a deployed resource: no inputs, no source blob
// (internal), and a secret's outputs redacted.
func toResource(r *resource.Deployed) api.Resource {
	out := api.Resource{Type: r.Type, Name: r.Name, ID: r.ID, Pending: r.Pending, Parents: r.Parents, Outputs: r.Outputs}
	if r.Type == resource.Secret && len(r.Outputs) > 0 {
		out.Outputs = make(map[string]any, len(r.Outputs))
		for k := range r.Outputs {
			out.Outputs[k] = api.Redacted
		}
	}
	return out
}

// Projects lists every project with deployed resources or applies, with
// its last apply.
func (s *Service) Projects(ctx context.Context) ([]api.ProjectSummary, error) {
	projects, err := s.deps.Projects.ListProjects(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.ProjectSummary, 0, len(projects))
	for _, p := range projects {
		ns, name, _ := strings.Cut(p, "/")
		res, err := s.deps.Projects.ListResources(ctx, p)
		if err != nil {
			return nil, err
		}
		applies, err := s.deps.Applies.Applies(ctx, p)
		if err != nil {
			return nil, err
		}
		sum := api.ProjectSummary{Namespace: ns, Name: name, Resources: len(res)}
		if len(applies) > 0 {
			last := ToApply(applies[0])
			sum.LastApply = &last
		}
		out = append(out, sum)
	}
	return out, nil
}

// Project returns a project's deployed resources and kept applies; a
// project with neither gives api.CodeNotFound.
func (s *Service) Project(ctx context.Context, namespace, name string) (api.Project, error) {
	p := resource.Project(namespace, name)
	res, err := s.deps.Projects.ListResources(ctx, p)
	if err != nil {
		return api.Project{}, err
	}
	applies, err := s.deps.Applies.Applies(ctx, p)
	if err != nil {
		return api.Project{}, err
	}
	if len(res) == 0 && len(applies) == 0 {
		return api.Project{}, api.NotFound("no project %q in namespace %q", name, namespace)
	}
	out := api.Project{Namespace: namespace, Name: name, Resources: make([]api.Resource, len(res)), Applies: make([]api.Apply, len(applies))}
	for i, rec := range res {
		out.Resources[i] = toResource(rec)
	}
	for i, a := range applies {
		out.Applies[i] = ToApply(a)
	}
	return out, nil
}
