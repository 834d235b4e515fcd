package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/deploy"
	"github.com/hatchery/hatchery/internal/fleet"
	"github.com/hatchery/hatchery/internal/holds"
)

// streams are the server-sent event plumbing: the event log's stream and
// an apply's progress stream.
type streams struct {
	// keepAlive is how often an idle stream gets a comment line.
	keepAlive time.Duration
	// closing is closed when the server drains: every stream returns.
	closing <-chan struct{}
	// hold registers a stream under its principal (Server.holdChecked); a stream
	// returns when its hold ends. recheck checks the request's token again
	// (Server.recheck).
	hold    func(*http.Request, holds.Endpoint) (*holds.Hold, error)
	recheck func(*http.Request) error
}

func acceptsEventStream(r *http.Request) bool {
	return r.Header.Get("Accept") == "text/event-stream"
}

// startStream sends a stream's headers and returns its controller.
func startStream(w http.ResponseWriter) *http.ResponseController {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return http.NewResponseController(w)
}

// writeEvent writes one server-sent event.
func writeEvent(w http.ResponseWriter, id int64, name string, v any) error {
	data, _ := json.Marshal(v) // API values always encode
	_, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", id, name, data)
	return err
}

// events streams the event log (of project, or all of it when "")
// after since until the client or the
// server goes; a read that fails ends the stream (headers are sent), and the
// client reconnects.
//
// A revoked token's stream ends: its hold is ended by the rights check, and
// before each batch is written the token is checked again, so that nothing
// recorded after the revocation reaches it.
func (st streams) events(w http.ResponseWriter, r *http.Request, f *fleet.Service, project string, since int64) error {
	held, err := st.hold(r, endpointEvents)
	if err != nil {
		return err
	}
	defer held.Release()
	rc := startStream(w)
	if err := rc.Flush(); err != nil {
		return nil // the connection cannot stream; nothing more to say on it
	}
	keepAlive := time.NewTicker(st.keepAlive)
	defer keepAlive.Stop()
	for {
		changed := f.WatchEvents() // before the read: no event slips between
		evs, err := f.Events(r.Context(), project, since, defaultEventLimit)
		if err != nil {
			return nil
		}
		if len(evs) > 0 && st.recheck(r) != nil {
			return nil // revoked (or the store is away): the client reconnects and is told
		}
		for _, e := range evs {
			if err := writeEvent(w, e.Seq, e.Type, e); err != nil {
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
		case <-held.Done():
			return nil
		case <-st.closing:
			return nil
		case <-r.Context().Done():
			return nil
		}
	}
}

// streamProgress writes an apply's steps from Last-Event-ID on, as
// "progress" events and a last "done" event, until the apply is over or the
// client leaves.
func (st streams) progress(w http.ResponseWriter, r *http.Request, j *deploy.Job) error {
	var seq int64
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil || n < 0 {
			return api.BadRequest("Last-Event-ID: %q is not a whole number", id)
		}
		seq = n
	}
	held, err := st.hold(r, endpointApplyProgress)
	if err != nil {
		return err
	}
	defer held.Release()
	rc := startStream(w)
	keepAlive := time.NewTicker(st.keepAlive)
	defer keepAlive.Stop()
	for {
		steps, over, changed := j.Since(seq)
		for _, p := range steps {
			name := "progress"
			if p.Status == api.StatusFinished || p.Status == api.StatusRunning {
				name = "done"
			}
			if err := writeEvent(w, p.Seq, name, p); err != nil {
				return nil
			}
			seq = p.Seq
		}
		if err := rc.Flush(); err != nil || over {
			return nil
		}
		select {
		case <-changed:
		case <-keepAlive.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return nil
			}
		case <-held.Done():
			return nil
		case <-st.closing:
			return nil
		case <-r.Context().Done():
			return nil
		}
	}
}
