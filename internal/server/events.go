package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/resource"
)

const (
	defaultEventLimit = 500
	maxEventLimit     = 1000
)

func (s *Server) eventsDeadline(r *http.Request) time.Duration {
	if r.URL.Query().Get("follow") == "1" {
		return 0
	}
	return s.cfg.RequestTimeout
}

// getEvents lists the events after ?since=N, or with ?follow=1 streams them
// as server-sent events, from since on, until the client or the server goes;
// with ?project=NS/NAME, only that project's (a deploy token's are always).
func (h fleetAPI) getEvents(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	since, err := intParam(q.Get("since"), "since", 0)
	if err != nil {
		return err
	}
	limit, err := intParam(q.Get("limit"), "limit", defaultEventLimit)
	if err != nil {
		return err
	}
	if limit < 1 || limit > maxEventLimit {
		return api.BadRequest("limit: %d is not between 1 and %d", limit, maxEventLimit)
	}
	project, err := eventsProject(r)
	if err != nil {
		return err
	}
	switch q.Get("follow") {
	case "", "0":
	case "1":
		if id := r.Header.Get("Last-Event-ID"); id != "" { // a reconnecting EventSource
			if since, err = intParam(id, "Last-Event-ID", 0); err != nil {
				return err
			}
		}
		return h.streams.events(w, r, h.svc, project, since)
	default:
		return api.BadRequest("follow: %q, want 1 or 0", q.Get("follow"))
	}
	evs, err := h.svc.Events(r.Context(), project, since, int(limit))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.EventList{Events: evs})
	return nil
}

func intParam(v, name string, def int64) (int64, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, api.BadRequest("%s: %q is not a whole number >= 0", name, v)
	}
	return n, nil
}

// eventsProject is the events' ?project= filter ("<namespace>/<name>", or
// "" for every event), forced to a deploy token's own project: a deploy
// token reads no other project's events, nor the hosts'.
func eventsProject(r *http.Request) (string, error) {
	want := r.URL.Query().Get("project")
	if want != "" {
		ns, name, err := resource.SplitProject(want)
		if err != nil || !namePattern.MatchString(ns) || !namePattern.MatchString(name) {
			return "", api.BadRequest("project: %q is not <namespace>/<name> (each [a-z0-9-], 1 to 40 characters)", want)
		}
	}
	p := principalOf(r.Context())
	if !p.Deploy() {
		return want, nil
	}
	if want != "" && want != p.Project {
		return "", api.Errorf(api.CodeForbidden, "this deploy token reads the events of %s only", p.Project)
	}
	return p.Project, nil
}
