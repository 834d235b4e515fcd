package server

import (
	"net/http"
	"strings"
	"time"

	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

// redacted replaces values the API never shows.
const redacted = "[redacted]"

type applyJSON struct {
	ID       int64     `json:"id"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitzero"`
	Outcome  string    `json:"outcome"`
	Message  string    `json:"message,omitempty"`
}

// resourceJSON is a deployed resource as the API shows it: no inputs, no
// source blob (internal), and a secret's outputs redacted.
type resourceJSON struct {
	Type    resource.Kind  `json:"type"`
	Name    string         `json:"name"`
	ID      string         `json:"id"`
	Pending bool           `json:"pending,omitempty"`
	Parents []string       `json:"parents,omitempty"`
	Outputs map[string]any `json:"outputs,omitempty"`
}

func toResourceJSON(r *resource.Deployed) resourceJSON {
	out := resourceJSON{Type: r.Type, Name: r.Name, ID: r.ID, Pending: r.Pending, Parents: r.Parents, Outputs: r.Outputs}
	if r.Type == "secret" && len(r.Outputs) > 0 {
		out.Outputs = make(map[string]any, len(r.Outputs))
		for k := range r.Outputs {
			out.Outputs[k] = redacted
		}
	}
	return out
}

func toApplyJSON(a store.Apply) applyJSON {
	return applyJSON{ID: a.ID, Started: a.Started, Finished: a.Finished, Outcome: string(a.Outcome), Message: a.Message}
}

type projectSummary struct {
	Namespace string     `json:"namespace"`
	Name      string     `json:"name"`
	Resources int        `json:"resources"`
	LastApply *applyJSON `json:"last_apply"`
}

func (s *Server) listProjects(w http.ResponseWriter, r *http.Request) error {
	projects, err := s.deps.Projects.ListProjects(r.Context())
	if err != nil {
		return err
	}
	out := make([]projectSummary, 0, len(projects))
	for _, p := range projects {
		ns, name, _ := strings.Cut(p, "/")
		res, err := s.deps.Projects.ListResources(r.Context(), p)
		if err != nil {
			return err
		}
		applies, err := s.deps.Applies.Applies(r.Context(), p)
		if err != nil {
			return err
		}
		sum := projectSummary{Namespace: ns, Name: name, Resources: len(res)}
		if len(applies) > 0 {
			last := toApplyJSON(applies[0])
			sum.LastApply = &last
		}
		out = append(out, sum)
	}
	writeJSON(w, http.StatusOK, map[string]any{"projects": out})
	return nil
}

func (s *Server) getProject(w http.ResponseWriter, r *http.Request) error {
	ns, name := r.PathValue("namespace"), r.PathValue("project")
	p := ns + "/" + name
	res, err := s.deps.Projects.ListResources(r.Context(), p)
	if err != nil {
		return err
	}
	applies, err := s.deps.Applies.Applies(r.Context(), p)
	if err != nil {
		return err
	}
	if len(res) == 0 && len(applies) == 0 {
		return notFoundf("no project %q in namespace %q", name, ns)
	}
	out := struct {
		Namespace string         `json:"namespace"`
		Name      string         `json:"name"`
		Resources []resourceJSON `json:"resources"`
		Applies   []applyJSON    `json:"applies"`
	}{Namespace: ns, Name: name, Resources: make([]resourceJSON, len(res)), Applies: make([]applyJSON, len(applies))}
	for i, rec := range res {
		out.Resources[i] = toResourceJSON(rec)
	}
	for i, a := range applies {
		out.Applies[i] = toApplyJSON(a)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
