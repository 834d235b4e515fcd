package server

// securityRoutes are the endpoints of joining hosts and managing tokens.
func (s *Server) securityRoutes() []route {
	return nil
}
