package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/hatchery/hatchery/internal/api"
)

// Registries makes the calls at /api/v1/registries: the cluster-wide
// registry logins. Get one with Client.Registries.
type Registries struct{ c *Client }

// Registries is the calls about the cluster-wide registry logins.
func (c *Client) Registries() *Registries { return &Registries{c: c} }

// Login stores the login for the registry host, replacing its previous one.
func (r *Registries) Login(ctx context.Context, host, username, password string) (api.RegistryLogin, error) {
	var out api.RegistryLogin
	err := r.c.Do(ctx, http.MethodPut, "/api/v1/registries/"+url.PathEscape(host), api.RegistryLoginRequest{Username: username, Password: password}, &out)
	return out, err
}

// Logout deletes the login for the registry host.
func (r *Registries) Logout(ctx context.Context, host string) (api.RegistryLogin, error) {
	var out api.RegistryLogin
	err := r.c.Do(ctx, http.MethodDelete, "/api/v1/registries/"+url.PathEscape(host), nil, &out)
	return out, err
}

// List lists the logins, by host, without their passwords.
func (r *Registries) List(ctx context.Context) ([]api.RegistryLogin, error) {
	var out api.RegistryLoginList
	err := r.c.Do(ctx, http.MethodGet, "/api/v1/registries", nil, &out)
	return out.Registries, err
}
