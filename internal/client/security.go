package client

import (
	"context"
	"net/url"
	"time"

	"github.com/hatchery/hatchery/internal/api"
)

// CreateJoinToken makes a join token valid for ttl, for uses hosts (0 for
// either: the server's default, 1h and 1).
func (c *Client) CreateJoinToken(ctx context.Context, ttl time.Duration, uses int) (api.JoinToken, error) {
	req := api.CreateJoinTokenRequest{Uses: uses}
	if ttl > 0 {
		req.TTL = ttl.String()
	}
	var out api.JoinToken
	err := c.Do(ctx, "POST", "/api/v1/join-tokens", req, &out)
	return out, err
}

// JoinTokens lists every join token, oldest first.
func (c *Client) JoinTokens(ctx context.Context) ([]api.JoinToken, error) {
	var out api.JoinTokenList
	err := c.Do(ctx, "GET", "/api/v1/join-tokens", nil, &out)
	return out.JoinTokens, err
}

// RevokeJoinToken revokes the join token with the ID.
func (c *Client) RevokeJoinToken(ctx context.Context, id string) (api.JoinToken, error) {
	var out api.JoinToken
	err := c.Do(ctx, "DELETE", "/api/v1/join-tokens/"+url.PathEscape(id), nil, &out)
	return out, err
}

// CreateAdminToken makes a named admin token; the answer carries the token,
// shown this once.
func (c *Client) CreateAdminToken(ctx context.Context, name string) (api.AdminToken, error) {
	var out api.AdminToken
	err := c.Do(ctx, "POST", "/api/v1/admin-tokens", api.CreateAdminTokenRequest{Name: name}, &out)
	return out, err
}

// AdminTokens lists every admin token, the first one included, oldest first.
func (c *Client) AdminTokens(ctx context.Context) ([]api.AdminToken, error) {
	var out api.AdminTokenList
	err := c.Do(ctx, "GET", "/api/v1/admin-tokens", nil, &out)
	return out.AdminTokens, err
}

// RevokeAdminToken revokes the named admin token.
func (c *Client) RevokeAdminToken(ctx context.Context, name string) (api.AdminToken, error) {
	var out api.AdminToken
	err := c.Do(ctx, "DELETE", "/api/v1/admin-tokens/"+url.PathEscape(name), nil, &out)
	return out, err
}

// Hosts lists every host, sorted by ID.
func (c *Client) Hosts(ctx context.Context) ([]api.Host, error) {
	var out api.HostList
	err := c.Do(ctx, "GET", "/api/v1/hosts", nil, &out)
	return out.Hosts, err
}

// Certificates lists the hostnames served over HTTPS and their certificates.
func (c *Client) Certificates(ctx context.Context) ([]api.Certificate, error) {
	var out api.CertificateList
	err := c.Do(ctx, "GET", "/api/v1/certificates", nil, &out)
	return out.Certificates, err
}

// RemoveHost revokes the token of the host with the name (or ID): its agent
// is refused from its next request on, and its replicas are placed elsewhere.
func (c *Client) RemoveHost(ctx context.Context, nameOrID string) (api.RemovedHost, error) {
	var out api.RemovedHost
	err := c.Do(ctx, "DELETE", "/api/v1/hosts/"+url.PathEscape(nameOrID), nil, &out)
	return out, err
}

// SetHostCapacity pins the capacity of the host with the name (or ID):
// placement believes it from then on, whatever the host reports. It returns
// the host as hatch hosts shows it.
func (c *Client) SetHostCapacity(ctx context.Context, nameOrID string, req api.SetHostCapacity) (api.Host, error) {
	var out api.Host
	err := c.Do(ctx, "PUT", "/api/v1/hosts/"+url.PathEscape(nameOrID)+"/capacity", req, &out)
	return out, err
}
