package server

// securityRoutes are the endpoints of joining hosts, renewing their
// certificates and managing tokens. A server without a token store
// (Deps.Tokens nil) has none: nobody can join.
func (s *Server) securityRoutes() []route {
	if s.deps.Tokens == nil {
		return nil
	}
	plain, body := s.fixed(s.cfg.RequestTimeout), s.cfg.MaxBodyBytes
	return []route{
		{"POST /api/v1/join", joinTokenOnly, plain, body, s.join},
		{"POST /api/v1/join-tokens", adminOnly, plain, body, s.createJoinToken},
		{"GET /api/v1/join-tokens", adminOnly, plain, 0, s.listJoinTokens},
		{"DELETE /api/v1/join-tokens/{id}", adminOnly, plain, 0, s.revokeJoinToken},
		{"DELETE /api/v1/hosts/{id}", adminOnly, plain, 0, s.removeHost},
		{"POST /api/v1/hosts/{id}/certificate", ownHostOnly, plain, maxCSRBody, s.renewHostCertificate},
	}
}
