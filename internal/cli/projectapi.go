package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource"
)

// This file holds the typed calls of the project commands (plan, apply,
// status, destroy, events, rollout restart) on the one API client,
// client.Client. The types are the JSON of docs/API.md, as far as the CLI
// reads it.

// projectAPI is what the project commands need of the control plane.
type projectAPI struct{ c *client.Client }

// projectPath is the API path of a project, with more appended.
func projectPath(namespace, project, more string) string {
	return "/api/v1/projects/" + url.PathEscape(namespace) + "/" + url.PathEscape(project) + more
}

// planRequest asks for a plan: the desired resources, their explicit
// dependencies, and the value of every secret.
type planRequest struct {
	Resources    []planResource    `json:"resources"`
	Dependencies []planDependency  `json:"dependencies"`
	Secrets      map[string]string `json:"secrets"`
}

type planResource struct {
	Type   resource.Kind  `json:"type"`
	Name   string         `json:"name"`
	Inputs map[string]any `json:"inputs"`
	Source string         `json:"source,omitempty"`
}

type planDependency struct {
	Parent    string `json:"parent"`
	Child     string `json:"child"`
	Condition string `json:"condition,omitempty"`
}

// plan is the server's answer: what would change, and the container steps
// it implies per host.
type plan struct {
	ID         string         `json:"id"`
	Project    string         `json:"project"`
	HasChanges bool           `json:"has_changes"`
	Summary    map[string]int `json:"summary"`
	Changes    []planChange   `json:"changes"`
	Hosts      []planHost     `json:"hosts"`
}

type planChange struct {
	Action  string   `json:"action"` // + ~ - =
	Key     string   `json:"key"`
	Changed []string `json:"changed"`
	Unknown []string `json:"unknown"`
}

type planHost struct {
	Host  string   `json:"host"`
	Name  string   `json:"name"`
	Steps []string `json:"steps"`
}

func newPlanRequest(rs []*resource.Desired, deps []*resource.Dependency, secrets map[string]string) planRequest {
	req := planRequest{Resources: make([]planResource, len(rs)), Dependencies: make([]planDependency, len(deps)), Secrets: secrets}
	for i, r := range rs {
		req.Resources[i] = planResource{Type: r.Type, Name: r.Name, Inputs: r.Inputs, Source: r.Source}
	}
	for i, d := range deps {
		req.Dependencies[i] = planDependency{Parent: d.Parent, Child: d.Child, Condition: string(d.Condition)}
	}
	if req.Secrets == nil {
		req.Secrets = map[string]string{}
	}
	return req
}

func (a projectAPI) Plan(ctx context.Context, namespace, project string, req planRequest) (plan, error) {
	var p plan
	err := a.c.Do(ctx, http.MethodPost, projectPath(namespace, project, "/plan"), req, &p)
	return p, err
}

// PlanDestroy plans the deletion of everything the project has (its volumes
// too when volumes is set).
func (a projectAPI) PlanDestroy(ctx context.Context, namespace, project string, volumes bool) (plan, error) {
	var p plan
	err := a.c.Do(ctx, http.MethodPost, projectPath(namespace, project, "/destroy"), map[string]bool{"volumes": volumes}, &p)
	return p, err
}

// Apply starts the apply of a plan and returns the apply's ID.
func (a projectAPI) Apply(ctx context.Context, namespace, project, planID string) (int64, error) {
	var out struct {
		Apply struct {
			ID int64 `json:"id"`
		} `json:"apply"`
	}
	err := a.c.Do(ctx, http.MethodPost, projectPath(namespace, project, "/apply"), map[string]string{"plan": planID}, &out)
	return out.Apply.ID, err
}

// applyStep is one step of an apply's progress.
type applyStep struct {
	Seq      int64  `json:"seq"`
	Resource string `json:"resource"`
	Action   string `json:"action"`
	// Status is started, done, failed or waiting; finished ends the apply.
	Status  string         `json:"status"`
	Message string         `json:"message"`
	Outcome string         `json:"outcome"`
	Summary map[string]int `json:"summary"`
}

// FollowApply streams an apply's steps to fn until it finishes, and
// returns the finishing step. A stream cut short (a restarting server, a
// proxy) is read again, a few times, skipping the steps already seen.
func (a projectAPI) FollowApply(ctx context.Context, namespace, project string, id int64, fn func(applyStep)) (applyStep, error) {
	path := projectPath(namespace, project, "/applies/"+strconv.FormatInt(id, 10)+"/events")
	var seen int64
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return applyStep{}, ctx.Err()
			case <-time.After(time.Duration(attempt) * time.Second):
			}
		}
		var final *applyStep
		err := a.stream(ctx, path, func(ev sseEvent) error {
			var s applyStep
			if err := json.Unmarshal([]byte(ev.Data), &s); err != nil {
				return fmt.Errorf("apply progress: %w", err)
			}
			switch {
			case s.Status == "finished" || s.Status == "running" && ev.Type == "done":
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
			if final.Status == "running" {
				return *final, errors.New("this apply was cut short (the server restarted during it): run apply again to finish it")
			}
			return *final, nil
		}
		var apiErr *client.APIError
		if ctx.Err() != nil || errors.As(err, &apiErr) {
			return applyStep{}, err
		}
		lastErr = err
	}
	return applyStep{}, fmt.Errorf("the apply's progress stream keeps breaking (%w): `hatch status` shows where it stands", lastErr)
}

// errStreamDone ends a stream early, as asked.
var errStreamDone = errors.New("stream done")

// stream reads the server-sent events at path, calling fn for each, until
// fn returns errStreamDone (then stream returns nil) or another error, the
// stream ends (io.ErrUnexpectedEOF: the caller expected more) or ctx ends.
func (a projectAPI) stream(ctx context.Context, path string, fn func(sseEvent) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := a.c.Send(ctx, http.MethodGet, path, nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return client.ReadError(resp)
	}
	err = readSSE(resp.Body, fn)
	switch {
	case errors.Is(err, errStreamDone):
		return nil
	case err == nil:
		return io.ErrUnexpectedEOF
	}
	return err
}

// Restart bumps an egg's revision: it rolls again with the same spec.
func (a projectAPI) Restart(ctx context.Context, namespace, project, egg string) (int, error) {
	var out struct {
		Revision int `json:"revision"`
	}
	err := a.c.Do(ctx, http.MethodPost, projectPath(namespace, project, "/eggs/"+url.PathEscape(egg)+"/restart"), struct{}{}, &out)
	return out.Revision, err
}

// deployedProject is a project's deployed resources.
type deployedProject struct {
	Namespace string             `json:"namespace"`
	Name      string             `json:"name"`
	Resources []deployedResource `json:"resources"`
	Applies   []struct {
		ID      int64  `json:"id"`
		Outcome string `json:"outcome"`
		Message string `json:"message"`
	} `json:"applies"`
}

type deployedResource struct {
	Type    string         `json:"type"`
	Name    string         `json:"name"`
	Pending bool           `json:"pending"`
	Outputs map[string]any `json:"outputs"`
}

// Project returns the project's deployed resources; ok is false for a
// project the server does not know.
func (a projectAPI) Project(ctx context.Context, namespace, project string) (deployedProject, bool, error) {
	var p deployedProject
	err := a.c.Do(ctx, http.MethodGet, projectPath(namespace, project, ""), nil, &p)
	var apiErr *client.APIError
	if errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusNotFound {
		return deployedProject{}, false, nil
	}
	return p, err == nil, err
}

// projectName is one project in the server's list.
type projectName struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Resources int    `json:"resources"`
}

func (a projectAPI) Projects(ctx context.Context) ([]projectName, error) {
	var out struct {
		Projects []projectName `json:"projects"`
	}
	err := a.c.Do(ctx, http.MethodGet, "/api/v1/projects", nil, &out)
	return out.Projects, err
}

// HostReport returns a host's last status report (nil if none).
func (a projectAPI) HostReport(ctx context.Context, hostID string) (*contract.StatusReport, error) {
	var out struct {
		Status *contract.StatusReport `json:"status"`
	}
	err := a.c.Do(ctx, http.MethodGet, "/api/v1/hosts/"+url.PathEscape(hostID), nil, &out)
	return out.Status, err
}

// projectStatus is GET .../status: where each egg of a project stands,
// worked out by the server (docs/API.md). It carries no spec and no secret
// value, which is why status reads it rather than the hosts' desired states.
type projectStatus struct {
	Namespace string `json:"namespace"`
	Project   string `json:"project"`
	// HostsUp counts the fleet's hosts up, whatever they run.
	HostsUp int                `json:"hosts_up"`
	Eggs    []projectEggStatus `json:"eggs"`
}

// projectEggStatus is one egg over every host, as the CLI reads it.
type projectEggStatus struct {
	Name         string       `json:"name"`
	Desired      int          `json:"desired"`
	Ready        int          `json:"ready"`
	Previous     int          `json:"previous"`
	Restarts     int          `json:"restarts"`
	CrashLooping int          `json:"crash_looping"`
	Rollout      eggRollout   `json:"rollout"`
	Hosts        []eggOnAHost `json:"hosts"`
}

// eggRollout is where an egg's rollout stands.
type eggRollout struct {
	// State is done, progressing, waiting or failed.
	State   string   `json:"state"`
	Reason  string   `json:"reason,omitempty"`
	LogTail []string `json:"log_tail,omitempty"`
}

// eggOnAHost is an egg's workload on one host, as far as the CLI shows it.
type eggOnAHost struct {
	ID      string `json:"id"`
	Name    string `json:"name,omitempty"`
	Desired int    `json:"desired"`
}

// ProjectStatus returns where the project's eggs stand; ok is false for a
// project the server does not know.
func (a projectAPI) ProjectStatus(ctx context.Context, namespace, project string) (projectStatus, bool, error) {
	var s projectStatus
	err := a.c.Do(ctx, http.MethodGet, projectPath(namespace, project, "/status"), nil, &s)
	var apiErr *client.APIError
	if errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusNotFound {
		return projectStatus{}, false, nil
	}
	return s, err == nil, err
}

// event is one entry of the control plane's event log.
type event struct {
	Seq      int64     `json:"seq"`
	Time     time.Time `json:"time"`
	Type     string    `json:"type"`
	Project  string    `json:"project"`
	Host     string    `json:"host"`
	Resource string    `json:"resource"`
	Message  string    `json:"message"`
}

// Events returns the events after seq, oldest first (at most a page).
func (a projectAPI) Events(ctx context.Context, since int64) ([]event, error) {
	var out struct {
		Events []event `json:"events"`
	}
	err := a.c.Do(ctx, http.MethodGet, "/api/v1/events?limit=1000&since="+strconv.FormatInt(since, 10), nil, &out)
	return out.Events, err
}

// FollowEvents streams the events after since to fn until ctx ends or fn
// fails.
func (a projectAPI) FollowEvents(ctx context.Context, since int64, fn func(event) error) error {
	return a.stream(ctx, "/api/v1/events?follow=1&since="+strconv.FormatInt(since, 10), func(ev sseEvent) error {
		var e event
		if err := json.Unmarshal([]byte(ev.Data), &e); err != nil {
			return fmt.Errorf("event: %w", err)
		}
		return fn(e)
	})
}

// HasBlob reports whether the server has a blob; asking also keeps it from
// being collected for a while, so the plan that follows can name it.
func (a projectAPI) HasBlob(ctx context.Context, digest string) (bool, error) {
	resp, err := a.c.Send(ctx, http.MethodHead, "/api/v1/blobs/"+digest, nil, "")
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusNotFound:
		return false, nil
	}
	return false, &client.APIError{StatusCode: resp.StatusCode, Message: "checking for a build context: " + resp.Status}
}

// PutBlob uploads a file as the blob with the digest.
func (a projectAPI) PutBlob(ctx context.Context, digest, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	resp, err := a.c.Send(ctx, http.MethodPut, "/api/v1/blobs/"+digest, f, "application/octet-stream")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return client.ReadError(resp)
	}
	return nil
}
