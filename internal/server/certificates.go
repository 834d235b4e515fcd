package server

import (
	"net/http"

	"github.com/hatchery/hatchery/internal/api"
)

// getCertificates lists the hostnames served over HTTPS with their
// certificates' issuer and expiry and the ACME client's last error: what
// hatch status shows. Keys never leave the desired states.
func (s *Server) getCertificates(w http.ResponseWriter, r *http.Request) error {
	out := api.CertificateList{Certificates: []api.Certificate{}}
	if s.deps.TLS != nil {
		certs, err := s.deps.TLS.Certificates(r.Context())
		if err != nil {
			return err
		}
		out.Certificates = append(out.Certificates, certs...)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
