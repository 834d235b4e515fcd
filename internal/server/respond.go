package server

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/hatchery/hatchery/internal/api"
)

// statusOf is the HTTP status of each error code a service or handler
// gives; any other error is the server's own failure: logged, and shown to
// the client only as "internal".
var statusOf = map[api.Code]int{
	api.CodeBadRequest:       http.StatusBadRequest,
	api.CodeDigestMismatch:   http.StatusBadRequest,
	api.CodeUnauthorized:     http.StatusUnauthorized,
	api.CodeForbidden:        http.StatusForbidden,
	api.CodeNotFound:         http.StatusNotFound,
	api.CodeMethodNotAllowed: http.StatusMethodNotAllowed,
	api.CodeConflict:         http.StatusConflict,
	api.CodeLocked:           http.StatusConflict,
	api.CodeStalePlan:        http.StatusConflict,
	api.CodeNameTaken:        http.StatusConflict,
	api.CodeTooLarge:         http.StatusRequestEntityTooLarge,
	api.CodeRateLimited:      http.StatusTooManyRequests,
	api.CodeInternal:         http.StatusInternalServerError,
	api.CodeUnavailable:      http.StatusServiceUnavailable,
	api.CodeTimeout:          http.StatusServiceUnavailable,
	api.CodeGone:             http.StatusGone,
	api.CodeImageUnresolved:  http.StatusUnprocessableEntity,
}

// maxErrorHeader bounds the error a header repeats: a longer one is in
// the body only.
const maxErrorHeader = 4 << 10

// writeError answers with an error body, at its code's status.
func writeError(w http.ResponseWriter, e *api.Error) {
	status, ok := statusOf[e.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	if b, err := json.Marshal(e); err == nil && len(b) <= maxErrorHeader {
		w.Header().Set(api.HeaderError, string(b)) // JSON escapes every control character
	}
	writeJSON(w, status, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // a client gone away is no error of ours
}

// decodeJSON reads exactly one JSON value into v, refusing unknown fields,
// and turns every failure into a 400 (413 past the body limit) naming the
// field at fault.
func decodeJSON(r *http.Request, v any) error { return decodeBody(r, v, true) }

// decodeContract is decodeJSON for the agent's wire types (package contract),
// which ignore unknown fields so that an agent one version ahead of the server
// is still understood.
func decodeContract(r *http.Request, v any) error { return decodeBody(r, v, false) }

func decodeBody(r *http.Request, v any, strict bool) error {
	dec := json.NewDecoder(r.Body)
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return api.BadRequest("body: want one JSON value, found more after it")
	}
	return nil
}

func jsonError(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return api.Errorf(api.CodeTooLarge, "body: larger than %d bytes", tooBig.Limit)
	case errors.Is(err, io.EOF):
		return api.BadRequest("body: empty, want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return api.BadRequest("body: malformed JSON (it ends early)")
	case errors.As(err, &syntax):
		return api.BadRequest("body: malformed JSON at byte %d: %v", syntax.Offset, syntax)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "body"
		}
		return api.BadRequest("%s: want %s, got %s", field, typ.Type, typ.Value)
	}
	// encoding/json has no typed error for an unknown field: its message,
	// `json: unknown field "name"`, is the only way to name the field.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return api.BadRequest("%s: unknown field", strings.Trim(name, `"`))
	}
	return api.BadRequest("body: %v", err)
}
