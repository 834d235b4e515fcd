package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/coder/websocket"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/pki"
)

// APIError is an error answer of the control plane: its status and the JSON
// body {"error": CODE, "message": TEXT}.
type APIError struct {
	StatusCode int
	Code       string
	Message    string
}

func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.StatusCode)
	}
	if e.Code == "" {
		return fmt.Sprintf("%d: %s", e.StatusCode, msg)
	}
	return fmt.Sprintf("%s (%d): %s", e.Code, e.StatusCode, msg)
}

// Client talks to the control plane's API with one token, over a connection
// verified against the CA fingerprint the token carries. Safe for concurrent use.
type Client struct {
	base  *url.URL
	token string
	http  *http.Client
	// ws is the HTTP/1.1 client streams are dialled with: a WebSocket
	// upgrade needs a connection of its own, never an HTTP/2 stream.
	ws *http.Client
}

// New returns a client for cfg. An https server is trusted only if its chain
// holds the certificate whose fingerprint the token carries; http is refused
// unless the server is on a loopback address.
func New(cfg Config) (*Client, error) {
	tok, err := pki.ParseToken(cfg.Token)
	if err != nil {
		return nil, fmt.Errorf("the token: %w", err)
	}
	base, err := url.Parse(strings.TrimRight(cfg.Server, "/"))
	if err != nil || base.Host == "" || base.User != nil || base.RawQuery != "" {
		return nil, fmt.Errorf("server %q: want https://host:port", cfg.Server)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	switch base.Scheme {
	case "https":
		tlsCfg, err := pki.ClientConfig(tok.Fingerprint, base.Hostname())
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = tlsCfg
	case "http":
		if !isLoopback(base.Hostname()) {
			return nil, fmt.Errorf("server %s: plain http is allowed only to a loopback address; "+
				"the control plane serves https (its token pins its certificate)", base.Redacted())
		}
	default:
		return nil, fmt.Errorf("server %q: want https://host:port", cfg.Server)
	}
	tr.Proxy = nil // the pinned server is reached directly, never through a proxy that would see the token
	ws := tr.Clone()
	ws.ForceAttemptHTTP2 = false
	ws.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	if ws.TLSClientConfig != nil {
		ws.TLSClientConfig.NextProtos = []string{"http/1.1"}
	}
	return &Client{base: base, token: tok.String(), http: &http.Client{Transport: tr}, ws: &http.Client{Transport: ws}}, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Token returns the token the client presents.
func (c *Client) Token() string { return c.token }

// Server returns the server's base URL.
func (c *Client) Server() string { return c.base.String() }

// Close closes idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// Send makes one authenticated request and returns the response as it is,
// whatever its status (streams and blobs read it themselves). body may be nil.
func (c *Client) Send(ctx context.Context, method, path string, body io.Reader, contentType string) (*http.Response, error) {
	u := *c.base
	p, query, _ := strings.Cut(path, "?")
	u.Path = strings.TrimRight(c.base.Path, "/") + p
	u.RawQuery = query
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, p, err)
	}
	return resp, nil
}

// Dial opens a WebSocket to path (with its query), authenticated like every
// request and over the same pinned TLS. A refusal before the upgrade is the
// server's *APIError.
func (c *Client) Dial(ctx context.Context, path string) (*websocket.Conn, error) {
	u := *c.base
	p, query, _ := strings.Cut(path, "?")
	u.Path = strings.TrimRight(c.base.Path, "/") + p
	u.RawQuery = query
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	case "http":
		u.Scheme = "ws"
	}
	conn, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{HTTPClient: c.ws,
		HTTPHeader: http.Header{"Authorization": {"Bearer " + c.token}}})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, ReadError(resp)
		}
		return nil, fmt.Errorf("GET %s: %w", p, err)
	}
	return conn, nil
}

// Do sends in (nil: no body) as JSON and decodes a 2xx answer into out (nil:
// the body is dropped). Any other status is an *APIError.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	contentType := ""
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s %s: encode: %w", method, path, err)
		}
		body, contentType = bytes.NewReader(data), "application/json"
	}
	resp, err := c.Send(ctx, method, path, body, contentType)
	if err != nil {
		return err
	}
	defer drainClose(resp.Body)
	if resp.StatusCode/100 != 2 {
		return ReadError(resp)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode the answer: %w", method, path, err)
	}
	return nil
}

// ReadError reads the server's JSON error body into an *APIError; a body
// that is not one still gives the status.
func ReadError(resp *http.Response) error {
	e := &APIError{StatusCode: resp.StatusCode}
	var body api.Error
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body); err == nil {
		e.Code, e.Message = string(body.Code), body.Message
	}
	return e
}

// drainClose reads what is left of a body (so the connection is reused) and
// closes it.
func drainClose(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 1<<20))
	_ = body.Close()
}
