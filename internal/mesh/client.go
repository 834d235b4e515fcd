package mesh

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/contract"
)

// Errors of DialWorkload a caller branches on (errors.Is).
var (
	// ErrForbidden: the peer refused the stream (403): this host may not
	// reach the workload.
	ErrForbidden = errors.New("mesh: the peer refused the stream to this workload")
	// ErrUnavailable: the peer has no healthy replica of the workload (503).
	ErrUnavailable = errors.New("mesh: the peer has no healthy replica of the workload")
	// ErrUnknownPeer: the host is not in the valid host set.
	ErrUnknownPeer = errors.New("mesh: the host is not in the valid host set")
	// ErrPeerUnreachable: no address of the peer could be dialled.
	ErrPeerUnreachable = errors.New("mesh: the peer cannot be reached")
)

// Client opens streams to workloads on other hosts, over one HTTP/2
// connection per peer, kept alive by pings. Safe for concurrent use.
type Client struct {
	cfg   Config
	creds Credentials
	log   *zap.Logger
	// h2 makes the connections (NewClientConn): HTTP/2 only, dialled by
	// dialTLS, which reads from the dial's context which peer it is for.
	h2    *http.Transport
	peers peerSet

	mu sync.Mutex // guards conns, dialing and closed
	// conns is the live connection to each peer.
	conns map[string]*peerConn
	// dialing holds a channel per peer being dialled, closed when done, so
	// that concurrent streams share one dial.
	dialing map[string]chan struct{}
	closed  bool
}

// peerConn is one HTTP/2 connection to a peer.
type peerConn struct {
	cc            *http.ClientConn
	local, remote net.Addr
	dead          chan struct{} // closed when the connection is closed, for any reason
}

// usable reports whether the connection takes new streams: open, and not
// draining. A full one (no slot available, streams in flight) is usable:
// RoundTrip waits for a slot.
func (pc *peerConn) usable() bool {
	return pc.cc.Err() == nil && (pc.cc.InFlight() > 0 || pc.cc.Available() > 0)
}

// NewClient returns a client for creds. It reaches nobody until SetPeers
// gives it the valid host set.
func NewClient(cfg Config, creds Credentials) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := creds.validate(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, creds: creds, log: cfg.Logger.With(zap.String("component", "mesh-client")),
		conns: map[string]*peerConn{}, dialing: map[string]chan struct{}{}}
	var protocols http.Protocols
	protocols.SetHTTP2(true)
	c.h2 = &http.Transport{
		Protocols:      &protocols,
		DialTLSContext: c.dialTLS,
		// A stream is bytes, never compressed.
		DisableCompression: true,
		HTTP2: &http.HTTP2Config{
			// The ping after KeepAlive without a frame, and death after
			// KeepAliveTimeout without its answer, are what find a dead
			// peer.
			SendPingTimeout:  cfg.KeepAlive,
			PingTimeout:      cfg.KeepAliveTimeout,
			WriteByteTimeout: cfg.HandshakeTimeout,
			MaxReadFrameSize: maxFrameSize,
			// The stream counts of one connection are the server's to
			// bound; a full connection makes the caller wait, not a
			// second connection.
			StrictMaxConcurrentRequests: true,
		},
	}
	return c, nil
}

// SetPeers installs the valid host set (from the latest desired state):
// where peers are reached, and who they are. The connections to hosts that
// left it are closed at once.
func (c *Client) SetPeers(peers []contract.Peer) {
	gone := c.peers.replace(peers)
	c.mu.Lock()
	var closing []*peerConn
	for _, id := range gone {
		if pc := c.conns[id]; pc != nil {
			closing = append(closing, pc)
			delete(c.conns, id)
		}
	}
	c.mu.Unlock()
	for _, pc := range closing {
		_ = pc.cc.Close()
	}
}

// Alive reports whether a live connection to the peer is open: false once
// its keep-alive pings have gone unanswered, or before any stream was opened
// to it.
func (c *Client) Alive(peerID string) bool {
	c.mu.Lock()
	pc := c.conns[peerID]
	c.mu.Unlock()
	if pc == nil {
		return false
	}
	select {
	case <-pc.dead:
		return false
	default:
		return pc.usable()
	}
}

// Close closes every connection; their streams end.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	conns := c.conns
	c.conns = map[string]*peerConn{}
	c.mu.Unlock()
	for _, pc := range conns {
		_ = pc.cc.Close()
	}
	return nil
}

// DialWorkload opens a stream to workload w through peer peerID (which
// dials a healthy replica there), over the connection to the peer, made
// first if there is none: the peer's addresses are tried in order. ctx
// bounds the dial and the peer's answer, not the stream's life. The
// returned connection supports CloseWrite (half-close).
func (c *Client) DialWorkload(ctx context.Context, peerID string, w Workload) (net.Conn, error) {
	if err := w.validate(); err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		pc, err := c.conn(ctx, peerID)
		if err != nil {
			return nil, err
		}
		conn, err := c.open(ctx, pc, peerID, w)
		if err != nil && attempt == 0 && !pc.usable() && ctx.Err() == nil {
			// The connection died under the request (the peer restarted):
			// one new connection is worth a try.
			c.drop(peerID, pc)
			continue
		}
		return conn, err
	}
}

// DialStream is DialWorkload for a workload ID ("namespace/project/egg") and
// a port (zero: an HTTP stream): what the ingress's remote backends call.
func (c *Client) DialStream(ctx context.Context, peerID, workloadID string, port int) (net.Conn, error) {
	w, err := ParseWorkload(workloadID, port)
	if err != nil {
		return nil, err
	}
	return c.DialWorkload(ctx, peerID, w)
}

func (c *Client) open(ctx context.Context, pc *peerConn, peerID string, w Workload) (net.Conn, error) {
	u := url.URL{Scheme: "https", Host: peerID, Path: streamPath + w.ID()}
	if w.Port != 0 {
		u.RawQuery = "port=" + strconv.Itoa(w.Port)
	}
	// The stream lives until the connection returned is closed; ctx only
	// bounds the wait for the answer.
	sctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(sctx, http.MethodPost, u.String(), pr)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("mesh stream to %s on %s: %w", w.ID(), peerID, err)
	}
	req.ContentLength = -1
	stop := context.AfterFunc(ctx, cancel)
	resp, err := pc.cc.RoundTrip(req)
	stopped := stop()
	if err == nil && !stopped { // ctx ended just as the answer came
		_ = resp.Body.Close()
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		_ = pw.CloseWithError(err)
		return nil, fmt.Errorf("mesh stream to %s on %s: %w", w.ID(), peerID, err)
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		_ = resp.Body.Close()
		cancel()
		_ = pw.Close()
		var kind error
		switch resp.StatusCode {
		case http.StatusForbidden:
			kind = ErrForbidden
		case http.StatusServiceUnavailable:
			kind = ErrUnavailable
		default:
			kind = fmt.Errorf("mesh: the peer answered %s", resp.Status)
		}
		return nil, fmt.Errorf("mesh stream to %s on %s: %w: %s", w.ID(), peerID, kind, msg)
	}
	return newStreamConn(pw, resp.Body, cancel, pc.local, pc.remote), nil
}

// conn returns the live connection to the peer, dialling it when there is
// none (one dial at a time per peer).
func (c *Client) conn(ctx context.Context, peerID string) (*peerConn, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, errors.New("mesh: client closed")
		}
		if pc := c.conns[peerID]; pc != nil && pc.usable() {
			c.mu.Unlock()
			return pc, nil
		}
		if wait, ok := c.dialing[peerID]; ok {
			c.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("mesh dial %s: %w", peerID, ctx.Err())
			}
		}
		done := make(chan struct{})
		c.dialing[peerID] = done
		c.mu.Unlock()

		pc, err := c.dial(ctx, peerID)

		c.mu.Lock()
		delete(c.dialing, peerID)
		close(done)
		if err == nil {
			if _, valid := c.peers.get(peerID); !valid || c.closed { // removed while dialling
				err = fmt.Errorf("mesh dial %s: %w", peerID, ErrUnknownPeer)
			} else {
				c.conns[peerID] = pc
			}
		}
		c.mu.Unlock()
		if err != nil {
			if pc != nil {
				_ = pc.cc.Close()
			}
			return nil, err
		}
		go c.watch(peerID, pc)
		return pc, nil
	}
}

// watch forgets a connection once it is closed (its pings unanswered, the
// peer gone), so the next stream dials anew.
func (c *Client) watch(peerID string, pc *peerConn) {
	<-pc.dead
	if c.drop(peerID, pc) {
		c.log.Info("mesh connection to peer lost", zap.String("peer", peerID), zap.String("remote", pc.remote.String()))
	}
}

// drop forgets pc if it is still the peer's connection, and closes it.
func (c *Client) drop(peerID string, pc *peerConn) bool {
	c.mu.Lock()
	current := c.conns[peerID] == pc
	if current {
		delete(c.conns, peerID)
	}
	c.mu.Unlock()
	_ = pc.cc.Close()
	return current
}

// dial connects to the peer: its addresses in order, each with the TCP dial
// and TLS handshake bounded, the peer's certificate checked to name it.
func (c *Client) dial(ctx context.Context, peerID string) (*peerConn, error) {
	peer, ok := c.peers.get(peerID)
	if !ok {
		return nil, fmt.Errorf("mesh dial %s: %w", peerID, ErrUnknownPeer)
	}
	if len(peer.Addresses) == 0 {
		return nil, fmt.Errorf("mesh dial %s: %w: it advertises no address", peerID, ErrPeerUnreachable)
	}
	var errs []error
	for _, addr := range peer.Addresses {
		pc, err := c.dialAddr(ctx, peerID, addr)
		if err == nil {
			return pc, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("mesh dial %s: %w: %w", peerID, ErrPeerUnreachable, errors.Join(errs...))
}

// dialKey carries a dial's peer and its result through NewClientConn to
// dialTLS.
type dialKey struct{}

// dialing is what dialTLS needs to know (the peer) and what it tells (the
// connection's addresses).
type dialing struct {
	peerID        string
	local, remote net.Addr
}

func (c *Client) dialAddr(ctx context.Context, peerID, addr string) (*peerConn, error) {
	d := &dialing{peerID: peerID}
	cc, err := c.h2.NewClientConn(context.WithValue(ctx, dialKey{}, d), "https", addr)
	if err != nil {
		return nil, err
	}
	pc := &peerConn{cc: cc, local: d.local, remote: d.remote, dead: make(chan struct{})}
	var once sync.Once
	// Called when the connection closes (a lost ping, a broken read, a
	// Close), among other changes.
	cc.SetStateHook(func(cc *http.ClientConn) {
		if cc.Err() != nil {
			once.Do(func() { close(pc.dead) })
		}
	})
	return pc, nil
}

// dialTLS is the transport's dial: TCP with DialTimeout, then the TLS
// handshake with HandshakeTimeout, the peer's certificate checked to be a
// host certificate of the host dialled, and HTTP/2 negotiated.
func (c *Client) dialTLS(ctx context.Context, network, addr string) (net.Conn, error) {
	d, ok := ctx.Value(dialKey{}).(*dialing)
	if !ok {
		return nil, errors.New("mesh: a dial for no peer") // only dialAddr dials
	}
	nd := net.Dialer{Timeout: c.cfg.DialTimeout}
	raw, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{nextProtoH2},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return c.creds.Certificate.HostCertificate()
		},
		// Host certificates name no DNS name: the standard check is
		// replaced by one against the host CA and the expected host ID.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := verifyPeer(cs.PeerCertificates, c.creds.HostCA, x509.ExtKeyUsageServerAuth, &c.peers)
			if err == nil && id != d.peerID {
				err = fmt.Errorf("mesh: %s answered as host %s", addr, id)
			}
			return err
		},
	}
	tc := tls.Client(newBufferedConn(raw), cfg)
	hctx, cancel := context.WithTimeout(ctx, c.cfg.HandshakeTimeout)
	err = tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		_ = raw.Close()
		return nil, err
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != nextProtoH2 {
		_ = raw.Close()
		return nil, fmt.Errorf("the peer speaks %q, not HTTP/2", p)
	}
	d.local, d.remote = raw.LocalAddr(), raw.RemoteAddr()
	return tc, nil
}
