package client

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/hatchery/hatchery/internal/api"
)

// JoinTokens makes the calls at /api/v1/join-tokens (docs/API.md,
// "Joining"). Get one with Client.JoinTokens.
type JoinTokens struct{ c *Client }

// Create makes a join token valid for ttl, for uses hosts (0 for
// either: the server's default, 1h and 1).
func (j *JoinTokens) Create(ctx context.Context, ttl time.Duration, uses int) (api.JoinToken, error) {
	req := api.CreateJoinTokenRequest{Uses: uses}
	if ttl > 0 {
		req.TTL = ttl.String()
	}
	var out api.JoinToken
	err := j.c.Do(ctx, http.MethodPost, "/api/v1/join-tokens", req, &out)
	return out, err
}

// List lists every join token, oldest first.
func (j *JoinTokens) List(ctx context.Context) ([]api.JoinToken, error) {
	var out api.JoinTokenList
	err := j.c.Do(ctx, http.MethodGet, "/api/v1/join-tokens", nil, &out)
	return out.JoinTokens, err
}

// Revoke revokes the join token with the ID.
func (j *JoinTokens) Revoke(ctx context.Context, id string) (api.JoinToken, error) {
	var out api.JoinToken
	err := j.c.Do(ctx, http.MethodDelete, "/api/v1/join-tokens/"+url.PathEscape(id), nil, &out)
	return out, err
}

// AdminTokens makes the calls at /api/v1/admin-tokens, of the named tokens,
// admin and deploy (docs/API.md, "Joining"). Get one with Client.AdminTokens.
type AdminTokens struct{ c *Client }

// Create makes a named admin token; the answer carries the token,
// shown this once.
func (a *AdminTokens) Create(ctx context.Context, name string) (api.AdminToken, error) {
	var out api.AdminToken
	err := a.c.Do(ctx, http.MethodPost, "/api/v1/admin-tokens", api.CreateAdminTokenRequest{Name: name}, &out)
	return out, err
}

// CreateDeploy makes a deploy token of the project namespace/project,
// allowed to exec into its eggs when exec; the answer carries the token,
// shown this once.
func (a *AdminTokens) CreateDeploy(ctx context.Context, name, namespace, project string, exec bool) (api.AdminToken, error) {
	var out api.AdminToken
	req := api.CreateAdminTokenRequest{Name: name, Kind: api.TokenKindDeploy, Namespace: namespace, Project: project, Exec: exec}
	err := a.c.Do(ctx, http.MethodPost, "/api/v1/admin-tokens", req, &out)
	return out, err
}

// List lists every named token, admin and deploy, the first admin token
// included, oldest first.
func (a *AdminTokens) List(ctx context.Context) ([]api.AdminToken, error) {
	var out api.AdminTokenList
	err := a.c.Do(ctx, http.MethodGet, "/api/v1/admin-tokens", nil, &out)
	return out.AdminTokens, err
}

// Revoke revokes the named token, admin or deploy.
func (a *AdminTokens) Revoke(ctx context.Context, name string) (api.AdminToken, error) {
	var out api.AdminToken
	err := a.c.Do(ctx, http.MethodDelete, "/api/v1/admin-tokens/"+url.PathEscape(name), nil, &out)
	return out, err
}
