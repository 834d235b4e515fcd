package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// apiError is an error with the HTTP status and code the client gets. Any
// other error a handler returns is an internal error: logged, and shown to the
// client only as "internal".
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) *apiError {
	return errorf(http.StatusBadRequest, "bad_request", format, args...)
}

func notFoundf(format string, args ...any) *apiError {
	return errorf(http.StatusNotFound, "not_found", format, args...)
}

// errorBody is every error response: {"error": CODE, "message": TEXT}.
type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, errorBody{Error: e.code, Message: e.message})
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
		return badRequest("body: want one JSON value, found more after it")
	}
	return nil
}

func jsonError(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return errorf(http.StatusRequestEntityTooLarge, "too_large", "body: larger than %d bytes", tooBig.Limit)
	case errors.Is(err, io.EOF):
		return badRequest("body: empty, want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("body: malformed JSON (it ends early)")
	case errors.As(err, &syntax):
		return badRequest("body: malformed JSON at byte %d: %v", syntax.Offset, syntax)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "body"
		}
		return badRequest("%s: want %s, got %s", field, typ.Type, typ.Value)
	}
	// encoding/json has no typed error for an unknown field: its message,
	// `json: unknown field "name"`, is the only way to name the field.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return badRequest("%s: unknown field", strings.Trim(name, `"`))
	}
	return badRequest("body: %v", err)
}
