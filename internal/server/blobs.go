package server

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/hatchery/hatchery/internal/blob"
)

func blobError(err error) error {
	switch {
	case errors.Is(err, blob.ErrBadDigest):
		return badRequest("digest: %v", err)
	case errors.Is(err, blob.ErrNotFound):
		return notFoundf("no such blob")
	case errors.Is(err, blob.ErrDigestMismatch):
		return errorf(http.StatusBadRequest, "digest_mismatch", "%v", err)
	case errors.Is(err, blob.ErrTooLarge):
		return errorf(http.StatusRequestEntityTooLarge, "too_large", "%v", err)
	}
	return err
}

// putBlob streams an upload to disk and keeps it only if its content matches
// its digest: 201 when stored, 200 when the server had it already.
func (s *Server) putBlob(w http.ResponseWriter, r *http.Request) error {
	digest := r.PathValue("digest")
	if _, err := blob.ParseDigest(digest); err != nil {
		return blobError(err)
	}
	if r.ContentLength > s.cfg.MaxBlobBytes {
		return errorf(http.StatusRequestEntityTooLarge, "too_large", "blob of %d bytes: the limit is %d", r.ContentLength, s.cfg.MaxBlobBytes)
	}
	info, created, err := s.deps.Blobs.Put(r.Context(), digest, r.Body, s.cfg.MaxBlobBytes)
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return errorf(http.StatusRequestEntityTooLarge, "too_large", "blob larger than %d bytes", tooBig.Limit)
	}
	if err != nil {
		return blobError(err)
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, map[string]any{"digest": info.Digest, "size": info.Size})
	return nil
}

// headBlob says whether the server has a blob, and restarts its grace period.
func (s *Server) headBlob(w http.ResponseWriter, r *http.Request) error {
	info, err := s.deps.Blobs.Touch(r.PathValue("digest"))
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
	f, info, err := s.deps.Blobs.Open(r.PathValue("digest"))
	if err != nil {
		return blobError(err)
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "", info.ModTime, f)
	return nil
}
