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
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/contract"
)

// Dialer connects to a healthy replica of a workload on this host. Its
// error answers the stream 503.
type Dialer interface {
	DialWorkload(ctx context.Context, w Workload) (net.Conn, error)
}

// streamPath is the prefix of a stream's path: /v1/stream/<ns>/<project>/<egg>,
// with ?port=<n> for a TCP stream (none: an HTTP stream; see Workload.Port).
const streamPath = "/v1/stream/"

// copyBuffer is the size of the buffers a stream's bytes are copied
// through, and workloadReadBuffer that of the one the workload's answer is
// read into: larger, since each read becomes one HTTP/2 DATA frame; fewer,
// larger frames cost less CPU.
const (
	copyBuffer         = 32 << 10
	workloadReadBuffer = 64 << 10
)

// nextProtoH2 is HTTP/2's ALPN name, the only protocol of the mesh, and
// maxFrameSize the largest frame either end reads.
const (
	nextProtoH2  = "h2"
	maxFrameSize = 256 << 10
)

// Server serves this host's mesh port. Start listens, Close stops it.
type Server struct {
	cfg    Config
	creds  Credentials
	dialer Dialer
	log    *zap.Logger
	tls    *tls.Config
	peers  peerSet
	// h2 serves the streams of the connections serveConn authenticated and
	// handed over through authed.
	h2     *http.Server
	authed *handoff

	mu sync.Mutex // guards ln, conns, streams and closed
	ln net.Listener
	// conns are the open connections and their peer's host ID, closed when
	// the host leaves the valid set.
	conns map[net.Conn]string
	// streams are the open streams, each ended when the valid set no
	// longer lets its peer open it (its workload or port left the peer's
	// reach).
	streams map[*openStream]struct{}
	closed  bool

	ctx    context.Context // ends at Close: every connection's and stream's
	cancel context.CancelFunc
	// wg counts the accept loop, h2's Serve, and each connection from its
	// accept until h2 is done with it (or it is refused).
	wg sync.WaitGroup
}

// NewServer returns a server for creds, dialling workloads with dialer. It
// accepts nobody until SetPeers gives it the valid host set.
func NewServer(cfg Config, creds Credentials, dialer Dialer) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := creds.validate(); err != nil {
		return nil, err
	}
	if dialer == nil {
		return nil, errors.New("mesh: the server needs a workload dialer")
	}
	s := &Server{cfg: cfg, creds: creds, dialer: dialer, log: cfg.Logger.With(zap.String("component", "mesh-server")),
		conns: map[net.Conn]string{}, streams: map[*openStream]struct{}{}}
	// What net/http has to say (a panicking handler, a broken connection)
	// goes to our log.
	errLog, err := zap.NewStdLogAt(s.log, zap.WarnLevel)
	if err != nil {
		return nil, fmt.Errorf("mesh server log: %w", err)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+streamPath+"{namespace}/{project}/{egg}", s.stream)
	var protocols http.Protocols
	protocols.SetHTTP2(true)
	s.h2 = &http.Server{
		Handler:   mux,
		Protocols: &protocols,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:          int(cfg.MaxConcurrentStreams),
			MaxReadFrameSize:              maxFrameSize,
			MaxReceiveBufferPerConnection: 16 << 20,
			MaxReceiveBufferPerStream:     1 << 20,
			SendPingTimeout:               cfg.KeepAlive,
			PingTimeout:                   cfg.KeepAliveTimeout,
		},
		// Streams end when Close is called, and know their peer.
		BaseContext: func(net.Listener) context.Context { return s.ctx },
		ConnContext: s.connContext,
		ConnState:   s.connState,
		ErrorLog:    errLog,
	}
	s.tls = &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{nextProtoH2},
		ClientAuth: tls.RequireAndVerifyClientCert,
		ClientCAs:  creds.HostCA,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return creds.Certificate.HostCertificate()
		},
		// On top of the chain check: a host certificate, of a valid host.
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := verifyPeer(cs.PeerCertificates, creds.HostCA, x509.ExtKeyUsageClientAuth, &s.peers)
			return err
		},
	}
	return s, nil
}

// SetPeers installs the valid host set (from the latest desired state),
// closes at once every open connection of a host that left it (its streams
// end), and resets every open stream its peer may no longer open: its
// workload or port left the peer's reach.
func (s *Server) SetPeers(peers []contract.Peer) {
	gone := s.peers.replace(peers)
	s.closeConnsOf(gone)
	s.endStreamsOutOfReach()
}

// closeConnsOf closes the connections of the hosts gone.
func (s *Server) closeConnsOf(gone []string) {
	if len(gone) == 0 {
		return
	}
	s.mu.Lock()
	var closing []net.Conn
	for c, peer := range s.conns {
		if slices.Contains(gone, peer) {
			closing = append(closing, c)
		}
	}
	s.mu.Unlock()
	for _, c := range closing {
		_ = c.Close()
	}
	if len(closing) > 0 {
		s.log.Info("closed the mesh connections of removed hosts", zap.Strings("hosts", gone), zap.Int("connections", len(closing)))
	}
}

// endStreamsOutOfReach ends the open streams the current valid set no
// longer allows. A stream registers before it is authorized, and the set is
// replaced before this scan, so a stream authorized against the old set is
// always seen here.
func (s *Server) endStreamsOutOfReach() {
	s.mu.Lock()
	var ending []*openStream
	for st := range s.streams {
		if !s.authorized(st.peer, st.w) {
			ending = append(ending, st)
		}
	}
	s.mu.Unlock()
	for _, st := range ending {
		st.revoked.Store(true)
		st.cancel()
		s.log.Info("mesh stream ended: its workload or port left the peer's reach",
			zap.String("peer", st.peer), zap.String("workload", st.w.ID()), zap.Int("port", st.w.Port))
	}
}

// openStream is a stream being served, as SetPeers sees it.
type openStream struct {
	peer string
	w    Workload
	// cancel ends the stream: its workload's connection is closed.
	cancel context.CancelFunc
	// revoked says the stream was ended by SetPeers: it is reset, not
	// ended as if the workload had finished.
	revoked atomic.Bool
}

// register adds a stream to those SetPeers checks; the returned function
// removes it.
func (s *Server) register(st *openStream) (unregister func()) {
	s.mu.Lock()
	s.streams[st] = struct{}{}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.streams, st)
		s.mu.Unlock()
	}
}

// Start listens on the configured address and serves in the background.
func (s *Server) Start() error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("mesh listen %s: %w", s.cfg.Addr, err)
	}
	return s.Serve(ln)
}

// Serve serves on ln in the background (tests give a listener on port 0).
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.ln != nil {
		_ = ln.Close()
		return errors.New("mesh: server already started or closed")
	}
	s.ln = ln
	s.authed = &handoff{addr: ln.Addr(), conns: make(chan net.Conn), done: make(chan struct{})}
	s.wg.Add(2)
	go s.acceptLoop(ln)
	go func() {
		defer s.wg.Done()
		_ = s.h2.Serve(s.authed) // returns once Close closes authed
	}()
	return nil
}

// Addr is the address the server listens on; nil before Start.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Close stops listening, closes every connection (their streams end) and
// waits for them, or for ctx.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	if s.ln != nil {
		_ = s.ln.Close()
	}
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	_ = s.h2.Close() // closes authed, and the connections h2 holds
	s.cancel()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("mesh server close: %w", ctx.Err())
	}
}

func (s *Server) acceptLoop(ln net.Listener) {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: wait a little, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("mesh accept failed", zap.Error(err), zap.Duration("retry_in", backoff))
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		s.wg.Add(1)
		go s.serveConn(c)
	}
}

type peerKey struct{}

// serveConn authenticates one connection and hands it over to h2, which
// serves its streams until it ends, is closed by SetPeers or by Close.
func (s *Server) serveConn(raw net.Conn) {
	handedOver := false
	defer func() {
		if !handedOver {
			_ = raw.Close()
			s.wg.Done()
		}
	}()
	tc := tls.Server(newBufferedConn(raw), s.tls)
	hctx, cancel := context.WithTimeout(s.ctx, s.cfg.HandshakeTimeout)
	err := tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		// Nothing is answered to a caller without a valid host certificate.
		s.log.Debug("mesh handshake refused", zap.String("remote", raw.RemoteAddr().String()), zap.Error(err))
		return
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != nextProtoH2 {
		s.log.Debug("mesh connection refused: not HTTP/2", zap.String("remote", raw.RemoteAddr().String()), zap.String("protocol", p))
		return
	}
	peer, err := verifyPeer(tc.ConnectionState().PeerCertificates, s.creds.HostCA, x509.ExtKeyUsageClientAuth, &s.peers)
	if err != nil || !s.track(peer, tc) { // removed between the handshake and now, or closing
		return
	}
	select {
	case s.authed.conns <- tc:
		handedOver = true // connState untracks it and counts it done
	case <-s.authed.done:
		s.untrack(tc)
	}
}

// connContext gives the streams of a connection its peer's host ID.
func (s *Server) connContext(ctx context.Context, c net.Conn) context.Context {
	s.mu.Lock()
	peer := s.conns[c]
	s.mu.Unlock()
	return context.WithValue(ctx, peerKey{}, peer)
}

// connState forgets a connection h2 is done with.
func (s *Server) connState(c net.Conn, state http.ConnState) {
	if state == http.StateClosed || state == http.StateHijacked {
		s.untrack(c)
		s.wg.Done()
	}
}

// track registers a connection under its peer, unless the peer has left the
// valid set since its handshake (checked under the lock SetPeers's closing
// takes, so no connection of a removed host is left open) or the server is
// closing.
func (s *Server) track(peer string, c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.peers.get(peer); !ok || s.closed {
		return false
	}
	s.conns[c] = peer
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
}

// handoff is the listener h2 serves: the connections serveConn has
// authenticated and tracked, already past their handshake.
type handoff struct {
	addr  net.Addr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{} // closed by Close
}

func (h *handoff) Accept() (net.Conn, error) {
	select {
	case c := <-h.conns:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

func (h *handoff) Close() error {
	h.once.Do(func() { close(h.done) })
	return nil
}

func (h *handoff) Addr() net.Addr { return h.addr }

// stream serves one stream: authorization, the dial of a local replica, then
// bytes both ways until the workload's side ends (the stream then ends) or
// the caller's does.
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	peer, _ := r.Context().Value(peerKey{}).(string)
	wl := Workload{Namespace: r.PathValue("namespace"), Project: r.PathValue("project"), Egg: r.PathValue("egg")}
	if p := r.URL.Query().Get("port"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			http.Error(w, fmt.Sprintf("port %q: want a port number", p), http.StatusBadRequest)
			return
		}
		wl.Port = n
	}
	if err := wl.validate(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	st := &openStream{peer: peer, w: wl, cancel: cancel}
	defer s.register(st)() // before the check: see endStreamsOutOfReach
	if !s.authorized(peer, wl) {
		s.log.Warn("mesh stream refused: the peer's desired state does not stream to the workload on this port",
			zap.String("peer", peer), zap.String("workload", wl.ID()), zap.Int("port", wl.Port))
		http.Error(w, fmt.Sprintf("host %s may not reach %s on %s", peer, wl.ID(), wl.portName()), http.StatusForbidden)
		return
	}
	dctx, dcancel := context.WithTimeout(ctx, s.cfg.DialWorkloadTimeout)
	backend, err := s.dialer.DialWorkload(dctx, wl)
	dcancel()
	if err != nil {
		http.Error(w, fmt.Sprintf("%s: no healthy replica here: %v", wl.ID(), err), http.StatusServiceUnavailable)
		return
	}
	defer backend.Close()
	// The stream or its connection ended, or SetPeers ended the stream.
	stop := context.AfterFunc(ctx, func() { _ = backend.Close() })
	defer stop()
	defer func() {
		if st.revoked.Load() {
			// Reset the stream (RST_STREAM), so the caller sees it cut
			// rather than a workload that finished its output.
			panic(http.ErrAbortHandler)
		}
	}()

	rc := http.NewResponseController(w)
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	go func() {
		// Caller → workload; the caller's half-close becomes the workload's.
		_, err := io.CopyBuffer(backend, r.Body, make([]byte, copyBuffer))
		if err == nil {
			if cw, ok := backend.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
				return
			}
		}
		_ = backend.Close()
	}()
	// Workload → caller, flushed as it comes. When the workload's side
	// ends, the handler returns and the stream ends both ways: a handler
	// cannot end its response and still read.
	buf := make([]byte, workloadReadBuffer)
	for {
		n, err := backend.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// authorized reports whether the peer's entry in the valid host set lets it
// open a stream to the workload on the stream's port (contract.Peer.MayOpen).
func (s *Server) authorized(peer string, w Workload) bool {
	p, ok := s.peers.get(peer)
	return ok && p.MayOpen(w.ID(), w.Port)
}
