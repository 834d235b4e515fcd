package client

import (
	"context"
	"net/url"
	"time"
)

// JoinToken is a join token as the server shows it. Token is set only in
// the answer that made it: the server keeps only its hash.
type JoinToken struct {
	ID        string    `json:"id"`
	State     string    `json:"state"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	Uses      int       `json:"uses"`
	MaxUses   int       `json:"max_uses"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
	Token     string    `json:"token,omitempty"`
}

// CreateJoinToken makes a join token valid for ttl, for uses hosts (0 for
// either: the server's default, 1h and 1).
func (c *Client) CreateJoinToken(ctx context.Context, ttl time.Duration, uses int) (JoinToken, error) {
	req := struct {
		TTL  string `json:"ttl,omitempty"`
		Uses int    `json:"uses,omitempty"`
	}{Uses: uses}
	if ttl > 0 {
		req.TTL = ttl.String()
	}
	var out JoinToken
	err := c.Do(ctx, "POST", "/api/v1/join-tokens", req, &out)
	return out, err
}

// JoinTokens lists every join token, oldest first.
func (c *Client) JoinTokens(ctx context.Context) ([]JoinToken, error) {
	var out struct {
		JoinTokens []JoinToken `json:"join_tokens"`
	}
	err := c.Do(ctx, "GET", "/api/v1/join-tokens", nil, &out)
	return out.JoinTokens, err
}

// RevokeJoinToken revokes the join token with the ID.
func (c *Client) RevokeJoinToken(ctx context.Context, id string) (JoinToken, error) {
	var out JoinToken
	err := c.Do(ctx, "DELETE", "/api/v1/join-tokens/"+url.PathEscape(id), nil, &out)
	return out, err
}

// Host is a host as the server lists it.
type Host struct {
	ID              string    `json:"id"`
	Name            string    `json:"name,omitempty"`
	State           string    `json:"state"`
	StateSince      time.Time `json:"state_since"`
	LastSeen        time.Time `json:"last_seen,omitzero"`
	RemovedAt       time.Time `json:"removed_at,omitzero"`
	DesiredVersion  string    `json:"desired_version,omitempty"`
	ReportedVersion string    `json:"reported_version,omitempty"`
}

// Hosts lists every host, sorted by ID.
func (c *Client) Hosts(ctx context.Context) ([]Host, error) {
	var out struct {
		Hosts []Host `json:"hosts"`
	}
	err := c.Do(ctx, "GET", "/api/v1/hosts", nil, &out)
	return out.Hosts, err
}

// RemovedHost is the answer of RemoveHost.
type RemovedHost struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	JoinedAt  time.Time `json:"joined_at"`
	RemovedAt time.Time `json:"removed_at"`
}

// RemoveHost revokes the token of the host with the name (or ID): its agent
// is refused from its next request on, and its replicas are placed elsewhere.
func (c *Client) RemoveHost(ctx context.Context, nameOrID string) (RemovedHost, error) {
	var out RemovedHost
	err := c.Do(ctx, "DELETE", "/api/v1/hosts/"+url.PathEscape(nameOrID), nil, &out)
	return out, err
}
