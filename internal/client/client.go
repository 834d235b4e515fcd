package client

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/hatchery/hatchery/internal/apiclient"
)

// Client makes the operator's calls to the control plane, grouped as its
// routes are: each family of routes is a sub-client (Projects, Hosts,
// Events...), a value that is free to make and holds nothing but the Client,
// as HashiCorp Nomad's api package does. The connection, its failover
// between servers and the raw requests (Send, Do, Dial) are the embedded
// apiclient.Client's. Safe for concurrent use.
type Client struct {
	*apiclient.Client
}

// New returns a client for cfg, whose Server may list several URLs
// (comma-separated) of one control plane; see apiclient.New for whom it
// trusts.
func New(cfg Config) (*Client, error) {
	conn, err := apiclient.New(cfg.Server, cfg.Token)
	if err != nil {
		return nil, err
	}
	return &Client{Client: conn}, nil
}

// Projects is the projects' calls: their plans, applies and status.
func (c *Client) Projects() *Projects { return &Projects{c: c} }

// Sessions is the calls that open an operator's streams to replicas: logs
// and exec.
func (c *Client) Sessions() *Sessions { return &Sessions{c: c} }

// Hosts is the calls about the fleet's hosts.
func (c *Client) Hosts() *Hosts { return &Hosts{c: c} }

// Runs is the calls about a project's runs and schedules (jobs).
func (c *Client) Runs() *Runs { return &Runs{c: c} }

// JoinTokens is the calls about the tokens hosts join with.
func (c *Client) JoinTokens() *JoinTokens { return &JoinTokens{c: c} }

// AdminTokens is the calls about the named admin tokens.
func (c *Client) AdminTokens() *AdminTokens { return &AdminTokens{c: c} }

// Events is the calls that read the event log.
func (c *Client) Events() *Events { return &Events{c: c} }

// Blobs is the calls about the content-addressed blobs (build contexts).
func (c *Client) Blobs() *Blobs { return &Blobs{c: c} }

// Certificates is the calls about the certificates of hostnames served over
// HTTPS.
func (c *Client) Certificates() *Certificates { return &Certificates{c: c} }

// errStreamDone ends a stream early, as asked.
var errStreamDone = errors.New("stream done")

// stream reads the server-sent events at path, calling fn for each, until
// fn returns errStreamDone (then stream returns nil) or another error, the
// stream ends (io.ErrUnexpectedEOF: the caller expected more) or ctx ends.
func (c *Client) stream(ctx context.Context, path string, fn func(sseEvent) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := c.Send(ctx, http.MethodGet, path, nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return apiclient.ReadError(resp)
	}
	err = readSSE(resp.Body, fn)
	switch {
	case errors.Is(err, errStreamDone):
		return nil
	case err == nil:
		return io.ErrUnexpectedEOF
	}
	return err
}

// isNotFound reports whether err is the server's 404.
func isNotFound(err error) bool {
	var apiErr *apiclient.APIError
	return errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusNotFound
}
