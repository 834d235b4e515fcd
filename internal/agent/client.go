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
	"slices"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/apiclient"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/pki"
)

// ErrNotModified is returned by DesiredState when the state has not changed
// from the version the agent holds within the wait.
var ErrNotModified = errors.New("agent: desired state not modified")

// maxDesiredState bounds a desired state read from the server (it is JSON of
// a host's workloads; anything near this is a bug or an attack).
const maxDesiredState = 64 << 20

// APIError is an error answer of the control plane (its status and JSON
// error body); callers branch on it with errors.As.
type APIError = apiclient.APIError

// HTTPClient talks to the control plane's HTTP API as one host, over the
// connection the CLI's client uses too (apiclient): TLS verified against the pinned CA
// fingerprint (never the system roots, never skipped), authenticated by the
// host token. It implements ControlPlane and the Docker adapter's
// BlobSource. Safe for concurrent use.
type HTTPClient struct {
	api    *apiclient.Client
	hostID string
	// operator are the URLs the operator gave (Identity.Server): always
	// kept beside the control plane's list.
	operator string

	mu sync.Mutex // guards live, refused and onServers
	// live is the last list of live servers the control plane gave, and
	// refused the last one the client could not use.
	live, refused []string
	// onServers is told of each new server list a desired-state answer
	// gives, with the error that kept the client from using it, if any.
	onServers func(live []string, err error)

	// peersMu guards peers: the last peer list an answer carried, which the
	// long-poll names (peers=) so that answers leave it out while it holds.
	peersMu sync.Mutex
	peers   heldPeers
}

// heldPeers is a peer list and the version the control plane gave it.
type heldPeers struct {
	version string
	list    []contract.Peer
}

var _ ControlPlane = (*HTTPClient)(nil)

// NewHTTPClient returns a client for the identity a join gave.
func NewHTTPClient(id Identity) (*HTTPClient, error) {
	if err := id.Validate(); err != nil {
		return nil, err
	}
	api, err := apiclient.New(apiclient.JoinServers(id.URLs()), id.Token)
	if err != nil {
		return nil, err
	}
	return &HTTPClient{api: api, hostID: id.HostID, operator: id.Server, live: id.Servers}, nil
}

// OnServers sets what is told of each new list of live servers a
// desired-state answer gives (the agent keeps it with its identity).
func (c *HTTPClient) OnServers(fn func(live []string, err error)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onServers = fn
}

// Server is the URL of the server the client talks to now.
func (c *HTTPClient) Server() string { return c.api.Server() }

// takeServers follows the control plane's list of live servers: the client
// goes on to any of them (and to the operator's URLs) from now on.
func (c *HTTPClient) takeServers(header string) {
	live := apiclient.ParseServers(header)
	if len(live) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if slices.Equal(live, c.live) || slices.Equal(live, c.refused) {
		return
	}
	_, err := c.api.SetServers(apiclient.ParseServers(append([]string{c.operator}, live...)...))
	if err == nil {
		c.live = live
	} else {
		c.refused = live // told once
	}
	if c.onServers != nil {
		c.onServers(live, err)
	}
}

// SessionServers returns the servers a host polls for sessions: the control
// plane's live servers (each offers its own operators' sessions), or, until
// one answered with the list, the URLs the client knows.
func (c *HTTPClient) SessionServers() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.live) > 0 {
		return slices.Clone(c.live)
	}
	return c.api.Servers()
}

// At returns a client of the same host for server alone: a session's
// stream must reach the server that offered it, never the next one.
func (c *HTTPClient) At(server string) (*HTTPClient, error) {
	api, err := apiclient.New(server, c.api.Token())
	if err != nil {
		return nil, err
	}
	return &HTTPClient{api: api, hostID: c.hostID, operator: server}, nil
}

// Close closes the client's idle connections; calls after it open new ones.
func (c *HTTPClient) Close() { c.api.Close() }

// DesiredState long-polls this host's desired state: the server answers at
// once when its version differs from version, else holds the request until
// it changes or wait has passed (then ErrNotModified, or the same state).
//
// The answer's peer list is kept, and named in the next polls: while it is
// unchanged the server leaves it out and it is filled in here, so an apply
// does not send every host the whole fleet again.
func (c *HTTPClient) DesiredState(ctx context.Context, version string, wait time.Duration) (contract.DesiredState, error) {
	c.peersMu.Lock()
	held := c.peers
	c.peersMu.Unlock()
	q := url.Values{}
	if version != "" {
		q.Set("version", version)
	}
	if held.version != "" {
		q.Set("peers", held.version)
	}
	if wait > 0 {
		q.Set("wait", wait.String())
		// The server holds the request up to wait: give it slack to answer.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait+15*time.Second)
		defer cancel()
	}
	path := "/api/v1/hosts/" + url.PathEscape(c.hostID) + "/desired-state?" + q.Encode()
	resp, err := c.api.Send(ctx, http.MethodGet, path, nil, "")
	if err != nil {
		return contract.DesiredState{}, fmt.Errorf("get desired state: %w", err)
	}
	defer apiclient.DrainClose(resp.Body)
	if resp.StatusCode/100 == 2 || resp.StatusCode == http.StatusNotModified {
		c.takeServers(resp.Header.Get(api.HeaderServers))
	}
	switch resp.StatusCode {
	case http.StatusNotModified, http.StatusNoContent:
		return contract.DesiredState{}, ErrNotModified
	case http.StatusOK:
	default:
		return contract.DesiredState{}, fmt.Errorf("get desired state: %w", apiclient.ReadError(resp))
	}
	d, err := contract.DecodeDesiredState(io.LimitReader(resp.Body, maxDesiredState))
	if err != nil {
		return contract.DesiredState{}, fmt.Errorf("get desired state: %w", err)
	}
	return c.fillPeers(d, held)
}

// fillPeers puts back the peers an answer left out (held, as the request
// named them), or keeps those it carries for the next requests.
func (c *HTTPClient) fillPeers(d contract.DesiredState, held heldPeers) (contract.DesiredState, error) {
	c.peersMu.Lock()
	defer c.peersMu.Unlock()
	if !d.PeersOmitted {
		c.peers = heldPeers{version: d.PeersVersion, list: d.Peers}
		return d, nil
	}
	if d.PeersVersion == "" || d.PeersVersion != held.version {
		c.peers = heldPeers{} // ask for them whole next time
		return contract.DesiredState{}, fmt.Errorf("get desired state: the server left out peers %q, but this host holds %q", d.PeersVersion, held.version)
	}
	d.Peers, d.PeersOmitted = slices.Clone(held.list), false
	return d, nil
}

// ReportStatus posts a status report; it is also the host's heartbeat.
func (c *HTTPClient) ReportStatus(ctx context.Context, r contract.StatusReport) error {
	path := "/api/v1/hosts/" + url.PathEscape(c.hostID) + "/status"
	if err := c.api.Do(ctx, http.MethodPost, path, r, nil); err != nil {
		return fmt.Errorf("report status: %w", err)
	}
	return nil
}

// OpenBlob fetches a source Blob (a build context) by digest. The Docker
// adapter verifies the content against the digest itself.
func (c *HTTPClient) OpenBlob(ctx context.Context, digest string) (io.ReadCloser, error) {
	resp, err := c.api.Send(ctx, http.MethodGet, "/api/v1/blobs/"+url.PathEscape(digest), nil, "")
	if err != nil {
		return nil, fmt.Errorf("fetch blob %s: %w", digest, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer apiclient.DrainClose(resp.Body)
		return nil, fmt.Errorf("fetch blob %s: %w", digest, apiclient.ReadError(resp))
	}
	return resp.Body, nil
}

// JoinResult is what a join gives the agent.
type JoinResult struct {
	Identity Identity
	// CAPEM is the control plane's CA certificate as seen in the handshake
	// (nil for a plain-HTTP loopback server).
	CAPEM []byte
	// HostCert is the host certificate for the CSR sent, with the host CA
	// (empty when the server is older than host certificates).
	HostCert api.HostCertificate
}

// Join trades a join token ("hatch-join.<secret>.<ca-fingerprint>") for a
// host identity at POST /api/v1/join, and the public key of csrPEM (made on
// this host) for a host certificate. The server's certificate is verified
// against the fingerprint the token carries before the token is sent.
func Join(ctx context.Context, server, joinToken, name string, csrPEM []byte) (JoinResult, error) {
	tok, err := pki.ParseToken(joinToken)
	if err != nil {
		return JoinResult{}, fmt.Errorf("join: %w", err)
	}
	if tok.Kind != pki.KindJoin {
		return JoinResult{}, fmt.Errorf("join: a %s token was given; `hatch token create --join` prints a join token", tok.Kind)
	}
	cl, err := apiclient.New(server, joinToken)
	if err != nil {
		return JoinResult{}, fmt.Errorf("join: %w", err)
	}
	defer cl.Close()
	body, _ := json.Marshal(api.JoinRequest{Name: name, CSR: string(csrPEM)}) // a struct of strings always encodes
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := cl.Send(ctx, http.MethodPost, "/api/v1/join", bytes.NewReader(body), "application/json")
	if err != nil {
		return JoinResult{}, fmt.Errorf("join %s: %w", cl.Server(), err)
	}
	defer apiclient.DrainClose(resp.Body)
	if resp.StatusCode/100 != 2 {
		return JoinResult{}, fmt.Errorf("join %s: %w", cl.Server(), apiclient.ReadError(resp))
	}
	var jr api.JoinResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&jr); err != nil {
		return JoinResult{}, fmt.Errorf("join: decode answer: %w", err)
	}
	id := Identity{Server: apiclient.JoinServers(cl.Servers()), HostID: jr.HostID, Name: name, Token: jr.Token, CAFingerprint: tok.Fingerprint}
	if err := id.Validate(); err != nil {
		return JoinResult{}, fmt.Errorf("join: the server's answer is incomplete: %w", err)
	}
	if ht, err := pki.ParseToken(jr.Token); err != nil || ht.Kind != pki.KindHost {
		return JoinResult{}, errors.New("join: the server's answer holds no valid host token")
	}
	return JoinResult{
		Identity: id,
		CAPEM:    pinnedCertificate(resp.TLS, tok.Fingerprint),
		HostCert: api.HostCertificate{Certificate: jr.Certificate, HostCA: jr.HostCA},
	}, nil
}

// RenewCertificate asks the control plane for a host certificate for the
// public key of csrPEM, authenticated by the host token.
func (c *HTTPClient) RenewCertificate(ctx context.Context, csrPEM []byte) (api.HostCertificate, error) {
	path := "/api/v1/hosts/" + url.PathEscape(c.hostID) + "/certificate"
	var out api.HostCertificate
	if err := c.api.Do(ctx, http.MethodPost, path, api.CertificateRequest{CSR: string(csrPEM)}, &out); err != nil {
		return api.HostCertificate{}, fmt.Errorf("renew host certificate: %w", err)
	}
	return out, nil
}

// pinnedCertificate returns, as PEM, the certificate of a verified connection
// whose fingerprint was pinned: the server's CA, kept beside the identity.
// Nil for a plain-HTTP (loopback) server.
func pinnedCertificate(cs *tls.ConnectionState, fingerprint string) []byte {
	if cs == nil {
		return nil
	}
	for _, cert := range cs.PeerCertificates {
		if pki.Fingerprint(cert.Raw) == fingerprint {
			return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
		}
	}
	return nil
}

// SessionOffers long-polls the sessions offered to this host: at once if
// any are waiting, else at the first within wait (none after it).
func (c *HTTPClient) SessionOffers(ctx context.Context, wait time.Duration) ([]contract.SessionOffer, error) {
	path := "/api/v1/hosts/" + url.PathEscape(c.hostID) + "/sessions?wait=" + url.QueryEscape(wait.String())
	var out contract.SessionOffers
	if err := c.api.Do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, fmt.Errorf("session offers: %w", err)
	}
	return out.Sessions, nil
}

// OpenSession opens this host's stream for the session with the ID.
func (c *HTTPClient) OpenSession(ctx context.Context, id string) (*websocket.Conn, error) {
	path := "/api/v1/hosts/" + url.PathEscape(c.hostID) + "/sessions/" + url.PathEscape(id) + "/stream"
	conn, err := c.api.Dial(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("open session stream: %w", err)
	}
	return conn, nil
}
