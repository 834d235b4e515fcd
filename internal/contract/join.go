package contract

// JoinRequest is the body of POST /api/v1/join: an agent trading a join
// token for a host identity.
type JoinRequest struct {
	// Name is the host name asked for (the server picks the ID when none).
	Name string `json:"name,omitempty"`
	// CSR is a PEM certificate request for the host's key, made on the
	// host (the key never leaves it). An agent older than host
	// certificates sends none, and gets its certificate later through
	// POST /api/v1/hosts/{id}/certificate.
	CSR string `json:"csr,omitempty"`
}

// JoinResponse is the answer of POST /api/v1/join.
type JoinResponse struct {
	HostID string `json:"host_id"`
	Name   string `json:"name"`
	// Token is the host token: shown this once, only its hash is kept.
	Token string `json:"token"`
	// Certificate is the host certificate for the CSR's key and HostCA the
	// host CA's certificate (PEM each), when a CSR was sent.
	Certificate string `json:"certificate,omitempty"`
	HostCA      string `json:"host_ca,omitempty"`
}

// CertificateRequest is the body of POST /api/v1/hosts/{id}/certificate:
// a host renewing its certificate, for a key it made anew.
type CertificateRequest struct {
	CSR string `json:"csr"`
}

// HostCertificate is the answer of POST /api/v1/hosts/{id}/certificate.
type HostCertificate struct {
	Certificate string `json:"certificate"`
	HostCA      string `json:"host_ca"`
}
