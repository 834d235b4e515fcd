package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/blob"
)

// BlobStore keeps the blobs the API uploads and serves: the files of the
// data dir (blob.Store) on SQLite, chunk rows (postgres.Blobs) on PostgreSQL,
// so that every server on one database serves every blob.
type BlobStore interface {
	Put(ctx context.Context, digest string, r io.Reader, limit int64) (blob.Info, bool, error)
	Touch(ctx context.Context, digest string) (blob.Info, error)
	Open(ctx context.Context, digest string) (blob.Reader, blob.Info, error)
	Bytes(ctx context.Context) (int64, error)
}

func blobError(err error) error {
	switch {
	case errors.Is(err, blob.ErrBadDigest):
		return api.BadRequest("digest: %v", err)
	case errors.Is(err, blob.ErrNotFound):
		return api.NotFound("no such blob")
	case errors.Is(err, blob.ErrDigestMismatch):
		return api.Errorf(api.CodeDigestMismatch, "%v", err)
	case errors.Is(err, blob.ErrTooLarge):
		return api.Errorf(api.CodeTooLarge, "%v", err)
	}
	return err
}

// putBlob streams an upload into the blob store and keeps it only if its content matches
// its digest: 201 when stored, 200 when the server had it already. A blob a
// deploy token stored is recorded with its project (fleet.BlobUploaded).
func (s *Server) putBlob(w http.ResponseWriter, r *http.Request) error {
	digest := r.PathValue("digest")
	if _, err := blob.ParseDigest(digest); err != nil {
		return blobError(err)
	}
	if r.ContentLength > s.cfg.MaxBlobBytes {
		return api.Errorf(api.CodeTooLarge, "blob of %d bytes: the limit is %d", r.ContentLength, s.cfg.MaxBlobBytes)
	}
	info, created, err := s.deps.Blobs.Put(r.Context(), digest, r.Body, s.cfg.MaxBlobBytes)
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return api.Errorf(api.CodeTooLarge, "blob larger than %d bytes", tooBig.Limit)
	}
	if err != nil {
		return blobError(err)
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		if p := principalOf(r.Context()); p.Deploy() {
			if err := s.deps.Fleet.BlobUploaded(r.Context(), p.Project, info.Digest, info.Size); err != nil {
				return err
			}
		}
	}
	writeJSON(w, status, api.StoredBlob{Digest: info.Digest, Size: info.Size})
	return nil
}

// headBlob says whether the server has a blob, and restarts its grace period.
func (s *Server) headBlob(w http.ResponseWriter, r *http.Request) error {
	info, err := s.deps.Blobs.Touch(r.Context(), r.PathValue("digest"))
	if err != nil {
		return blobError(err)
	}
	w.Header().Set("Content-Length", strconv.FormatInt(info.Size, 10))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	return nil
}

// getBlob downloads a blob (ranges allowed).
func (s *Server) getBlob(w http.ResponseWriter, r *http.Request) error {
	f, info, err := s.deps.Blobs.Open(r.Context(), r.PathValue("digest"))
	if err != nil {
		return blobError(err)
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "", info.ModTime, f)
	return nil
}
