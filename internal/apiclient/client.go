// Package apiclient is the one HTTP connection to the control plane that
// both its clients use, the CLI's (package client) and each host's agent: it
// finds a server that answers among several, trusts exactly the server the
// token names, and authenticates every request with that token. It knows
// the API's error body but none of its routes: those are its callers'.
//
// Every token carries the fingerprint of the server's CA, so a client that
// has a token needs nothing else to verify the server: the connection is
// verified against that one certificate, never against the system roots and
// never skipped, before the token is sent. Plain HTTP is allowed only to a
// loopback address (a server run with --insecure-http, as `hatch up` may).
package apiclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

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
// verified against the CA fingerprint the token carries. It may know several
// servers of one control plane (they share the CA, so the same pin trusts
// each): a request goes to the server that answered last, and one that does
// not answer (refused, timed out, 502/503/504) is left for the next at once,
// as its rotation says. Safe for concurrent use.
type Client struct {
	token string
	tok   pki.Token

	mu   sync.Mutex // guards rot and ends
	rot  *rotation
	ends map[string]*endpoint // by URL, one per server listed
}

// endpoint is one server: its base URL, its HTTP clients, and a channel
// closed when it is found not answering, which ends the requests waiting on
// it (a long-poll on a server that vanished without a reset).
type endpoint struct {
	base *url.URL
	http *http.Client
	// ws is the HTTP/1.1 client streams are dialled with: a WebSocket
	// upgrade needs a connection of its own, never an HTTP/2 stream.
	ws   *http.Client
	gone chan struct{} // guarded by Client.mu: replaced when closed
}

// New returns a client presenting token to server, which may list several
// URLs (comma-separated) of one control plane. An https server is trusted
// only if its chain holds the certificate whose fingerprint the token
// carries; http is refused unless the server is on a loopback address.
func New(server, token string) (*Client, error) {
	tok, err := pki.ParseToken(token)
	if err != nil {
		return nil, fmt.Errorf("the token: %w", err)
	}
	urls := ParseServers(server)
	if len(urls) == 0 {
		return nil, fmt.Errorf("server %q: want https://host:port", server)
	}
	c := &Client{token: tok.String(), tok: tok, ends: map[string]*endpoint{}}
	for _, u := range urls {
		e, err := c.newEndpoint(u)
		if err != nil {
			return nil, err
		}
		c.ends[u] = e
	}
	c.rot = newRotation(urls)
	return c, nil
}

// dialTimeout bounds a dial and a TLS handshake: a server that takes longer
// is left for the next within seconds (and a lone server is tried again by
// the caller's own retry).
const dialTimeout = 5 * time.Second

func (c *Client) newEndpoint(server string) (*endpoint, error) {
	base, err := url.Parse(strings.TrimRight(server, "/"))
	if err != nil || base.Host == "" || base.User != nil || base.RawQuery != "" {
		return nil, fmt.Errorf("server %q: want https://host:port", server)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: dialTimeout, KeepAlive: 15 * time.Second}).DialContext
	tr.TLSHandshakeTimeout = dialTimeout
	switch base.Scheme {
	case "https":
		tlsCfg, err := pki.ClientConfig(c.tok.Fingerprint, base.Hostname())
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
		return nil, fmt.Errorf("server %q: want https://host:port", server)
	}
	tr.Proxy = nil // the pinned server is reached directly, never through a proxy that would see the token
	ws := tr.Clone()
	ws.ForceAttemptHTTP2 = false
	ws.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	if ws.TLSClientConfig != nil {
		ws.TLSClientConfig.NextProtos = []string{"http/1.1"}
	}
	return &endpoint{base: base, http: &http.Client{Transport: tr}, ws: &http.Client{Transport: ws}, gone: make(chan struct{})}, nil
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

// Server returns the base URL of the server the client talks to now (the
// one that answered last, or the first to try).
func (c *Client) Server() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ends[c.rot.urls[c.rot.active]].base.String()
}

// Servers returns every server URL the client knows, in their list's order.
func (c *Client) Servers() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.rot.urls)
}

// SetServers replaces the servers the client knows (the control plane's
// list of its live servers, say). Each must be a valid server URL, else
// nothing changes. The server answering now stays the one used if listed.
// It reports whether the list changed.
func (c *Client) SetServers(urls []string) (bool, error) {
	urls = ParseServers(urls...)
	if len(urls) == 0 {
		return false, errors.New("no server URL")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if slices.Equal(urls, c.rot.urls) {
		return false, nil
	}
	ends := make(map[string]*endpoint, len(urls))
	for _, u := range urls {
		if e, ok := c.ends[u]; ok {
			ends[u] = e
			continue
		}
		e, err := c.newEndpoint(u)
		if err != nil {
			return false, err
		}
		ends[u] = e
	}
	for u, e := range c.ends {
		if _, ok := ends[u]; !ok {
			e.http.CloseIdleConnections()
		}
	}
	c.ends = ends
	c.rot.set(urls)
	return true, nil
}

// Close closes idle connections.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.ends {
		e.http.CloseIdleConnections()
	}
}

// attempt is one server to try a request on.
type attempt struct {
	index int
	url   string
	end   *endpoint
	gone  <-chan struct{}
}

// plan returns the servers to try a request on, in order.
func (c *Client) plan() []attempt {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []attempt
	for _, i := range c.rot.order(time.Now()) {
		u := c.rot.urls[i]
		e := c.ends[u]
		out = append(out, attempt{index: i, url: u, end: e, gone: e.gone})
	}
	return out
}

// failed passes over a server that did not answer, and ends the requests
// waiting on it.
func (c *Client) failed(a attempt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a.index >= len(c.rot.urls) || c.rot.urls[a.index] != a.url {
		return // the list changed meanwhile
	}
	c.rot.failed(a.index, time.Now())
	if a.end.gone == a.gone {
		close(a.end.gone)
		a.end.gone = make(chan struct{})
	}
}

// answered makes a server that answered the one used next.
func (c *Client) answered(a attempt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a.index < len(c.rot.urls) && c.rot.urls[a.index] == a.url {
		c.rot.answered(a.index)
	}
}

// Send makes one authenticated request and returns the response as it is,
// whatever its status (streams and blobs read it themselves). body may be nil.
// A server that cannot be reached is left for the next one, and the request
// is sent there too when that is safe: it never reached the server (a failed
// dial), or it is a GET; a body is sent again only if it can be read again
// (bytes or strings readers). A GET answered 502, 503 or 504 also goes on to
// the next server; the last server's answer is returned as it is.
func (c *Client) Send(ctx context.Context, method, path string, body io.Reader, contentType string) (*http.Response, error) {
	p, query, _ := strings.Cut(path, "?")
	var getBody func() (io.ReadCloser, error)
	var lastErr error
	attempts := c.plan()
	for k, a := range attempts {
		last := k == len(attempts)-1
		u := *a.end.base
		u.Path = strings.TrimRight(a.end.base.Path, "/") + p
		u.RawQuery = query
		actx, cancel := context.WithCancel(ctx)
		if k > 0 && body != nil {
			if getBody == nil {
				cancel()
				return nil, lastErr // the body cannot be sent again
			}
			b, err := getBody()
			if err != nil {
				cancel()
				return nil, lastErr
			}
			body = b
		}
		req, err := http.NewRequestWithContext(actx, method, u.String(), body)
		if err != nil {
			cancel()
			return nil, err
		}
		getBody = req.GetBody
		req.Header.Set("Authorization", "Bearer "+c.token)
		req.Header.Set("Accept", "application/json")
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		watching := make(chan struct{})
		go func() {
			select {
			case <-a.gone:
				cancel()
			case <-watching:
			case <-actx.Done():
			}
		}()
		resp, err := a.end.http.Do(req)
		close(watching)
		if err == nil && actx.Err() != nil {
			// Ended (by the caller, or as its server was found dead) while
			// the answer came: the answer may be the server's reaction to
			// the end, never one to trust.
			DrainClose(resp.Body)
			resp, err = nil, actx.Err()
		}
		if err != nil {
			cancel()
			lastErr = fmt.Errorf("%s %s: %w", method, p, err)
			if ctx.Err() != nil {
				if errors.Is(ctx.Err(), context.DeadlineExceeded) {
					c.failed(a) // the server did not answer in the time given
				}
				return nil, lastErr
			}
			select {
			case <-a.gone: // ended because the server was found dead: passed over already
			default:
				c.failed(a)
			}
			if last || !(isDialError(err) || idempotent(method)) {
				return nil, lastErr
			}
			continue
		}
		if unavailable(resp.StatusCode) {
			c.failed(a)
			if !last && idempotent(method) {
				lastErr = fmt.Errorf("%s %s: %w", method, p, ReadError(resp))
				DrainClose(resp.Body)
				cancel()
				continue
			}
		} else {
			c.answered(a)
		}
		resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
		return resp, nil
	}
	return nil, lastErr
}

// cancelOnClose ends a request's context when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// isDialError reports whether err is a failure to connect: the request never
// reached the server.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// idempotent reports whether a request may be sent again to another server
// after the first may have received it.
func idempotent(method string) bool { return method == http.MethodGet || method == http.MethodHead }

// unavailable reports whether a status says the server (or what stands in
// front of it) cannot serve now: another server may.
func unavailable(status int) bool {
	return status == http.StatusBadGateway || status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout
}

// Dial opens a WebSocket to path (with its query), authenticated like every
// request and over the same pinned TLS, on the first server that takes the
// connection. A refusal before the upgrade is the server's *APIError.
func (c *Client) Dial(ctx context.Context, path string) (*websocket.Conn, error) {
	p, query, _ := strings.Cut(path, "?")
	var lastErr error
	for _, a := range c.plan() {
		u := *a.end.base
		u.Path = strings.TrimRight(a.end.base.Path, "/") + p
		u.RawQuery = query
		switch u.Scheme {
		case "https":
			u.Scheme = "wss"
		case "http":
			u.Scheme = "ws"
		}
		conn, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{HTTPClient: a.end.ws,
			HTTPHeader: http.Header{"Authorization": {"Bearer " + c.token}}})
		if err == nil {
			c.answered(a)
			return conn, nil
		}
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			if !unavailable(resp.StatusCode) {
				c.answered(a)
				return nil, ReadError(resp)
			}
			lastErr = ReadError(resp)
		} else {
			lastErr = fmt.Errorf("GET %s: %w", p, err)
		}
		if ctx.Err() != nil {
			break
		}
		c.failed(a)
	}
	return nil, lastErr
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
	defer DrainClose(resp.Body)
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
	} else if err := json.Unmarshal([]byte(resp.Header.Get(api.HeaderError)), &body); err == nil {
		e.Code, e.Message = string(body.Code), body.Message // a HEAD's answer: no body
	}
	return e
}

// drainClose reads what is left of a body (so the connection is reused) and
// closes it.
func DrainClose(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 1<<20))
	_ = body.Close()
}
