package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/apiclient"
	"github.com/hatchery/hatchery/internal/resource"
)

// Projects makes the calls under /api/v1/projects: what a project has and
// how it stands, and its plans and applies (docs/API.md, "Projects" and
// "Plans and applies"). Get one with Client.Projects.
type Projects struct{ c *Client }

// List lists every project the server has.
func (p *Projects) List(ctx context.Context) ([]api.ProjectSummary, error) {
	var out api.ProjectList
	err := p.c.Do(ctx, http.MethodGet, "/api/v1/projects", nil, &out)
	return out.Projects, err
}

// Get returns the project's deployed resources; ok is false for a
// project the server does not know.
func (p *Projects) Get(ctx context.Context, namespace, project string) (api.Project, bool, error) {
	var out api.Project
	err := p.c.Do(ctx, http.MethodGet, api.ProjectPath(namespace, project, ""), nil, &out)
	if isNotFound(err) {
		return api.Project{}, false, nil
	}
	return out, err == nil, err
}

// Status returns where the project's eggs stand; ok is false for a
// project the server does not know.
func (p *Projects) Status(ctx context.Context, namespace, project string) (api.ProjectStatus, bool, error) {
	var s api.ProjectStatus
	err := p.c.Do(ctx, http.MethodGet, api.ProjectPath(namespace, project, "/status"), nil, &s)
	if isNotFound(err) {
		return api.ProjectStatus{}, false, nil
	}
	return s, err == nil, err
}

// Plan asks for a plan of the project.
func (p *Projects) Plan(ctx context.Context, namespace, project string, req api.PlanRequest) (api.Plan, error) {
	var plan api.Plan
	err := p.c.Do(ctx, http.MethodPost, api.ProjectPath(namespace, project, "/plan"), req, &plan)
	return plan, err
}

// PlanDestroy plans the deletion of everything the project has (its volumes
// too when volumes is set).
func (p *Projects) PlanDestroy(ctx context.Context, namespace, project string, volumes bool) (api.Plan, error) {
	var plan api.Plan
	err := p.c.Do(ctx, http.MethodPost, api.ProjectPath(namespace, project, "/destroy"), api.DestroyRequest{Volumes: volumes}, &plan)
	return plan, err
}

// PlanRollback plans applying again the spec and build sources of apply to
// (0: the last successful one before the newest).
func (p *Projects) PlanRollback(ctx context.Context, namespace, project string, to int64) (api.Plan, error) {
	var plan api.Plan
	err := p.c.Do(ctx, http.MethodPost, api.ProjectPath(namespace, project, "/rollback"), api.RollbackRequest{To: to}, &plan)
	return plan, err
}

// Apply starts the apply of a plan and returns the apply's ID.
func (p *Projects) Apply(ctx context.Context, namespace, project, planID string) (int64, error) {
	var out api.ApplyStarted
	err := p.c.Do(ctx, http.MethodPost, api.ProjectPath(namespace, project, "/apply"), api.ApplyRequest{Plan: planID}, &out)
	return out.Apply.ID, err
}

// FollowApply streams an apply's steps to fn until it finishes, and
// returns the finishing step. A stream cut short (a restarting server, a
// proxy) is read again, a few times, skipping the steps already seen.
func (p *Projects) FollowApply(ctx context.Context, namespace, project string, id int64, fn func(api.Progress)) (api.Progress, error) {
	path := api.ProjectPath(namespace, project, "/applies/"+strconv.FormatInt(id, 10)+"/events")
	var seen int64
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return api.Progress{}, ctx.Err()
			case <-time.After(time.Duration(attempt) * time.Second):
			}
		}
		var final *api.Progress
		err := p.c.stream(ctx, path, func(ev sseEvent) error {
			var s api.Progress
			if err := json.Unmarshal([]byte(ev.Data), &s); err != nil {
				return fmt.Errorf("apply progress: %w", err)
			}
			switch {
			case s.Status == api.StatusFinished || s.Status == api.StatusRunning && ev.Type == "done":
				final = &s
				return errStreamDone
			case s.Seq > 0 && s.Seq <= seen:
				return nil // seen before the stream broke
			}
			seen = max(seen, s.Seq)
			fn(s)
			return nil
		})
		if final != nil {
			if final.Status == api.StatusRunning {
				return *final, errors.New("this apply was cut short (the server restarted during it): run apply again to finish it")
			}
			return *final, nil
		}
		var apiErr *apiclient.APIError
		if ctx.Err() != nil || errors.As(err, &apiErr) {
			return api.Progress{}, err
		}
		lastErr = err
	}
	return api.Progress{}, fmt.Errorf("the apply's progress stream keeps breaking (%w): `hatch status` shows where it stands", lastErr)
}

// History returns the project's kept applies, newest first.
func (p *Projects) History(ctx context.Context, namespace, project string) (api.ApplyHistory, error) {
	var h api.ApplyHistory
	err := p.c.Do(ctx, http.MethodGet, api.ProjectPath(namespace, project, "/applies"), nil, &h)
	return h, err
}

// RestartEgg bumps an egg's revision: it rolls again with the same spec.
func (p *Projects) RestartEgg(ctx context.Context, namespace, project, egg string) (api.RestartResult, error) {
	var out api.RestartResult
	err := p.c.Do(ctx, http.MethodPost, api.ProjectPath(namespace, project, "/eggs/"+url.PathEscape(egg)+"/restart"), struct{}{}, &out)
	return out, err
}

// NewPlanRequest makes the body of a plan from the desired resources, their
// explicit dependencies and the value of every secret.
func NewPlanRequest(rs []*resource.Desired, deps []*resource.Dependency, secrets map[string]string) api.PlanRequest {
	req := api.PlanRequest{Resources: make([]api.DesiredResource, len(rs)), Dependencies: make([]api.Dependency, len(deps)),
		Secrets: secrets}
	for i, r := range rs {
		req.Resources[i] = api.DesiredResource{Type: r.Type, Name: r.Name, Inputs: r.Inputs, Source: r.Source}
	}
	for i, d := range deps {
		req.Dependencies[i] = api.Dependency{Parent: d.Parent, Child: d.Child, Condition: string(d.Condition)}
	}
	if req.Secrets == nil {
		req.Secrets = map[string]string{}
	}
	return req
}
