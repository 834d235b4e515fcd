package dataplane

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/ingress"
)

// callTimeout bounds a control call but a drain (which the caller's
// context bounds): the data plane answers them at once.
const callTimeout = 10 * time.Second

// Client is the agent's side of the control socket: the agent's Router, the
// Docker adapter's Ingress and the agent's Mesh, each call one request.
// Calls whose interface has no error to return (Gone, SetProblem, SetPeers)
// log a failure: the agent sends the whole state again at its next
// converge. Safe for concurrent use.
type Client struct {
	hc  *http.Client
	log *zap.Logger
	// DockerHost is the Engine the agent's containers run on, handed on in
	// each fence lease ("" for the environment's default).
	DockerHost string
}

// NewClient returns the Client of dataDir's data plane. It connects at
// each call: a data plane restarted in between is reached all the same.
func NewClient(dataDir string, log *zap.Logger) *Client {
	return &Client{log: log, hc: &http.Client{Transport: &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return dialSocket(ctx, dataDir) },
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
	}}}
}

// Close closes the idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// call sends a request with body in JSON (none when nil) and decodes the
// answer into out (ignored when nil).
func (c *Client) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("data plane %s: %w", path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://dataplane"+path, rd)
	if err != nil {
		return fmt.Errorf("data plane %s: %w", path, err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("data plane %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("data plane %s: %s: %s", path, resp.Status, bytes.TrimSpace(msg))
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("data plane %s: %w", path, err)
	}
	return nil
}

// quick is call bounded by callTimeout.
func (c *Client) quick(method, path string, body, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return c.call(ctx, method, path, body, out)
}

// Version says who serves the socket; an error when no one does.
func (c *Client) Version(ctx context.Context) (Version, error) {
	var v Version
	err := c.call(ctx, http.MethodGet, pathVersion, nil, &v)
	return v, err
}

// Status returns the addresses, challenges and HTTPS problem.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	err := c.call(ctx, http.MethodGet, pathStatus, nil, &s)
	return s, err
}

// Update replaces the table the data plane serves (agent.Router).
func (c *Client) Update(t ingress.Table) error { return c.quick(http.MethodPut, pathTable, t, nil) }

// Drain drains the container's backend, as ingress.Ingress.Drain, until
// ctx ends (docker.Ingress).
func (c *Client) Drain(ctx context.Context, containerID string) error {
	return c.call(ctx, http.MethodPost, pathDrain+url.PathEscape(containerID), nil, nil)
}

// Gone says the container is gone (docker.Ingress, agent.Router).
func (c *Client) Gone(containerID string) {
	if err := c.quick(http.MethodPost, pathGone+url.PathEscape(containerID), nil, nil); err != nil {
		c.log.Warn("the data plane did not hear that a container is gone", zap.String("container", containerID), zap.Error(err))
	}
}

// SetProblem sets the host problem /healthz answers 503 with (agent.Router).
func (c *Client) SetProblem(reason string) {
	if err := c.quick(http.MethodPut, pathProblem, reason, nil); err != nil {
		c.log.Warn("the data plane did not take the host's problem", zap.Error(err))
	}
}

// Challenges returns the ACME challenge tokens the ingress answers
// (agent.Router); none when the data plane cannot be asked.
func (c *Client) Challenges() []string {
	s, err := c.quickStatus()
	if err != nil {
		return nil
	}
	return s.Challenges
}

// HTTPSProblem says why no HTTPS is served (agent.Router), or that the data
// plane cannot be asked.
func (c *Client) HTTPSProblem() string {
	s, err := c.quickStatus()
	if err != nil {
		return err.Error()
	}
	return s.HTTPSProblem
}

func (c *Client) quickStatus() (Status, error) {
	var s Status
	err := c.quick(http.MethodGet, pathStatus, nil, &s)
	return s, err
}

// SetPeers installs the mesh's peers (agent.Mesh).
func (c *Client) SetPeers(peers []contract.Peer) {
	if err := c.quick(http.MethodPut, pathPeers, peers, nil); err != nil {
		c.log.Warn("the data plane did not take the mesh's peers", zap.Error(err))
	}
}

// ReloadCerts makes the data plane read the host certificate again.
func (c *Client) ReloadCerts(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, pathReloadCerts, nil, nil)
}

// Stop tells the data plane to stop for good: it stops accepting and lets
// its requests finish (DrainTimeout), then exits.
func (c *Client) Stop(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, pathStop, nil, nil)
}

// SetFenceLease hands the data plane the agent's lease on its fenced
// workloads (deadman.go): unless renewed by until, their running containers
// are stopped with stopTimeout. No workloads ends the lease.
func (c *Client) SetFenceLease(until time.Time, workloads []string, stopTimeout time.Duration) error {
	return c.quick(http.MethodPut, pathFenceLease, FenceLease{Until: until, Workloads: workloads, StopTimeout: stopTimeout,
		DockerHost: c.DockerHost}, nil)
}
