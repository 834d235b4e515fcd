package client

import (
	"context"
	"net/http"

	"github.com/hatchery/hatchery/internal/api"
)

// Certificates makes the calls at /api/v1/certificates (docs/API.md,
// "Certificates"). Get one with Client.Certificates.
type Certificates struct{ c *Client }

// List lists the hostnames served over HTTPS and their certificates.
func (cs *Certificates) List(ctx context.Context) ([]api.Certificate, error) {
	var out api.CertificateList
	err := cs.c.Do(ctx, http.MethodGet, "/api/v1/certificates", nil, &out)
	return out.Certificates, err
}
