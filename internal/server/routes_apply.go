package server

import (
	"net/http"
	"time"
)

// applyRoutes are the endpoints of plans, applies, destroys and rollouts. A
// server without ApplyDeps has none.
func (s *Server) applyRoutes() []route {
	a := s.applies
	if a == nil {
		return nil
	}
	plain, body := s.fixed(s.cfg.RequestTimeout), s.cfg.MaxBodyBytes
	const p = "/api/v1/projects/{namespace}/{project}"
	return []route{
		{"POST " + p + "/plan", adminOnly, plain, body, a.postPlan},
		{"POST " + p + "/destroy", adminOnly, plain, body, a.postDestroy},
		{"POST " + p + "/apply", adminOnly, s.streamOrPlain, body, a.postApply},
		{"GET " + p + "/applies/{id}", adminOnly, plain, 0, a.getApply},
		{"GET " + p + "/applies/{id}/events", adminOnly, noDeadline, 0, a.getApplyEvents},
		{"POST " + p + "/eggs/{egg}/restart", adminOnly, plain, body, a.postRestart},
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
