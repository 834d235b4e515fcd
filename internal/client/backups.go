package client

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/hatchery/hatchery/internal/api"
)

// Backups makes the calls about a project's volume backups and restores
// (docs/API.md, "Volume backups"; the routes are listed in
// internal/api/backups.go). Get one with Client.Backups.
type Backups struct{ c *Client }

// Backups is the calls about volume backups and restores.
func (c *Client) Backups() *Backups { return &Backups{c: c} }

// Start takes a backup of the volume now (hatch volume backup), or with
// fromHost of its stale copy on that host; the answer is the task as
// recorded, before its host begins it.
func (b *Backups) Start(ctx context.Context, namespace, project, volume, fromHost string) (api.VolumeTask, error) {
	path := volumePath(namespace, project, volume, "/backups")
	if fromHost != "" {
		path += "?" + url.Values{"from_host": {fromHost}}.Encode()
	}
	var out api.VolumeTask
	err := b.c.Do(ctx, http.MethodPost, path, nil, &out)
	return out, err
}

// ForgetStaleCopy deletes the volume's stale copy on host, the copy a
// failover left there (hatch volume forget --stale-copy).
func (b *Backups) ForgetStaleCopy(ctx context.Context, namespace, project, volume, host string) error {
	return b.c.Do(ctx, http.MethodDelete, volumePath(namespace, project, volume, "/stale-copies/"+url.PathEscape(host)), nil, nil)
}

// List returns the project's backups, newest first (of volume only, if set).
func (b *Backups) List(ctx context.Context, namespace, project, volume string) ([]api.VolumeTask, error) {
	path := api.ProjectPath(namespace, project, "/backups")
	if volume != "" {
		path += "?" + url.Values{"volume": {volume}}.Encode()
	}
	var out []api.VolumeTask
	err := b.c.Do(ctx, http.MethodGet, path, nil, &out)
	return out, err
}

// Task returns one backup or restore.
func (b *Backups) Task(ctx context.Context, namespace, project, id string) (api.VolumeTask, error) {
	var out api.VolumeTask
	err := b.c.Do(ctx, http.MethodGet, taskPath(namespace, project, id), nil, &out)
	return out, err
}

// Wait long-polls the task: it returns once its state is no longer state,
// or after wait (then the task as it is, its phase and counts up to date).
func (b *Backups) Wait(ctx context.Context, namespace, project, id, state string, wait time.Duration) (api.VolumeTask, error) {
	var out api.VolumeTask
	q := url.Values{"state": {state}, "wait": {wait.String()}}
	err := b.c.Do(ctx, http.MethodGet, taskPath(namespace, project, id)+"?"+q.Encode(), nil, &out)
	return out, err
}

// PlanRestore asks what restoring the volume would do, changing nothing
// (req is sent with DryRun set).
func (b *Backups) PlanRestore(ctx context.Context, namespace, project, volume string, req api.RestoreRequest) (api.RestorePlan, error) {
	req.DryRun = true
	var out api.RestorePlan
	err := b.c.Do(ctx, http.MethodPost, volumePath(namespace, project, volume, "/restore"), req, &out)
	return out, err
}

// Restore starts the restore (req is sent without DryRun); the answer is
// the task as recorded.
func (b *Backups) Restore(ctx context.Context, namespace, project, volume string, req api.RestoreRequest) (api.VolumeTask, error) {
	req.DryRun = false
	var out api.VolumeTask
	err := b.c.Do(ctx, http.MethodPost, volumePath(namespace, project, volume, "/restore"), req, &out)
	return out, err
}

// Forget forgets a backup (by its manifest or task ID): it is no longer
// listed nor restorable, and its chunks no other backup holds are collected.
func (b *Backups) Forget(ctx context.Context, namespace, project, id string) error {
	return b.c.Do(ctx, http.MethodDelete, api.ProjectPath(namespace, project, "/backups/"+url.PathEscape(id)), nil, nil)
}

func volumePath(namespace, project, volume, rest string) string {
	return api.ProjectPath(namespace, project, "/volumes/"+url.PathEscape(volume)+rest)
}

func taskPath(namespace, project, id string) string {
	return api.ProjectPath(namespace, project, "/volume-tasks/"+url.PathEscape(id))
}
