package server

// applyRoutes are the endpoints of plans, applies, destroys and rollouts.
func (s *Server) applyRoutes() []route {
	return nil
}
