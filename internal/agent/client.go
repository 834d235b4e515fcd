package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/pki"
)

// ErrNotModified is returned by DesiredState when the state has not changed
// from the version the agent holds within the wait.
var ErrNotModified = errors.New("desired state not modified")

// maxDesiredState bounds a desired state read from the server (it is JSON of
// a host's workloads; anything near this is a bug or an attack).
const maxDesiredState = 64 << 20

// APIError is an error answer of the control plane: its HTTP status and the
// JSON body {"error": CODE, "message": TEXT}.
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
	if e.Code != "" {
		return fmt.Sprintf("control plane: %d %s: %s", e.StatusCode, e.Code, msg)
	}
	return fmt.Sprintf("control plane: %d: %s", e.StatusCode, msg)
}

// HTTPClient talks to the control plane's HTTP API as one host: over TLS
// verified against the pinned CA fingerprint (never the system roots, never
// skipped), authenticated by the host token. It implements ControlPlane and
// the Docker adapter's BlobSource. Safe for concurrent use.
type HTTPClient struct {
	base   *url.URL
	hostID string
	token  string
	http   *http.Client
}

var _ ControlPlane = (*HTTPClient)(nil)

// NewHTTPClient returns a client for the identity a join gave.
func NewHTTPClient(id Identity) (*HTTPClient, error) {
	if err := id.Validate(); err != nil {
		return nil, err
	}
	base, hc, err := pinnedClient(id.Server, id.CAFingerprint, nil)
	if err != nil {
		return nil, err
	}
	return &HTTPClient{base: base, hostID: id.HostID, token: id.Token, http: hc}, nil
}

// pinnedClient returns the server's base URL and an HTTP client that trusts
// only the server whose chain holds the certificate with fingerprint.
// onVerified, if set, is given the verified connection's state.
func pinnedClient(server, fingerprint string, onVerified func(tls.ConnectionState)) (*url.URL, *http.Client, error) {
	base, err := url.Parse(strings.TrimRight(server, "/"))
	if err != nil || base.Host == "" {
		return nil, nil, fmt.Errorf("server URL %q: want https://host:port", server)
	}
	if base.Scheme != "https" {
		return nil, nil, fmt.Errorf("server URL %q: the control plane is reached over https only", server)
	}
	tlsCfg, err := pki.ClientConfig(fingerprint, base.Hostname())
	if err != nil {
		return nil, nil, err
	}
	if onVerified != nil {
		verify := tlsCfg.VerifyConnection
		tlsCfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if err := verify(cs); err != nil {
				return err
			}
			onVerified(cs)
			return nil
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsCfg
	tr.MaxIdleConnsPerHost = 4
	tr.ResponseHeaderTimeout = 0 // long polls hold the answer back on purpose; contexts bound every call
	return base, &http.Client{Transport: tr}, nil
}

// DesiredState long-polls this host's desired state: the server answers at
// once when its version differs from version, else holds the request until
// it changes or wait has passed (then ErrNotModified, or the same state).
func (c *HTTPClient) DesiredState(ctx context.Context, version string, wait time.Duration) (contract.DesiredState, error) {
	q := url.Values{}
	if version != "" {
		q.Set("version", version)
	}
	if wait > 0 {
		q.Set("wait", wait.String())
		// The server holds the request up to wait: give it slack to answer.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait+15*time.Second)
		defer cancel()
	}
	path := "/api/v1/hosts/" + url.PathEscape(c.hostID) + "/desired-state"
	resp, err := c.do(ctx, http.MethodGet, path, q, nil)
	if err != nil {
		return contract.DesiredState{}, fmt.Errorf("get desired state: %w", err)
	}
	defer drainClose(resp.Body)
	switch resp.StatusCode {
	case http.StatusNotModified, http.StatusNoContent:
		return contract.DesiredState{}, ErrNotModified
	case http.StatusOK:
	default:
		return contract.DesiredState{}, fmt.Errorf("get desired state: %w", apiError(resp))
	}
	d, err := contract.DecodeDesiredState(io.LimitReader(resp.Body, maxDesiredState))
	if err != nil {
		return contract.DesiredState{}, fmt.Errorf("get desired state: %w", err)
	}
	return d, nil
}

// ReportStatus posts a status report; it is also the host's heartbeat.
func (c *HTTPClient) ReportStatus(ctx context.Context, r contract.StatusReport) error {
	body, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode status: %w", err)
	}
	path := "/api/v1/hosts/" + url.PathEscape(c.hostID) + "/status"
	resp, err := c.do(ctx, http.MethodPost, path, nil, body)
	if err != nil {
		return fmt.Errorf("report status: %w", err)
	}
	defer drainClose(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("report status: %w", apiError(resp))
	}
	return nil
}

// OpenBlob fetches a source Blob (a build context) by digest. The Docker
// adapter verifies the content against the digest itself.
func (c *HTTPClient) OpenBlob(ctx context.Context, digest string) (io.ReadCloser, error) {
	resp, err := c.do(ctx, http.MethodGet, "/api/v1/blobs/"+url.PathEscape(digest), nil, nil)
	if err != nil {
		return nil, fmt.Errorf("fetch blob %s: %w", digest, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer drainClose(resp.Body)
		return nil, fmt.Errorf("fetch blob %s: %w", digest, apiError(resp))
	}
	return resp.Body, nil
}

func (c *HTTPClient) do(ctx context.Context, method, path string, q url.Values, body []byte) (*http.Response, error) {
	return send(ctx, c.http, c.base, c.token, method, path, q, body)
}

// send makes one authenticated request. The token travels only after the
// TLS handshake has verified the pinned server.
func send(ctx context.Context, hc *http.Client, base *url.URL, token, method, path string, q url.Values, body []byte) (*http.Response, error) {
	u := *base
	u.Path = strings.TrimRight(base.Path, "/") + path
	u.RawQuery = q.Encode()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return hc.Do(req)
}

// apiError reads the server's JSON error body; a body that is not one still
// gives the status.
func apiError(resp *http.Response) error {
	e := &APIError{StatusCode: resp.StatusCode}
	var body struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body); err == nil {
		e.Code, e.Message = body.Error, body.Message
	}
	return e
}

// drainClose reads what is left of a body (so the connection is reused) and
// closes it.
func drainClose(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 1<<20))
	_ = body.Close()
}

// joinRequest and joinResponse are the bodies of POST /api/v1/join.
type joinRequest struct {
	Name string `json:"name,omitempty"`
}

type joinResponse struct {
	HostID string `json:"host_id"`
	Token  string `json:"token"`
}

// Join trades a join token ("hatch-join.<secret>.<ca-fingerprint>") for a
// host identity at POST /api/v1/join. The server's certificate is verified
// against the fingerprint the token carries before the token is sent. It
// returns the identity and the server's CA certificate (PEM) as seen in the
// handshake.
func Join(ctx context.Context, server, joinToken, name string) (Identity, []byte, error) {
	tok, err := pki.ParseToken(joinToken)
	if err != nil {
		return Identity{}, nil, fmt.Errorf("join: %w", err)
	}
	if tok.Kind != pki.KindJoin {
		return Identity{}, nil, fmt.Errorf("join: a %s token was given; `hatch token create --join` prints a join token", tok.Kind)
	}
	var (
		mu    sync.Mutex // guards caPEM, written from the TLS handshake
		caPEM []byte
	)
	base, hc, err := pinnedClient(server, tok.Fingerprint, func(cs tls.ConnectionState) {
		for _, cert := range cs.PeerCertificates {
			if pki.Fingerprint(cert.Raw) == tok.Fingerprint {
				mu.Lock()
				caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
				mu.Unlock()
			}
		}
	})
	if err != nil {
		return Identity{}, nil, fmt.Errorf("join: %w", err)
	}
	defer hc.CloseIdleConnections()
	body, _ := json.Marshal(joinRequest{Name: name}) // a struct of strings always encodes
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := send(ctx, hc, base, tok.String(), http.MethodPost, "/api/v1/join", nil, body)
	if err != nil {
		return Identity{}, nil, fmt.Errorf("join %s: %w", base.Redacted(), err)
	}
	defer drainClose(resp.Body)
	if resp.StatusCode/100 != 2 {
		return Identity{}, nil, fmt.Errorf("join %s: %w", base.Redacted(), apiError(resp))
	}
	var jr joinResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&jr); err != nil {
		return Identity{}, nil, fmt.Errorf("join: decode answer: %w", err)
	}
	id := Identity{Server: base.String(), HostID: jr.HostID, Name: name, Token: jr.Token, CAFingerprint: tok.Fingerprint}
	if err := id.Validate(); err != nil {
		return Identity{}, nil, fmt.Errorf("join: the server's answer is incomplete: %w", err)
	}
	if ht, err := pki.ParseToken(jr.Token); err != nil || ht.Kind != pki.KindHost {
		return Identity{}, nil, errors.New("join: the server's answer holds no valid host token")
	}
	mu.Lock()
	defer mu.Unlock()
	return id, caPEM, nil
}
