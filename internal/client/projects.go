package client

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

	"github.com/coder/websocket"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource"
)

// This file holds the project calls (plan, apply, status, destroy, events,
// rollout restart, blobs) of the one API client. Their bodies are package
// api's, as the server declares them.

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

// Plan asks for a plan of the project.
func (c *Client) Plan(ctx context.Context, namespace, project string, req api.PlanRequest) (api.Plan, error) {
	var p api.Plan
	err := c.Do(ctx, http.MethodPost, api.ProjectPath(namespace, project, "/plan"), req, &p)
	return p, err
}

// PlanDestroy plans the deletion of everything the project has (its volumes
// too when volumes is set).
func (c *Client) PlanDestroy(ctx context.Context, namespace, project string, volumes bool) (api.Plan, error) {
	var p api.Plan
	err := c.Do(ctx, http.MethodPost, api.ProjectPath(namespace, project, "/destroy"), api.DestroyRequest{Volumes: volumes}, &p)
	return p, err
}

// PlanRollback plans applying again the spec and build sources of apply to
// (0: the last successful one before the newest).
func (c *Client) PlanRollback(ctx context.Context, namespace, project string, to int64) (api.Plan, error) {
	var p api.Plan
	err := c.Do(ctx, http.MethodPost, api.ProjectPath(namespace, project, "/rollback"), api.RollbackRequest{To: to}, &p)
	return p, err
}

// History returns the project's kept applies, newest first.
func (c *Client) History(ctx context.Context, namespace, project string) (api.ApplyHistory, error) {
	var h api.ApplyHistory
	err := c.Do(ctx, http.MethodGet, api.ProjectPath(namespace, project, "/applies"), nil, &h)
	return h, err
}

// Apply starts the apply of a plan and returns the apply's ID.
func (c *Client) Apply(ctx context.Context, namespace, project, planID string) (int64, error) {
	var out api.ApplyStarted
	err := c.Do(ctx, http.MethodPost, api.ProjectPath(namespace, project, "/apply"), api.ApplyRequest{Plan: planID}, &out)
	return out.Apply.ID, err
}

// FollowApply streams an apply's steps to fn until it finishes, and
// returns the finishing step. A stream cut short (a restarting server, a
// proxy) is read again, a few times, skipping the steps already seen.
func (c *Client) FollowApply(ctx context.Context, namespace, project string, id int64, fn func(api.Progress)) (api.Progress, error) {
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
		err := c.stream(ctx, path, func(ev sseEvent) error {
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
		var apiErr *APIError
		if ctx.Err() != nil || errors.As(err, &apiErr) {
			return api.Progress{}, err
		}
		lastErr = err
	}
	return api.Progress{}, fmt.Errorf("the apply's progress stream keeps breaking (%w): `hatch status` shows where it stands", lastErr)
}

// errStreamDone ends a stream early, as asked.
var errStreamDone = errors.New("stream done")

// stream reads the server-sent events at path, calling fn for each, until
// fn returns errStreamDone (then stream returns nil) or another error, the
// stream ends (io.ErrUnexpectedEOF: the caller expected more) or ctx ends.
func (c *Client) stream(ctx context.Context, path string, fn func(sseEvent) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := c.Send(ctx, http.MethodGet, path, nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ReadError(resp)
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

// RestartEgg bumps an egg's revision: it rolls again with the same spec.
func (c *Client) RestartEgg(ctx context.Context, namespace, project, egg string) (api.RestartResult, error) {
	var out api.RestartResult
	err := c.Do(ctx, http.MethodPost, api.ProjectPath(namespace, project, "/eggs/"+url.PathEscape(egg)+"/restart"), struct{}{}, &out)
	return out, err
}

// Project returns the project's deployed resources; ok is false for a
// project the server does not know.
func (c *Client) Project(ctx context.Context, namespace, project string) (api.Project, bool, error) {
	var p api.Project
	err := c.Do(ctx, http.MethodGet, api.ProjectPath(namespace, project, ""), nil, &p)
	if isNotFound(err) {
		return api.Project{}, false, nil
	}
	return p, err == nil, err
}

func isNotFound(err error) bool {
	var apiErr *APIError
	return errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusNotFound
}

// Projects lists every project the server has.
func (c *Client) Projects(ctx context.Context) ([]api.ProjectSummary, error) {
	var out api.ProjectList
	err := c.Do(ctx, http.MethodGet, "/api/v1/projects", nil, &out)
	return out.Projects, err
}

// HostReport returns a host's last status report (nil if none).
func (c *Client) HostReport(ctx context.Context, hostID string) (*contract.StatusReport, error) {
	var out api.HostDetail
	err := c.Do(ctx, http.MethodGet, "/api/v1/hosts/"+url.PathEscape(hostID), nil, &out)
	return out.Status, err
}

// ProjectStatus returns where the project's eggs stand; ok is false for a
// project the server does not know.
func (c *Client) ProjectStatus(ctx context.Context, namespace, project string) (api.ProjectStatus, bool, error) {
	var s api.ProjectStatus
	err := c.Do(ctx, http.MethodGet, api.ProjectPath(namespace, project, "/status"), nil, &s)
	if isNotFound(err) {
		return api.ProjectStatus{}, false, nil
	}
	return s, err == nil, err
}

// Events returns the events after seq, oldest first (at most a page).
func (c *Client) Events(ctx context.Context, since int64) ([]api.Event, error) {
	var out api.EventList
	err := c.Do(ctx, http.MethodGet, "/api/v1/events?limit=1000&since="+strconv.FormatInt(since, 10), nil, &out)
	return out.Events, err
}

// LastEventSeq is the sequence number of the newest event, so that a
// follower starts after what happened before.
func (c *Client) LastEventSeq(ctx context.Context) (int64, error) {
	var last int64
	for {
		page, err := c.Events(ctx, last)
		if err != nil || len(page) == 0 {
			return last, err
		}
		last = page[len(page)-1].Seq
	}
}

// FollowEvents streams the events after since to fn until ctx ends or fn
// fails.
func (c *Client) FollowEvents(ctx context.Context, since int64, fn func(api.Event) error) error {
	return c.stream(ctx, "/api/v1/events?follow=1&since="+strconv.FormatInt(since, 10), func(ev sseEvent) error {
		var e api.Event
		if err := json.Unmarshal([]byte(ev.Data), &e); err != nil {
			return fmt.Errorf("event: %w", err)
		}
		return fn(e)
	})
}

// HasBlob reports whether the server has a blob; asking also keeps it from
// being collected for a while, so the plan that follows can name it.
func (c *Client) HasBlob(ctx context.Context, digest string) (bool, error) {
	resp, err := c.Send(ctx, http.MethodHead, "/api/v1/blobs/"+digest, nil, "")
	if err != nil {
		return false, err
	}
	defer drainClose(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusNotFound:
		return false, nil
	}
	return false, fmt.Errorf("checking for a build context: %w", ReadError(resp))
}

// PutBlob uploads a file as the blob with the digest.
func (c *Client) PutBlob(ctx context.Context, digest, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	resp, err := c.Send(ctx, http.MethodPut, "/api/v1/blobs/"+digest, f, "application/octet-stream")
	if err != nil {
		return err
	}
	defer drainClose(resp.Body)
	if resp.StatusCode/100 != 2 {
		return ReadError(resp)
	}
	return nil
}

// Logs opens the project's logs stream (GET .../logs with query q: egg,
// slot, follow, since, tail, host): contract.LogRecord text messages until
// the server closes it (at once after the last line without follow).
func (c *Client) Logs(ctx context.Context, namespace, project string, q url.Values) (*websocket.Conn, error) {
	return c.Dial(ctx, api.ProjectPath(namespace, project, "/logs")+"?"+q.Encode())
}

// Exec opens a stream to a command run in the egg's replica (GET
// .../eggs/{egg}/exec with query q: cmd repeated, slot, tty, stdin, width,
// height): binary messages carry the bytes, text messages
// contract.ExecControl.
func (c *Client) Exec(ctx context.Context, namespace, project, egg string, q url.Values) (*websocket.Conn, error) {
	return c.Dial(ctx, api.ProjectPath(namespace, project, "/eggs/"+url.PathEscape(egg)+"/exec")+"?"+q.Encode())
}
