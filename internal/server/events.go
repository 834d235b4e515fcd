package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

// eventJSON is an event as the API shows it.
type eventJSON struct {
	Seq      int64     `json:"seq"`
	Time     time.Time `json:"time"`
	Type     string    `json:"type"`
	Project  string    `json:"project,omitempty"`
	Host     string    `json:"host,omitempty"`
	Resource string    `json:"resource,omitempty"`
	Message  string    `json:"message"`
}

func toEventJSON(e store.Event) eventJSON {
	return eventJSON{Seq: e.Seq, Time: e.Time, Type: string(e.Type), Project: e.Project, Host: e.Host, Resource: e.Resource, Message: e.Message}
}

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
// as server-sent events, from since on, until the client or the server goes.
func (s *Server) getEvents(w http.ResponseWriter, r *http.Request) error {
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
		return badRequest("limit: %d is not between 1 and %d", limit, maxEventLimit)
	}
	switch q.Get("follow") {
	case "", "0":
	case "1":
		if id := r.Header.Get("Last-Event-ID"); id != "" { // a reconnecting EventSource
			if since, err = intParam(id, "Last-Event-ID", 0); err != nil {
				return err
			}
		}
		return s.streamEvents(w, r, since)
	default:
		return badRequest("follow: %q, want 1 or 0", q.Get("follow"))
	}
	evs, err := s.deps.Events.ListEvents(r.Context(), since, int(limit))
	if err != nil {
		return err
	}
	out := make([]eventJSON, len(evs))
	for i, e := range evs {
		out[i] = toEventJSON(e)
	}
	writeJSON(w, http.StatusOK, map[string]any{"events": out})
	return nil
}

func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request, since int64) error {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return nil // the connection cannot stream; nothing more to say on it
	}
	keepAlive := time.NewTicker(s.cfg.KeepAlive)
	defer keepAlive.Stop()
	for {
		changed := s.deps.Events.WatchEvents() // before the read: no event slips between
		evs, err := s.deps.Events.ListEvents(r.Context(), since, defaultEventLimit)
		if err != nil {
			return nil // headers are sent: the stream just ends, and the client reconnects
		}
		for _, e := range evs {
			data, _ := json.Marshal(toEventJSON(e))
			if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Type, data); err != nil {
				return nil
			}
			since = e.Seq
		}
		if len(evs) > 0 {
			if err := rc.Flush(); err != nil {
				return nil
			}
		}
		if len(evs) == defaultEventLimit {
			continue // more are waiting
		}
		select {
		case <-changed:
		case <-keepAlive.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return nil
			}
		case <-s.closing:
			return nil
		case <-r.Context().Done():
			return nil
		}
	}
}

func intParam(v, name string, def int64) (int64, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest("%s: %q is not a whole number >= 0", name, v)
	}
	return n, nil
}
