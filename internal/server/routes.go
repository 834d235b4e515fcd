package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

// route is one endpoint with its own access rule, deadline and body limit.
type route struct {
	pattern string
	access  access
	// deadline returns the request's deadline; 0 means none (streams).
	deadline func(*http.Request) time.Duration
	maxBody  int64
	handle   func(http.ResponseWriter, *http.Request) error
}

// access says whether a principal may call a route: each route's rule in
// the route table is the one place its required right is declared, and the
// auth matrix test checks every route against every kind of token. A route
// under /api/v1/projects/{namespace}/{project}/ that a deploy token may
// call takes projectScoped (projectExec for exec); one a deploy token must
// not call takes adminOnly.
type access func(p Principal, r *http.Request) bool

// adminOnly lets an admin token in, and nobody else.
func adminOnly(p Principal, _ *http.Request) bool { return p.Admin }

// projectScoped lets an admin act on any project, and a deploy token on its
// own only: the project of the path's {namespace} and {project}.
func projectScoped(p Principal, r *http.Request) bool {
	return p.Admin || (p.Deploy() && p.Project == resource.Project(r.PathValue("namespace"), r.PathValue("project")))
}

// projectExec is projectScoped for a deploy token made with --exec only:
// exec runs any command in an egg, more than a pipeline needs to deploy.
func projectExec(p Principal, r *http.Request) bool {
	return p.Admin || (p.Exec && projectScoped(p, r))
}

// adminOrDeploy lets an admin and every deploy token in: for a route whose
// handler narrows what a deploy token gets to its own project (the event
// log, the project list), or that names no project (a blob upload, which
// records the token's project).
func adminOrDeploy(p Principal, _ *http.Request) bool { return p.Admin || p.Deploy() }

// hostOrAdmin lets a host act on its own {id}, and the admin on any.
func hostOrAdmin(p Principal, r *http.Request) bool {
	return p.Admin || (p.HostID != "" && p.HostID == r.PathValue("id"))
}

func (s *Server) fixed(d time.Duration) func(*http.Request) time.Duration {
	return func(*http.Request) time.Duration { return d }
}

// waitPlusMargin is a long-poll's deadline: its wait (capped, as the handler
// caps it) plus the margin.
func (s *Server) waitPlusMargin(r *http.Request) time.Duration {
	wait, err := time.ParseDuration(r.URL.Query().Get("wait"))
	if err != nil || wait < 0 || wait > s.cfg.MaxWait {
		wait = s.cfg.MaxWait
	}
	return wait + s.cfg.WaitMargin
}

// routeTable is every endpoint that needs a token: the auth matrix test
// walks it, so that no endpoint escapes it.
func (s *Server) routeTable() []route {
	plain, body := s.fixed(s.cfg.RequestTimeout), s.cfg.MaxBodyBytes
	blobs := s.fixed(s.cfg.BlobTimeout)
	const p = "/api/v1/projects/{namespace}/{project}"
	st := streams{keepAlive: s.cfg.KeepAlive, closing: s.closing, hold: s.holdChecked, recheck: s.recheck}
	d, f := deployAPI{svc: s.deps.Deploy, streams: st}, fleetAPI{svc: s.deps.Fleet, backups: s.deps.Backups, streams: st}
	metricsHandler := promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{})
	routes := []route{
		{"GET /api/v1/hosts", adminOnly, plain, 0, f.listHosts},
		{"GET /api/v1/hosts/{id}", adminOnly, plain, 0, f.getHost},
		{"GET /api/v1/hosts/{id}/desired-state", hostOrAdmin, s.waitPlusMargin, 0, s.getDesiredState},
		{"POST /api/v1/hosts/{id}/status", hostOrAdmin, plain, body, f.postStatus},
		{"PUT /api/v1/blobs/{digest}", adminOrDeploy, blobs, s.cfg.MaxBlobBytes, s.putBlob},
		{"HEAD /api/v1/blobs/{digest}", s.blobCheckers, plain, 0, s.headBlob},
		{"GET /api/v1/blobs/{digest}", s.hostBlobOrAdmin, blobs, 0, s.getBlob},
		{"GET /api/v1/events", adminOrDeploy, s.eventsDeadline, 0, f.getEvents},
		{"GET /api/v1/certificates", adminOnly, plain, 0, s.getCertificates},
		{"GET /api/v1/projects", adminOrDeploy, plain, 0, d.listProjects},
		{"GET /api/v1/projects/{namespace}/{project}", projectScoped, plain, 0, d.getProject},
		{"GET /api/v1/projects/{namespace}/{project}/status", projectScoped, plain, 0, f.getProjectStatus},
		{"POST " + p + "/plan", projectScoped, plain, body, d.postPlan},
		{"POST " + p + "/destroy", adminOnly, plain, body, d.postDestroy},
		{"POST " + p + "/apply", projectScoped, s.streamOrPlain, body, d.postApply},
		{"POST " + p + "/rollback", projectScoped, plain, body, d.postRollback},
		{"GET " + p + "/applies", projectScoped, plain, 0, d.getHistory},
		{"GET " + p + "/applies/{id}", projectScoped, plain, 0, d.getApply},
		{"GET " + p + "/applies/{id}/events", projectScoped, noDeadline, 0, d.getApplyEvents},
		{"POST " + p + "/eggs/{egg}/restart", adminOnly, plain, body, d.postRestart},
		{"GET " + p + "/logs", projectScoped, noDeadline, 0, s.getLogs},
		{"GET " + p + "/eggs/{egg}/exec", projectExec, noDeadline, 0, s.getExec},
		{"POST " + p + "/eggs/{egg}/runs", mayRun, plain, body, s.postRun},
		{"GET " + p + "/runs", projectScoped, plain, 0, s.getRuns},
		{"GET " + p + "/runs/{id}", projectScoped, s.waitPlusMargin, 0, s.getRun},
		{"POST " + p + "/runs/{id}/stop", mayRun, plain, 0, s.postRunStop},
		{"GET " + p + "/runs/{id}/attach", mayRun, noDeadline, 0, s.getRunAttach},
		{"GET " + p + "/schedules", projectScoped, plain, 0, s.getSchedules},
		{"POST " + p + "/schedules/{egg}/run", mayRun, plain, 0, s.postScheduleRun},
		{"POST " + p + "/schedules/{egg}/pause", projectScoped, plain, 0, s.postSchedulePause},
		{"POST " + p + "/schedules/{egg}/resume", projectScoped, plain, 0, s.postScheduleResume},
		{"GET /api/v1/hosts/{id}/sessions", ownHostOnly, s.waitPlusMargin, 0, s.getSessionOffers},
		{"GET /api/v1/hosts/{id}/sessions/{sid}/stream", ownHostOnly, noDeadline, 0, s.getSessionStream},
		{"GET /metrics", adminOnly, plain, 0,
			func(w http.ResponseWriter, r *http.Request) error { metricsHandler.ServeHTTP(w, r); return nil }},
	}
	routes = append(routes, s.backupRoutes(plain, blobs, body)...)
	return append(routes, securityRoutes(plain, body, f)...)
}

// securityRoutes are the endpoints of joining hosts and managing tokens.
func securityRoutes(plain func(*http.Request) time.Duration, body int64, f fleetAPI) []route {
	return []route{
		{"POST /api/v1/join", joinTokenOnly, plain, body, f.join},
		{"POST /api/v1/hosts/{id}/certificate", ownHostOnly, plain, maxCSRBody, f.renewHostCertificate},
		{"POST /api/v1/join-tokens", adminOnly, plain, body, f.createJoinToken},
		{"GET /api/v1/join-tokens", adminOnly, plain, 0, f.listJoinTokens},
		{"DELETE /api/v1/join-tokens/{id}", adminOnly, plain, 0, f.revokeJoinToken},
		{"POST /api/v1/admin-tokens", adminOnly, plain, body, f.createAdminToken},
		{"GET /api/v1/admin-tokens", adminOnly, plain, 0, f.listAdminTokens},
		{"DELETE /api/v1/admin-tokens/{name}", adminOnly, plain, 0, f.revokeAdminToken},
		{"DELETE /api/v1/hosts/{id}", adminOnly, plain, 0, f.removeHost},
		{"PUT /api/v1/hosts/{id}/capacity", adminOnly, plain, body, f.setHostCapacity},
		{"PUT /api/v1/registries/{host}", adminOnly, plain, body, f.putRegistry},
		{"DELETE /api/v1/registries/{host}", adminOnly, plain, 0, f.deleteRegistry},
		{"GET /api/v1/registries", adminOnly, plain, 0, f.listRegistries},
	}
}

// streamOrPlain is the deadline of a request that streams when asked to.
func (s *Server) streamOrPlain(r *http.Request) time.Duration {
	if acceptsEventStream(r) {
		return 0
	}
	return s.cfg.RequestTimeout
}

// noDeadline is a stream's: it sends keep-alives instead.
func noDeadline(*http.Request) time.Duration { return 0 }

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range s.routeTable() {
		mux.Handle(rt.pattern, s.wrap(rt))
	}
	mux.Handle("GET /healthz", s.instrument("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}))
	return s.outer(mux)
}

// outer gives every request a default deadline (so none lingers from the
// previous request on a kept-alive connection) and turns the mux's plain-text
// 404 and 405 into the API's JSON errors.
func (s *Server) outer(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setDeadlines(w, s.cfg.RequestTimeout)
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		// No route: authenticate first, so that an unknown caller learns
		// nothing about which paths exist.
		if _, ok := s.authenticate(w, r); !ok {
			return
		}
		probe := &statusOnly{header: http.Header{}}
		mux.ServeHTTP(probe, r)
		if probe.status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", probe.header.Get("Allow"))
			writeError(w, api.Errorf(api.CodeMethodNotAllowed, "%s is not allowed on %s (allowed: %s)",
				r.Method, r.URL.Path, probe.header.Get("Allow")))
			return
		}
		writeError(w, api.NotFound("no endpoint %s %s", r.Method, r.URL.Path))
	})
}

// statusOnly records what the mux would answer, and nothing else.
type statusOnly struct {
	header http.Header
	status int
}

func (p *statusOnly) Header() http.Header         { return p.header }
func (p *statusOnly) Write(b []byte) (int, error) { return len(b), nil }
func (p *statusOnly) WriteHeader(status int)      { p.status = status }

// unauthorized answers 401; a refusal's own reason (a join token used up, a
// host removed) is told to the token's holder.
func (s *Server) unauthorized(w http.ResponseWriter, err error) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="hatch"`)
	msg := "missing or invalid token: send Authorization: Bearer <token> (the admin token is in the server's data dir)"
	if r := (*refusal)(nil); errors.As(err, &r) {
		msg = r.reason
	}
	writeError(w, api.Errorf(api.CodeUnauthorized, "%s", msg))
}

// wrap applies a route's rules: authentication and access, deadline, body
// limit, and the mapping of the handler's error to a response.
func (s *Server) wrap(rt route) http.Handler {
	return s.instrument(rt.pattern, func(w http.ResponseWriter, r *http.Request) {
		p, ok := s.authenticate(w, r)
		if !ok {
			return
		}
		if !rt.access(p, r) {
			writeError(w, api.Errorf(api.CodeForbidden, "%s", forbidden(p, rt.pattern)))
			return
		}
		ctx := withPrincipal(r.Context(), p) // what it holds open is registered under it
		if actor := p.actor(); actor != "" {
			// Whatever this request records says which named token asked.
			ctx = store.WithActor(ctx, actor)
		}
		if d := rt.deadline(r); d > 0 {
			setDeadlines(w, d)
			var cancel func()
			ctx, cancel = context.WithTimeoutCause(ctx, d-answerMargin(d), &outOfTime{limit: d, raise: s.raiseHint(d)})
			defer cancel()
		} else {
			setDeadlines(w, 0)
		}
		if rt.maxBody > 0 {
			r.Body = http.MaxBytesReader(w, r.Body, rt.maxBody)
		}
		r = r.WithContext(ctx)
		if err := rt.handle(w, r); err != nil {
			s.fail(w, r, rt.pattern, err)
		}
	})
}

// forbidden says why p may not call the route: a deploy token is told
// which project it may act on, and whether it may exec.
func forbidden(p Principal, pattern string) string {
	if !p.Deploy() {
		return fmt.Sprintf("this token may not call %s", pattern)
	}
	exec := "without exec"
	if p.Exec {
		exec = "with exec"
	}
	return fmt.Sprintf("this token may not call %s: it is deploy token %q of %s (%s), for that project's plans, applies, "+
		"rollbacks and reads only", pattern, p.Name, p.Project, exec)
}

// answerMargin is how much sooner than the connection's deadline d a
// handler's context ends. Past the connection's write deadline nothing more
// reaches the client (Go's TLS breaks the connection: the client reads "tls:
// bad record MAC" or EOF), so a handler that ran out of time must still have
// time to say so.
func answerMargin(d time.Duration) time.Duration { return min(d/5, time.Second) }

// outOfTime is the cause of a handler's context ended by its request's
// deadline: fail answers it, whatever error the handler made of it (a store
// call cut short looks like a database gone).
type outOfTime struct {
	limit time.Duration
	// raise says which setting lengthens the deadline ("" when none does).
	raise string
}

func (e *outOfTime) Error() string { return fmt.Sprintf("the request's deadline (%v) passed", e.limit) }

// raiseHint names the setting that lengthens a deadline d: the plain
// requests' is hatch server's --request-timeout.
func (s *Server) raiseHint(d time.Duration) string {
	if d == s.cfg.RequestTimeout {
		return "raise hatch server's --request-timeout"
	}
	return ""
}

// message is what the client is told.
func (e *outOfTime) message(r *http.Request) string {
	msg := fmt.Sprintf("the server took longer than %v to answer this request (%s %s); try again", e.limit, r.Method, r.URL.Path)
	if e.raise != "" {
		msg += ", or " + e.raise
	}
	return msg
}

// fail answers with a handler's error. Errors the client caused are answered
// as they are; anything else is logged here, once, and answered "internal".
func (s *Server) fail(w http.ResponseWriter, r *http.Request, pattern string, err error) {
	var apiErr *api.Error
	if errors.As(err, &apiErr) {
		writeError(w, apiErr)
		return
	}
	if late := (*outOfTime)(nil); errors.As(context.Cause(r.Context()), &late) {
		// Answered before the connection's deadline (answerMargin), and never
		// as the database's absence: the handler's own time ran out.
		s.log.Warn("request ran out of time", zap.String("route", pattern), zap.Duration("deadline", late.limit), zap.Error(err))
		writeError(w, api.Errorf(api.CodeTimeout, "%s", late.message(r)))
		return
	}
	if r.Context().Err() != nil {
		return // the client went away: nobody to answer
	}
	if errors.Is(err, store.ErrUnavailable) {
		// Not this server's failure: the database is away. Clients retry;
		// agents keep running what they have.
		s.log.Warn("request failed: the database is unreachable", zap.String("route", pattern), zap.Error(err))
		w.Header().Set("Retry-After", "2")
		writeError(w, api.Errorf(api.CodeUnavailable, "the control plane's database is unreachable: retry in a few seconds"))
		return
	}
	s.log.Error("request failed", zap.String("route", pattern), zap.Error(err))
	writeError(w, api.Errorf(api.CodeInternal, "the server failed; its log says why"))
}

// instrument counts and times a route's requests.
func (s *Server) instrument(pattern string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		h(rec, r)
		s.metrics.requests.With(prometheus.Labels{"route": pattern, "code": strconv.Itoa(rec.status)}).Inc()
		s.metrics.duration.WithLabelValues(pattern).Observe(time.Since(start).Seconds())
	})
}

// statusRecorder remembers the status code; Unwrap lets http.ResponseController
// reach the connection for flushes and deadlines.
type statusRecorder struct {
	http.ResponseWriter
	status  int
	written bool
}

func (r *statusRecorder) WriteHeader(status int) {
	if !r.written {
		r.status, r.written = status, true
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	r.written = true
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// setDeadlines sets the connection's read and write deadlines d from now; 0
// clears them (streams).
func setDeadlines(w http.ResponseWriter, d time.Duration) {
	var at time.Time
	if d > 0 {
		at = time.Now().Add(d)
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(at) // unsupported only by test recorders
	_ = rc.SetWriteDeadline(at)
}
