package server

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/fleet"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/sessionbroker"
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
func (s *Server) openSession(ctx context.Context, host string, offer contract.SessionOffer) (*sessionbroker.Session, error) {
	sess, err := s.sessions.Open(host, store.ActorOf(ctx), offer)
	if errors.Is(err, sessionbroker.ErrLimit) {
		return nil, api.Errorf(api.CodeRateLimited, "%v: wait for one to end", err)
	}
	return sess, err
}

// getLogs is GET /api/v1/projects/{namespace}/{project}/logs: a WebSocket of
// contract.LogRecord messages from every host the project's desired states
// place it on (or --host's), merged as they come; following, from hosts
// placed on later too. It is one session against the admin's limit.
func (s *Server) getLogs(w http.ResponseWriter, r *http.Request) error {
	ns, project := r.PathValue("namespace"), r.PathValue("project")
	req, only, err := parseLogsRequest(r, resource.Project(ns, project))
	if err != nil {
		return err
	}
	if req.Run != "" {
		if err := s.checkRunLogs(r.Context(), req); err != nil {
			return err
		}
	}
	src := &logSource{fleet: s.deps.Fleet, desired: s.deps.Desired, ns: ns, project: project, egg: req.Egg, run: req.Run, only: only}
	targets, err := src.Targets(r.Context())
	if err != nil {
		return err
	}
	logs, err := s.sessions.OpenLogs(store.ActorOf(r.Context()))
	if errors.Is(err, sessionbroker.ErrLimit) {
		return api.Errorf(api.CodeRateLimited, "%v: wait for one to end", err)
	}
	if err != nil {
		return err
	}
	defer logs.Close()
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return nil
	}
	ctx, cancel := s.sessionContext(r)
	defer cancel()
	logs.Serve(ctx, conn, req, targets, src)
	return nil
}

// checkRunLogs refuses a logs request for a run that is not the egg's
// (404), or whose container is gone: ended, and not kept (410), which no
// host would ever serve.
func (s *Server) checkRunLogs(ctx context.Context, req contract.LogsRequest) error {
	run, err := s.deps.Jobs.Get(ctx, req.Project, req.Run)
	if err != nil {
		return jobsError(err)
	}
	if run.Egg != req.Egg {
		return api.NotFound("run %s is a run of egg %s, not of %s", run.ID, run.Egg, req.Egg)
	}
	if run.Ended() && !run.Kept {
		return api.Errorf(api.CodeGone, "run %s ended (%s) and its container was removed: hatch run --keep keeps a run's output", run.ID, run.State)
	}
	return nil
}

// logSource is the fleet as a logs request sees it (sessionbroker.LogSource):
// the hosts whose desired state places the project (its egg), and a
// wake-up when a desired state changes.
type logSource struct {
	fleet                       *fleet.Service
	desired                     DesiredStates
	ns, project, egg, run, only string
	mu                          sync.Mutex // guards hosts
	hosts                       []string   // every host not removed, at the last Targets
}

var _ sessionbroker.LogSource = (*logSource)(nil)

// Targets reads where the request reads now.
func (src *logSource) Targets(ctx context.Context) (map[string][]string, error) {
	scope, err := src.fleet.LogTargets(ctx, src.ns, src.project, src.egg, src.run, src.only)
	if err != nil {
		return nil, err
	}
	src.mu.Lock()
	src.hosts = scope.Hosts
	src.mu.Unlock()
	out := make(map[string][]string, len(scope.Targets))
	for _, t := range scope.Targets {
		out[t.Host] = t.Eggs
	}
	return out, nil
}

// Changed is closed at the next change of a known host's desired state (a
// roll placing the project there) or the next event (a host joining, which
// is then known), or when ctx ends. It waits in one goroutine whatever the
// number of hosts.
func (src *logSource) Changed(ctx context.Context) <-chan struct{} {
	src.mu.Lock()
	hosts := slices.Clone(src.hosts)
	src.mu.Unlock()
	cases := make([]reflect.SelectCase, 0, len(hosts)+2)
	for _, ch := range []<-chan struct{}{ctx.Done(), src.fleet.WatchEvents()} {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	for _, h := range hosts {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(src.desired.WatchDesiredState(h))})
	}
	out := make(chan struct{})
	go func() {
		defer close(out)
		reflect.Select(cases)
	}()
	return out
}

// parseLogsRequest reads the logs query: egg, slot, follow, since (a
// duration back from now, or an RFC 3339 time), tail, host and run (one
// run's container, of the egg given).
func parseLogsRequest(r *http.Request, project string) (contract.LogsRequest, string, error) {
	q := r.URL.Query()
	req := contract.LogsRequest{Project: project, Egg: q.Get("egg"), Slot: -1, Tail: -1, Follow: q.Get("follow") == "1", Run: q.Get("run")}
	if req.Run != "" && (req.Egg == "" || q.Has("slot") || !runIDPattern.MatchString(req.Run)) {
		return req, "", api.BadRequest("run: %q is not a run's ID given with its egg and no slot (hatch logs PROJECT EGG --run ID)", req.Run)
	}
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
	s.pairSession(w, r, sess)
	return nil
}

// pairSession upgrades the operator's request and relays it to the agent's
// stream once the host has opened it (exec and a run's attach).
func (s *Server) pairSession(w http.ResponseWriter, r *http.Request, sess *sessionbroker.Session) {
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	ctx, cancel := s.sessionContext(r)
	defer cancel()
	agent, err := sess.Wait(ctx.Done())
	if err != nil {
		_ = conn.Close(websocket.StatusTryAgainLater, truncateReason(err.Error()))
		return
	}
	s.sessions.Pump(ctx, conn, agent)
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
	err := parseTermSize(q, &req.Width, &req.Height)
	return req, err
}

// parseTermSize reads a terminal's width and height, if given.
func parseTermSize(q url.Values, width, height *uint) error {
	for name, dst := range map[string]*uint{"width": width, "height": height} {
		if v := q.Get(name); v != "" {
			n, err := strconv.ParseUint(v, 10, 16)
			if err != nil {
				return api.BadRequest("%s: %q is not a terminal size", name, v)
			}
			*dst = uint(n)
		}
	}
	return nil
}

// truncateReason fits a close reason in a control frame (123 bytes).
func truncateReason(s string) string {
	if len(s) <= 120 {
		return s
	}
	return strings.ToValidUTF8(s[:120], "")
}
