package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/hatchery/hatchery/internal/apiclient"
	"github.com/hatchery/hatchery/internal/backup"
	"github.com/hatchery/hatchery/internal/contract"
)

// maxStoredObject bounds a chunk or manifest read from the control plane: a
// sealed chunk is at most a little over backup.MaxChunk, and a manifest of a
// very large volume a few MB.
const maxStoredObject = 64 << 20

// taskStoreAttempts bounds the tries of one request of a task's store; with
// the back-off below they span about a minute, what a server's restart or a
// move to another server of the cluster takes.
const taskStoreAttempts = 8

// TaskStore is a backup.Store over the control plane's routes for one
// volume task of this host (contract.VolumeTaskPath's): chunks and the
// manifest go over the host's own HTTPS connection with its token, tried on
// each server it knows. The server checks each object's SHA-256 and that
// the task is this host's, open, and of the route's kind.
type TaskStore struct {
	api  *apiclient.Client
	base string
	// retry makes the back-off of one request (a test shortens it).
	retry func() backoff.BackOff
}

var _ backup.Store = (*TaskStore)(nil)

// TaskStore returns the store of this host's volume task taskID.
func (c *HTTPClient) TaskStore(taskID string) backup.Store {
	return &TaskStore{api: c.api, base: contract.VolumeTaskPath(url.PathEscape(c.hostID), url.PathEscape(taskID)),
		retry: func() backoff.BackOff {
			b := backoff.NewExponentialBackOff()
			b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 500*time.Millisecond, 15*time.Second, 0
			return b
		}}
}

// Put sends a sealed chunk.
func (s *TaskStore) Put(ctx context.Context, id string, data []byte) error {
	if !backup.ValidID(id) {
		return fmt.Errorf("put chunk %q: not an object ID", id)
	}
	_, err := s.do(ctx, http.MethodPut, "/chunks/"+id, data, "application/octet-stream")
	return err
}

// Get fetches a sealed chunk (backup.Restore verifies it).
func (s *TaskStore) Get(ctx context.Context, id string) ([]byte, error) {
	if !backup.ValidID(id) {
		return nil, fmt.Errorf("get chunk %q: not an object ID", id)
	}
	return s.do(ctx, http.MethodGet, "/chunks/"+id, nil, "")
}

// Missing asks which of ids the store lacks.
func (s *TaskStore) Missing(ctx context.Context, ids []string) ([]string, error) {
	body, err := json.Marshal(ids)
	if err != nil {
		return nil, fmt.Errorf("missing chunks: %w", err)
	}
	answer, err := s.do(ctx, http.MethodPost, "/missing", body, "application/json")
	if err != nil {
		return nil, err
	}
	var missing []string
	if err := json.Unmarshal(answer, &missing); err != nil {
		return nil, fmt.Errorf("missing chunks: the server's answer: %w", err)
	}
	// Trust nothing: an ID asked for is all the answer may hold.
	asked := make(map[string]bool, len(ids))
	for _, id := range ids {
		asked[id] = true
	}
	for _, id := range missing {
		if !asked[id] {
			return nil, fmt.Errorf("missing chunks: the server named %q, which was not asked about", id)
		}
	}
	return missing, nil
}

// PutManifest sends the sealed manifest: the last object of a backup.
func (s *TaskStore) PutManifest(ctx context.Context, id string, data []byte) error {
	if !backup.ValidID(id) {
		return fmt.Errorf("put manifest %q: not an object ID", id)
	}
	_, err := s.do(ctx, http.MethodPut, "/manifest/"+id, data, "application/octet-stream")
	return err
}

// GetManifest fetches the sealed manifest of the task's backup (the route
// knows which: id must be it, and backup.OpenManifest checks the bytes
// against it).
func (s *TaskStore) GetManifest(ctx context.Context, id string) ([]byte, error) {
	return s.do(ctx, http.MethodGet, "/manifest", nil, "")
}

// ListManifests is not a host's: the control plane lists backups.
func (s *TaskStore) ListManifests(context.Context) ([]string, error) {
	return nil, errors.New("a host's task store cannot list backups: the control plane does")
}

// do makes one request, tried again with back-off while the failure may be
// passing (the server unreachable, 5xx, 429). A 404 wraps backup.ErrNotFound;
// a 403, a 404 and any other 4xx are permanent.
func (s *TaskStore) do(ctx context.Context, method, route string, body []byte, contentType string) ([]byte, error) {
	path := s.base + route
	var out []byte
	try := func() error {
		var r io.Reader
		if body != nil {
			r = bytes.NewReader(body)
		}
		resp, err := s.api.Send(ctx, method, path, r, contentType)
		if err != nil {
			if ctx.Err() != nil {
				return backoff.Permanent(err)
			}
			return err
		}
		defer apiclient.DrainClose(resp.Body)
		switch {
		case resp.StatusCode/100 == 2:
			data, err := io.ReadAll(io.LimitReader(resp.Body, maxStoredObject+1))
			if err != nil {
				return fmt.Errorf("%s %s: read the answer: %w", method, path, err)
			}
			if len(data) > maxStoredObject {
				return backoff.Permanent(fmt.Errorf("%s %s: the answer is over %d bytes", method, path, maxStoredObject))
			}
			out = data
			return nil
		case resp.StatusCode == http.StatusNotFound:
			return backoff.Permanent(fmt.Errorf("%s %s: %w: %w", method, path, backup.ErrNotFound, apiclient.ReadError(resp)))
		case resp.StatusCode/100 == 5 || resp.StatusCode == http.StatusTooManyRequests:
			return fmt.Errorf("%s %s: %w", method, path, apiclient.ReadError(resp))
		default:
			return backoff.Permanent(fmt.Errorf("%s %s: %w", method, path, apiclient.ReadError(resp)))
		}
	}
	err := backoff.Retry(try, backoff.WithContext(backoff.WithMaxRetries(s.retry(), taskStoreAttempts-1), ctx))
	return out, err
}
