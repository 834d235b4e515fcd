package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/sessions"
	"github.com/hatchery/hatchery/internal/store"
)

// The session endpoints: the agents' long-poll of offers and the streams
// they open for them, and the operators' `hatch logs` and `hatch exec`
// streams. Handlers decode and check the request, ask the fleet where, and
// leave pairing and relaying to the sessions broker.

// getSessionOffers is GET /api/v1/hosts/{id}/sessions?wait=D: the sessions
// offered to the host not yet handed to it, at once if any, else at the
// first within the wait (an empty list after it). Held under the host
// (pollsPerHost): a newer poll beyond that answers the oldest an empty list
// at once; a host removed while it waits gets 401, never an offer.
func (s *Server) getSessionOffers(w http.ResponseWriter, r *http.Request) error {
	host := r.PathValue("id")
	wait, err := s.parseWait(r)
	if err != nil {
		return err
	}
	held, err := s.hold(r, endpointSessionOffers)
	if err != nil {
		return err
	}
	defer held.Release()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	none := contract.SessionOffers{Sessions: []contract.SessionOffer{}}
	for waited := false; ; waited = true {
		if waited {
			// Its host may have been removed while it waited.
			if err := s.recheck(r); err != nil {
				return err
			}
		}
		offers, more := s.sessions.Offers(host)
		if len(offers) > 0 {
			writeJSON(w, http.StatusOK, contract.SessionOffers{Sessions: offers})
			return nil
		}
		select {
		case <-more:
		case <-timer.C:
			writeJSON(w, http.StatusOK, none)
			return nil
		case <-held.Done():
			if replaced(held) {
				writeJSON(w, http.StatusOK, none)
				return nil
			}
			return ended(held)
		case <-s.closing:
			writeJSON(w, http.StatusOK, none)
			return nil
		case <-r.Context().Done():
			return nil
		}
	}
}

// parseWait reads a long-poll's ?wait=, capped at MaxWait.
func (s *Server) parseWait(r *http.Request) (time.Duration, error) {
	v := r.URL.Query().Get("wait")
	if v == "" {
		return 0, nil
	}
	wait, err := time.ParseDuration(v)
	if err != nil || wait < 0 || wait > s.cfg.MaxWait {
		return 0, api.BadRequest("wait: %q is not a duration between 0s and %v (for example 30s)", v, s.cfg.MaxWait)
	}
	return wait, nil
}

// getSessionStream is GET /api/v1/hosts/{id}/sessions/{sid}/stream: the
// agent's WebSocket for a session offered to it. Any other host's stream,
// or a second one, is refused before the upgrade (404, the same answer as
// for no such session). The handler holds the stream until the session ends.
func (s *Server) getSessionStream(w http.ResponseWriter, r *http.Request) error {
	host, id := r.PathValue("id"), r.PathValue("sid")
	held, err := s.holdChecked(r, endpointSessionStream)
	if err != nil {
		return err
	}
	defer held.Release()
	sess, err := s.sessions.Claim(host, id)
	if err != nil {
		return api.NotFound("no session %s for host %s (it ended, was served already, or is another host's)", short(id), host)
	}
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return nil // Accept answered already; the operator's wait times out
	}
	done := sess.Attach(conn)
	select {
	case <-done:
		// The relay closed the stream with the operator's reason; if the
		// session ended before it began (the operator gone while waiting
		// for it), this is the agent's only word (a no-op otherwise).
		_ = conn.Close(websocket.StatusGoingAway, "the session ended before it began")
	case <-held.Done():
		// The host was removed: its stream ends (and with it the relay).
		_ = conn.Close(websocket.StatusPolicyViolation, truncateReason(held.Cause().Error()))
	case <-s.closing:
		conn.CloseNow()
	}
	return nil
}

// short is the start of a session ID, for messages: enough to tell two
// apart, not enough to attach one.
func short(id string) string { return id[:min(len(id), 6)] + "…" }

// sessionContext is a stream's context: it says who asked and ends when
// the server drains or the operator's token is revoked (the stream is held
// under it). It does not end with the request: net/http may cancel
// a hijacked request's context as the operator's connection closes, and a
// relay reading under it would then cut the agent's stream with no close
// frame. The operator leaving is seen by reading its stream instead, and
// told to the agent as a close with a reason.
func (s *Server) sessionContext(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	held, err := s.holdChecked(r, endpointSession)
	if err != nil {
		// Revoked since the request came in (or the store is away): the
		// stream, upgraded already, ends at once.
		s.log.Info("session ended as it began: its token no longer holds", zap.Error(err))
		cancel()
		return ctx, cancel
	}
	go func() {
		defer held.Release()
		select {
		case <-s.closing:
			cancel()
		case <-held.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// openSession opens a session, answering a limit with 429.
func (s *Server) openSession(ctx context.Context, host string, offer contract.SessionOffer) (*sessions.Session, error) {
	sess, err := s.sessions.Open(host, store.ActorOf(ctx), offer)
	if errors.Is(err, sessions.ErrLimit) {
		return nil, api.Errorf(api.CodeRateLimited, "%v: wait for one to end", err)
	}
	return sess, err
}

// getLogs is GET /api/v1/projects/{namespace}/{project}/logs: a WebSocket of
// contract.LogRecord messages from every host the project may run on (or
// --host's), merged as they come.
func (s *Server) getLogs(w http.ResponseWriter, r *http.Request) error {
	ns, project := r.PathValue("namespace"), r.PathValue("project")
	req, only, err := parseLogsRequest(r, resource.Project(ns, project))
	if err != nil {
		return err
	}
	hosts, err := s.deps.Fleet.LogHosts(r.Context(), ns, project, only)
	if err != nil {
		return err
	}
	var open []*sessions.Session
	defer func() {
		for _, sess := range open {
			sess.Close()
		}
	}()
	for _, h := range hosts {
		sess, err := s.openSession(r.Context(), h, contract.SessionOffer{Kind: contract.SessionLogs, Logs: &req})
		if err != nil {
			return err
		}
		open = append(open, sess)
	}
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return nil
	}
	ctx, cancel := s.sessionContext(r)
	defer cancel()
	agents := make([]*websocket.Conn, len(open))
	errs := make([]error, len(open))
	waited := make(chan int)
	for i, sess := range open {
		go func() {
			agents[i], errs[i] = sess.Wait(ctx.Done())
			waited <- i
		}()
	}
	var streams []*websocket.Conn
	for range open {
		i := <-waited
		if errs[i] != nil {
			// Said in the stream: the other hosts' logs still come.
			msg, _ := json.Marshal(contract.LogRecord{Time: s.now(), Host: open[i].Host, Event: "unavailable", Line: errs[i].Error()})
			_ = conn.Write(ctx, websocket.MessageText, msg)
			continue
		}
		streams = append(streams, agents[i])
	}
	s.sessions.FanIn(ctx, conn, streams)
	return nil
}

// parseLogsRequest reads the logs query: egg, slot, follow, since (a
// duration back from now, or an RFC 3339 time), tail and host.
func parseLogsRequest(r *http.Request, project string) (contract.LogsRequest, string, error) {
	q := r.URL.Query()
	req := contract.LogsRequest{Project: project, Egg: q.Get("egg"), Slot: -1, Tail: -1, Follow: q.Get("follow") == "1"}
	if v := q.Get("slot"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || req.Egg == "" {
			return req, "", api.BadRequest("slot: %q is not a replica slot of an egg (0, 1, ...; give the egg too: EGG/SLOT)", v)
		}
		req.Slot = n
	}
	if v := q.Get("tail"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return req, "", api.BadRequest("tail: %q is not a number of lines (0 or more)", v)
		}
		req.Tail = n
	}
	if v := q.Get("since"); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			req.Since = time.Now().Add(-d)
		} else if t, err := time.Parse(time.RFC3339, v); err == nil {
			req.Since = t
		} else {
			return req, "", api.BadRequest("since: %q is neither a duration (10m) nor a time (2006-01-02T15:04:05Z)", v)
		}
	}
	return req, q.Get("host"), nil
}

// getExec is GET /api/v1/projects/{namespace}/{project}/eggs/{egg}/exec: a
// WebSocket to a command run in the egg's replica (?slot=, else the lowest
// running; ?host= a host's name or ID: a replica there), on whichever host
// runs it. Binary messages carry the bytes,
// text messages contract.ExecControl.
func (s *Server) getExec(w http.ResponseWriter, r *http.Request) error {
	ns, project, egg := r.PathValue("namespace"), r.PathValue("project"), r.PathValue("egg")
	req, err := parseExecRequest(r, resource.Project(ns, project), egg)
	if err != nil {
		return err
	}
	target, err := s.deps.Fleet.ExecHost(r.Context(), ns, project, egg, req.Slot, r.URL.Query().Get("host"))
	if err != nil {
		return err
	}
	req.Slot = target.Slot
	sess, err := s.openSession(r.Context(), target.Host, contract.SessionOffer{Kind: contract.SessionExec, Exec: &req})
	if err != nil {
		return err
	}
	defer sess.Close()
	s.deps.Fleet.RecordExec(r.Context(), ns, project, egg, target, req.Cmd)
	s.log.Info("exec", zap.String("actor", sess.Actor), zap.String("project", req.Project), zap.String("egg", egg),
		zap.Int("slot", target.Slot), zap.String("host", target.Host), zap.String("program", req.Cmd[0]))
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return nil
	}
	ctx, cancel := s.sessionContext(r)
	defer cancel()
	agent, err := sess.Wait(ctx.Done())
	if err != nil {
		_ = conn.Close(websocket.StatusTryAgainLater, truncateReason(err.Error()))
		return nil
	}
	s.sessions.Relay(ctx, conn, agent)
	return nil
}

// parseExecRequest reads the exec query: cmd (repeated: the argv), slot,
// tty, stdin, width and height.
func parseExecRequest(r *http.Request, project, egg string) (contract.ExecRequest, error) {
	q := r.URL.Query()
	req := contract.ExecRequest{Project: project, Egg: egg, Slot: -1, Cmd: q["cmd"], TTY: q.Get("tty") == "1", Stdin: q.Get("stdin") == "1"}
	if len(req.Cmd) == 0 || req.Cmd[0] == "" {
		return req, api.BadRequest("cmd: the command to run is missing (hatch exec PROJECT EGG -- CMD ARGS...)")
	}
	if v := q.Get("slot"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return req, api.BadRequest("slot: %q is not a replica slot (0, 1, ...)", v)
		}
		req.Slot = n
	}
	for name, dst := range map[string]*uint{"width": &req.Width, "height": &req.Height} {
		if v := q.Get(name); v != "" {
			n, err := strconv.ParseUint(v, 10, 16)
			if err != nil {
				return req, api.BadRequest("%s: %q is not a terminal size", name, v)
			}
			*dst = uint(n)
		}
	}
	return req, nil
}

// truncateReason fits a close reason in a control frame (123 bytes).
func truncateReason(s string) string {
	if len(s) <= 120 {
		return s
	}
	return strings.ToValidUTF8(s[:120], "")
}
