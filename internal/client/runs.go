package client

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/hatchery/hatchery/internal/api"
)

// Runs makes the calls about a project's runs and schedules (docs/API.md,
// "Runs and schedules"). Get one with Client.Runs.
type Runs struct{ c *Client }

// Start starts a run of the egg (hatch run); the answer is the run as
// recorded, before its container starts.
func (r *Runs) Start(ctx context.Context, namespace, project, egg string, req api.RunRequest) (api.Run, error) {
	var out api.Run
	err := r.c.Do(ctx, http.MethodPost, api.ProjectPath(namespace, project, "/eggs/"+url.PathEscape(egg)+"/runs"), req, &out)
	return out, err
}

// List returns the project's runs, newest first (egg's only, if set).
func (r *Runs) List(ctx context.Context, namespace, project, egg string) ([]api.Run, error) {
	path := api.ProjectPath(namespace, project, "/runs")
	if egg != "" {
		path += "?" + url.Values{"egg": {egg}}.Encode()
	}
	var out api.Runs
	err := r.c.Do(ctx, http.MethodGet, path, nil, &out)
	return out.Runs, err
}

// Get returns one run.
func (r *Runs) Get(ctx context.Context, namespace, project, id string) (api.Run, error) {
	var out api.Run
	err := r.c.Do(ctx, http.MethodGet, runPath(namespace, project, id, ""), nil, &out)
	return out, err
}

// Wait long-polls the run: it returns once the run's state is no longer
// state, or after wait (then the run as it is, in the same state).
func (r *Runs) Wait(ctx context.Context, namespace, project, id, state string, wait time.Duration) (api.Run, error) {
	var out api.Run
	q := url.Values{"state": {state}, "wait": {wait.String()}}
	err := r.c.Do(ctx, http.MethodGet, runPath(namespace, project, id, "")+"?"+q.Encode(), nil, &out)
	return out, err
}

// Stop asks the run's host to stop it (Ctrl-C on hatch run); the answer is
// the run as it is, usually not ended yet: Wait for its end.
func (r *Runs) Stop(ctx context.Context, namespace, project, id string) (api.Run, error) {
	var out api.Run
	err := r.c.Do(ctx, http.MethodPost, runPath(namespace, project, id, "/stop"), nil, &out)
	return out, err
}

// Schedules returns the project's schedules, each with its next run.
func (r *Runs) Schedules(ctx context.Context, namespace, project string) ([]api.Schedule, error) {
	var out api.Schedules
	err := r.c.Do(ctx, http.MethodGet, api.ProjectPath(namespace, project, "/schedules"), nil, &out)
	return out.Schedules, err
}

// Fire runs a scheduled egg now, outside its schedule (hatch schedule run).
func (r *Runs) Fire(ctx context.Context, namespace, project, egg string) (api.Run, error) {
	var out api.Run
	err := r.c.Do(ctx, http.MethodPost, schedulePath(namespace, project, egg, "run"), nil, &out)
	return out, err
}

// Pause stops the egg's schedule from firing until Resume.
func (r *Runs) Pause(ctx context.Context, namespace, project, egg string) error {
	return r.c.Do(ctx, http.MethodPost, schedulePath(namespace, project, egg, "pause"), nil, nil)
}

// Resume lets a paused schedule fire again, from its next tick.
func (r *Runs) Resume(ctx context.Context, namespace, project, egg string) error {
	return r.c.Do(ctx, http.MethodPost, schedulePath(namespace, project, egg, "resume"), nil, nil)
}

func runPath(namespace, project, id, rest string) string {
	return api.ProjectPath(namespace, project, "/runs/"+url.PathEscape(id)+rest)
}

func schedulePath(namespace, project, egg, action string) string {
	return api.ProjectPath(namespace, project, "/schedules/"+url.PathEscape(egg)+"/"+action)
}
