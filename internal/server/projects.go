package server

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/deploy"
	"github.com/hatchery/hatchery/internal/resource"
)

// deployAPI maps the project endpoints to the apply protocol.
type deployAPI struct {
	svc     *deploy.Service
	streams streams
}

var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,39}$`)

// projectOf returns "<namespace>/<project>" from the path, checked.
func projectOf(r *http.Request) (string, error) {
	ns, name := r.PathValue("namespace"), r.PathValue("project")
	if !namePattern.MatchString(ns) || !namePattern.MatchString(name) {
		return "", api.BadRequest("path: namespace %q and project %q must be [a-z0-9-], 1 to 40 characters", ns, name)
	}
	return resource.Project(ns, name), nil
}

// projectBody returns the checked project of the path and the decoded body.
func projectBody[T any](r *http.Request) (string, T, error) {
	var body T
	project, err := projectOf(r)
	if err != nil {
		return "", body, err
	}
	err = decodeJSON(r, &body)
	return project, body, err
}

// applyOf returns the checked project and apply ID of the path.
func applyOf(r *http.Request) (string, int64, error) {
	project, err := projectOf(r)
	if err != nil {
		return "", 0, err
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return "", 0, api.BadRequest("path: apply ID %q is not a positive whole number", r.PathValue("id"))
	}
	return project, id, nil
}

// listProjects lists every project; a deploy token gets its own project
// only (an empty list before its first apply), so that `hatch status`
// works in a pipeline without telling it which other projects exist.
func (h deployAPI) listProjects(w http.ResponseWriter, r *http.Request) error {
	projects, err := h.svc.Projects(r.Context())
	if err != nil {
		return err
	}
	if p := principalOf(r.Context()); p.Deploy() {
		projects = slices.DeleteFunc(projects, func(s api.ProjectSummary) bool {
			return resource.Project(s.Namespace, s.Name) != p.Project
		})
	}
	writeJSON(w, http.StatusOK, api.ProjectList{Projects: projects})
	return nil
}

func (h deployAPI) getProject(w http.ResponseWriter, r *http.Request) error {
	p, err := h.svc.Project(r.Context(), r.PathValue("namespace"), r.PathValue("project"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

func (h fleetAPI) getProjectStatus(w http.ResponseWriter, r *http.Request) error {
	ns, project := r.PathValue("namespace"), r.PathValue("project")
	st, err := h.svc.ProjectStatus(r.Context(), ns, project)
	if err != nil {
		return err
	}
	if st.Volumes, err = h.backups.BackupStates(r.Context(), resource.Project(ns, project)); err != nil {
		return fmt.Errorf("project status: %w", err)
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (h deployAPI) postPlan(w http.ResponseWriter, r *http.Request) error {
	project, req, err := projectBody[api.PlanRequest](r)
	if err != nil {
		return err
	}
	plan, err := h.svc.Plan(r.Context(), project, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, plan)
	return nil
}

// postDestroy plans the deletion of everything the project has.
func (h deployAPI) postDestroy(w http.ResponseWriter, r *http.Request) error {
	project, err := projectOf(r)
	if err != nil {
		return err
	}
	var req api.DestroyRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(r, &req); err != nil {
			return err
		}
	}
	plan, err := h.svc.Destroy(r.Context(), project, req.Volumes)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, plan)
	return nil
}

// postApply starts the apply of a plan: 202 with the apply's ID and its
// event stream, or, to a client asking for text/event-stream, the stream.
func (h deployAPI) postApply(w http.ResponseWriter, r *http.Request) error {
	project, req, err := projectBody[api.ApplyRequest](r)
	if err != nil {
		return err
	}
	j, err := h.svc.Apply(r.Context(), project, req.Plan)
	if err != nil {
		return err
	}
	if acceptsEventStream(r) {
		return h.streams.progress(w, r, j)
	}
	writeJSON(w, http.StatusAccepted, api.ApplyStarted{
		Apply:  api.ApplyRef{ID: j.ID(), Project: project, Plan: req.Plan},
		Events: "/api/v1/projects/" + project + "/applies/" + strconv.FormatInt(j.ID(), 10) + "/events",
	})
	return nil
}

// postRollback plans applying again an earlier apply's spec and sources;
// the plan is applied with POST .../apply like any other.
func (h deployAPI) postRollback(w http.ResponseWriter, r *http.Request) error {
	project, err := projectOf(r)
	if err != nil {
		return err
	}
	var req api.RollbackRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(r, &req); err != nil {
			return err
		}
	}
	if req.To < 0 {
		return api.BadRequest("to: %d is not an apply ID (a positive number; 0 or none: the last successful apply before the newest)", req.To)
	}
	plan, err := h.svc.Rollback(r.Context(), project, req.To)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, plan)
	return nil
}

// getHistory answers the project's kept applies, newest first.
func (h deployAPI) getHistory(w http.ResponseWriter, r *http.Request) error {
	if _, err := projectOf(r); err != nil {
		return err
	}
	hist, err := h.svc.History(r.Context(), r.PathValue("namespace"), r.PathValue("project"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, hist)
	return nil
}

// getApply answers an apply's record and the progress this server kept.
func (h deployAPI) getApply(w http.ResponseWriter, r *http.Request) error {
	project, id, err := applyOf(r)
	if err != nil {
		return err
	}
	st, err := h.svc.ApplyStatus(r.Context(), project, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

// getApplyEvents streams an apply's progress until it finishes.
func (h deployAPI) getApplyEvents(w http.ResponseWriter, r *http.Request) error {
	project, id, err := applyOf(r)
	if err != nil {
		return err
	}
	j, err := h.svc.Follow(r.Context(), project, id)
	if err != nil {
		return err
	}
	return h.streams.progress(w, r, j)
}

// postRestart is hatch rollout restart PROJECT/EGG.
func (h deployAPI) postRestart(w http.ResponseWriter, r *http.Request) error {
	project, err := projectOf(r)
	if err != nil {
		return err
	}
	out, err := h.svc.RestartEgg(r.Context(), project, r.PathValue("egg"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
