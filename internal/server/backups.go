package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/backup"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/spec"
	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/volumes"
)

// The volume backup endpoints (api/backups.go): the project's (hatch
// volume backup|backups|restore|forget) and the hosts' data routes of
// contract.VolumeTaskPath. Handlers check the path and body and leave
// every decision (which host, whether a task is the host's, whether a
// chunk is the restore's) to the backups service.

// Backups is the backups service (internal/volumes) as the API uses it.
// project is "<namespace>/<project>"; actor is who asked; host is the
// calling host's ID (the path's, which its token was checked against).
type Backups interface {
	Backup(ctx context.Context, project, volume, fromHost, actor string) (api.VolumeTask, error)
	List(ctx context.Context, project, volume string) ([]api.VolumeTask, error)
	Get(ctx context.Context, project, id string) (api.VolumeTask, error)
	// Wait returns once the task's state differs from state, or when ctx
	// ends (then the task as it is, no error).
	Wait(ctx context.Context, project, id, state string) (api.VolumeTask, error)
	Restore(ctx context.Context, project, volume string, req api.RestoreRequest, actor string) (api.RestorePlan, *api.VolumeTask, error)
	Forget(ctx context.Context, project, id, actor string) (api.VolumeTask, error)
	ForgetStaleCopy(ctx context.Context, project, volume, host, actor string) error

	Missing(ctx context.Context, host, task string, ids []string) ([]string, error)
	PutChunk(ctx context.Context, host, task, id string, data []byte) error
	PutManifest(ctx context.Context, host, task, id string, data []byte) error
	GetManifest(ctx context.Context, host, task string) ([]byte, error)
	GetChunk(ctx context.Context, host, task, id string) ([]byte, error)
	// Collector is the backups' metrics (each volume's last good backup).
	Collector() prometheus.Collector
	// BackupStates is where the project's volumes' backups stand, with
	// their warnings (the project status).
	BackupStates(ctx context.Context, project string) ([]api.VolumeBackupState, error)
}

var _ Backups = (*volumes.Service)(nil)

// taskIDPattern is a volume task's ID, or a manifest's (64 hex digits).
var taskIDPattern = regexp.MustCompile(`^[a-f0-9]{16}$|^[a-f0-9]{64}$`)

// backupRoutes are the backups' endpoints.
func (s *Server) backupRoutes(plain, blobs func(*http.Request) time.Duration, body int64) []route {
	const p = "/api/v1/projects/{namespace}/{project}"
	const h = "/api/v1/hosts/{id}/volume-tasks/{task}"
	return []route{
		{"POST " + p + "/volumes/{volume}/backups", projectScoped, plain, body, s.postBackup},
		{"GET " + p + "/backups", projectScoped, plain, 0, s.getBackups},
		{"GET " + p + "/volume-tasks/{id}", projectScoped, s.waitPlusMargin, 0, s.getVolumeTask},
		{"POST " + p + "/volumes/{volume}/restore", projectScoped, plain, body, s.postRestore},
		{"DELETE " + p + "/backups/{id}", projectScoped, plain, 0, s.deleteBackup},
		{"DELETE " + p + "/volumes/{volume}/stale-copies/{host}", projectScoped, plain, 0, s.deleteStaleCopy},
		{"POST " + h + "/missing", hostOrAdmin, plain, body, s.postMissing},
		{"PUT " + h + "/chunks/{chunk}", hostOrAdmin, blobs, volumes.MaxChunk, s.putChunk},
		{"PUT " + h + "/manifest/{manifest}", hostOrAdmin, blobs, volumes.MaxManifest, s.putManifest},
		{"GET " + h + "/manifest", hostOrAdmin, blobs, 0, s.getManifest},
		{"GET " + h + "/chunks/{chunk}", hostOrAdmin, blobs, 0, s.getChunk},
	}
}

// projectVolume returns the checked project and volume of the path.
func projectVolume(r *http.Request) (string, string, error) {
	project, err := projectOf(r)
	if err != nil {
		return "", "", err
	}
	v := r.PathValue("volume")
	if !spec.ValidName(v) {
		return "", "", api.BadRequest("path: volume %q is not a volume's name ([a-z0-9-], 1 to 40 characters)", v)
	}
	return project, v, nil
}

// projectTask returns the checked project and task (or manifest) ID.
func projectTask(r *http.Request) (string, string, error) {
	project, err := projectOf(r)
	if err != nil {
		return "", "", err
	}
	id := r.PathValue("id")
	if !taskIDPattern.MatchString(id) {
		return "", "", api.BadRequest("path: %q is not a backup's or a volume task's ID (hatch volume backups lists them)", id)
	}
	return project, id, nil
}

// hostTask returns the checked host and task of a data route's path.
func hostTask(r *http.Request) (string, string, error) {
	host, task := r.PathValue("id"), r.PathValue("task")
	if !taskIDPattern.MatchString(task) {
		return "", "", api.BadRequest("path: %q is not a volume task's ID", task)
	}
	return host, task, nil
}

// objectID returns the checked chunk or manifest ID of the path.
func objectID(r *http.Request, name string) (string, error) {
	id := r.PathValue(name)
	if !backup.ValidID(id) {
		return "", api.BadRequest("path: %s %q is not 64 lowercase hex digits (the SHA-256 of what is stored)", name, id)
	}
	return id, nil
}

// backupsError maps the service's errors to the API's.
func backupsError(err error) error {
	switch {
	case errors.Is(err, volumes.ErrNotFound):
		return api.NotFound("%v", err)
	case errors.Is(err, volumes.ErrRefused):
		return api.Errorf(api.CodeConflict, "%v", err)
	case errors.Is(err, volumes.ErrInvalid):
		return api.BadRequest("%v", err)
	case errors.Is(err, volumes.ErrForbidden):
		return api.Errorf(api.CodeForbidden, "%v", err)
	}
	return err
}

// postBackup is POST .../volumes/{volume}/backups: a backup now, answered
// 201 with the task as recorded (and delivered).
func (s *Server) postBackup(w http.ResponseWriter, r *http.Request) error {
	project, v, err := projectVolume(r)
	if err != nil {
		return err
	}
	from := r.URL.Query().Get("from_host")
	if from != "" && !pki.ValidHostID(from) {
		return api.BadRequest("from_host: %q is not a host's name or ID", from)
	}
	t, err := s.deps.Backups.Backup(r.Context(), project, v, from, store.ActorOf(r.Context()))
	if err != nil {
		return backupsError(err)
	}
	writeJSON(w, http.StatusCreated, t)
	return nil
}

// getBackups is GET .../backups (?volume=): the project's backups, newest first.
func (s *Server) getBackups(w http.ResponseWriter, r *http.Request) error {
	project, err := projectOf(r)
	if err != nil {
		return err
	}
	v := r.URL.Query().Get("volume")
	if v != "" && !spec.ValidName(v) {
		return api.BadRequest("volume: %q is not a volume's name ([a-z0-9-], 1 to 40 characters)", v)
	}
	list, err := s.deps.Backups.List(r.Context(), project, v)
	if err != nil {
		return backupsError(err)
	}
	if list == nil {
		list = []api.VolumeTask{}
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// getVolumeTask is GET .../volume-tasks/{id}: the task; with ?wait=D&state=S,
// a long-poll answered once its state is no longer S (held like a run's).
func (s *Server) getVolumeTask(w http.ResponseWriter, r *http.Request) error {
	project, id, err := projectTask(r)
	if err != nil {
		return err
	}
	wait, err := s.parseWait(r)
	if err != nil {
		return err
	}
	state := r.URL.Query().Get("state")
	if wait == 0 || state == "" {
		t, err := s.deps.Backups.Get(r.Context(), project, id)
		if err != nil {
			return backupsError(err)
		}
		writeJSON(w, http.StatusOK, t)
		return nil
	}
	return s.waitForChange(w, r, wait, func(ctx context.Context) (any, error) {
		t, err := s.deps.Backups.Wait(ctx, project, id, state)
		if err != nil {
			return nil, backupsError(err)
		}
		return t, nil
	})
}

// postRestore is POST .../volumes/{volume}/restore: the plan (dry run,
// 200), or the restore recorded and delivered (201).
func (s *Server) postRestore(w http.ResponseWriter, r *http.Request) error {
	project, v, err := projectVolume(r)
	if err != nil {
		return err
	}
	var req api.RestoreRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if req.From != "" && !taskIDPattern.MatchString(req.From) {
		return api.BadRequest("from: %q is not a backup's ID (hatch volume backups lists them)", req.From)
	}
	if req.To != "" && !spec.ValidName(req.To) {
		return api.BadRequest("to: %q is not a volume's name ([a-z0-9-], 1 to 40 characters)", req.To)
	}
	plan, t, err := s.deps.Backups.Restore(r.Context(), project, v, req, store.ActorOf(r.Context()))
	if err != nil {
		return backupsError(err)
	}
	if t == nil {
		writeJSON(w, http.StatusOK, plan)
		return nil
	}
	writeJSON(w, http.StatusCreated, t)
	return nil
}

// deleteBackup is DELETE .../backups/{id}: hatch volume forget.
func (s *Server) deleteBackup(w http.ResponseWriter, r *http.Request) error {
	project, id, err := projectTask(r)
	if err != nil {
		return err
	}
	t, err := s.deps.Backups.Forget(r.Context(), project, id, store.ActorOf(r.Context()))
	if err != nil {
		return backupsError(err)
	}
	writeJSON(w, http.StatusOK, t)
	return nil
}

// deleteStaleCopy is DELETE .../volumes/{volume}/stale-copies/{host}:
// hatch volume forget --stale-copy, answered 204.
func (s *Server) deleteStaleCopy(w http.ResponseWriter, r *http.Request) error {
	project, v, err := projectVolume(r)
	if err != nil {
		return err
	}
	host := r.PathValue("host")
	if !pki.ValidHostID(host) {
		return api.BadRequest("host: %q is not a host's name or ID", host)
	}
	if err := s.deps.Backups.ForgetStaleCopy(r.Context(), project, v, host, store.ActorOf(r.Context())); err != nil {
		return backupsError(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// postMissing is POST .../volume-tasks/{task}/missing: which chunks the
// store lacks, of a backup's.
func (s *Server) postMissing(w http.ResponseWriter, r *http.Request) error {
	host, task, err := hostTask(r)
	if err != nil {
		return err
	}
	var ids []string
	if err := decodeJSON(r, &ids); err != nil {
		return err
	}
	missing, err := s.deps.Backups.Missing(r.Context(), host, task, ids)
	if err != nil {
		return backupsError(err)
	}
	writeJSON(w, http.StatusOK, missing)
	return nil
}

// readObject reads an uploaded chunk or manifest (its limit is the route's).
func readObject(r *http.Request) ([]byte, error) {
	data, err := io.ReadAll(r.Body)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, api.Errorf(api.CodeTooLarge, "the body is over %d bytes", tooLarge.Limit)
	}
	return data, err
}

// putChunk is PUT .../chunks/{chunk}: a backup's sealed chunk.
func (s *Server) putChunk(w http.ResponseWriter, r *http.Request) error {
	return s.putObject(w, r, "chunk", s.deps.Backups.PutChunk)
}

// putManifest is PUT .../manifest/{manifest}: a backup's sealed manifest.
func (s *Server) putManifest(w http.ResponseWriter, r *http.Request) error {
	return s.putObject(w, r, "manifest", s.deps.Backups.PutManifest)
}

// putObject stores the body under the path's {kind} ID for the host's task.
func (s *Server) putObject(w http.ResponseWriter, r *http.Request, kind string,
	put func(ctx context.Context, host, task, id string, data []byte) error) error {
	host, task, err := hostTask(r)
	if err != nil {
		return err
	}
	id, err := objectID(r, kind)
	if err != nil {
		return err
	}
	data, err := readObject(r)
	if err != nil {
		return err
	}
	if err := put(r.Context(), host, task, id, data); err != nil {
		return backupsError(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// getManifest is GET .../manifest: a restore's sealed manifest.
func (s *Server) getManifest(w http.ResponseWriter, r *http.Request) error {
	host, task, err := hostTask(r)
	if err != nil {
		return err
	}
	data, err := s.deps.Backups.GetManifest(r.Context(), host, task)
	if err != nil {
		return backupsError(err)
	}
	return writeObject(w, data)
}

// getChunk is GET .../chunks/{chunk}: a sealed chunk of a restore's backup.
func (s *Server) getChunk(w http.ResponseWriter, r *http.Request) error {
	host, task, err := hostTask(r)
	if err != nil {
		return err
	}
	id, err := objectID(r, "chunk")
	if err != nil {
		return err
	}
	data, err := s.deps.Backups.GetChunk(r.Context(), host, task, id)
	if err != nil {
		return backupsError(err)
	}
	return writeObject(w, data)
}

func writeObject(w http.ResponseWriter, data []byte) error {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(data)
	return err
}
