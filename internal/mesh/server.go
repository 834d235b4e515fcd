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
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/http2"

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
// read into: larger, since each read becomes one HTTP/2 DATA frame, sent in
// one system call (see batchedConn); fewer, larger frames cost less CPU.
const (
	copyBuffer         = 32 << 10
	workloadReadBuffer = 64 << 10
)

// Server serves this host's mesh port. Start listens, Close stops it.
type Server struct {
	cfg    Config
	creds  Credentials
	dialer Dialer
	log    *zap.Logger
	h2     *http2.Server
	tls    *tls.Config
	mux    *http.ServeMux
	peers  peerSet

	mu sync.Mutex // guards ln, conns and closed
	ln net.Listener
	// conns are the open connections by peer host ID, closed when the host
	// leaves the valid set.
	conns  map[string]map[net.Conn]struct{}
	closed bool

	ctx    context.Context // ends at Close: every connection's and stream's
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop and the connections
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
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	s := &Server{cfg: cfg, creds: creds, dialer: dialer, log: log.With(zap.String("component", "mesh-server")),
		conns: map[string]map[net.Conn]struct{}{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.h2 = &http2.Server{
		MaxConcurrentStreams:         cfg.MaxConcurrentStreams,
		MaxReadFrameSize:             256 << 10,
		MaxUploadBufferPerConnection: 16 << 20,
		MaxUploadBufferPerStream:     1 << 20,
		ReadIdleTimeout:              cfg.KeepAlive,
		PingTimeout:                  cfg.KeepAliveTimeout,
	}
	s.tls = &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{http2.NextProtoTLS},
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
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("POST "+streamPath+"{namespace}/{project}/{egg}", s.stream)
	return s, nil
}

// SetPeers installs the valid host set (from the latest desired state) and
// closes at once every open connection of a host that left it: its streams
// end.
func (s *Server) SetPeers(peers []contract.Peer) {
	gone := s.peers.replace(peers)
	if len(gone) == 0 {
		return
	}
	s.mu.Lock()
	var closing []net.Conn
	for _, id := range gone {
		for c := range s.conns[id] {
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
	s.wg.Add(1)
	go s.acceptLoop(ln)
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
	for _, cs := range s.conns {
		for c := range cs {
			_ = c.Close()
		}
	}
	s.mu.Unlock()
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

// serveConn authenticates one connection and serves its streams until it
// ends, is closed by SetPeers or by Close.
func (s *Server) serveConn(raw net.Conn) {
	defer s.wg.Done()
	defer raw.Close()
	bc := newBatchedConn(raw)
	tc := tls.Server(bc, s.tls)
	hctx, cancel := context.WithTimeout(s.ctx, s.cfg.HandshakeTimeout)
	err := tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		// Nothing is answered to a caller without a valid host certificate.
		s.log.Debug("mesh handshake refused", zap.String("remote", raw.RemoteAddr().String()), zap.Error(err))
		return
	}
	peer, err := verifyPeer(tc.ConnectionState().PeerCertificates, s.creds.HostCA, x509.ExtKeyUsageClientAuth, &s.peers)
	if err != nil || !s.track(peer, tc) { // removed between the handshake and now, or closing
		return
	}
	defer s.untrack(peer, tc)
	ctx := context.WithValue(s.ctx, peerKey{}, peer)
	s.h2.ServeConn(&batchedTLS{Conn: tc, raw: bc}, &http2.ServeConnOpts{Context: ctx, Handler: s.mux, BaseConfig: &http.Server{}})
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
	if s.conns[peer] == nil {
		s.conns[peer] = map[net.Conn]struct{}{}
	}
	s.conns[peer][c] = struct{}{}
	return true
}

func (s *Server) untrack(peer string, c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns[peer], c)
	if len(s.conns[peer]) == 0 {
		delete(s.conns, peer)
	}
}

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
	if !s.authorized(peer, wl) {
		s.log.Warn("mesh stream refused: the peer's desired state does not reach the workload",
			zap.String("peer", peer), zap.String("workload", wl.ID()))
		http.Error(w, fmt.Sprintf("host %s may not reach %s", peer, wl.ID()), http.StatusForbidden)
		return
	}
	dctx, cancel := context.WithTimeout(r.Context(), s.cfg.DialWorkloadTimeout)
	backend, err := s.dialer.DialWorkload(dctx, wl)
	cancel()
	if err != nil {
		http.Error(w, fmt.Sprintf("%s: no healthy replica here: %v", wl.ID(), err), http.StatusServiceUnavailable)
		return
	}
	defer backend.Close()
	stop := context.AfterFunc(r.Context(), func() { _ = backend.Close() }) // the stream or its connection ended
	defer stop()

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

// authorized reports whether the peer's entry in the valid host set reaches
// the workload.
func (s *Server) authorized(peer string, w Workload) bool {
	p, ok := s.peers.get(peer)
	return ok && slices.Contains(p.Reaches, w.ID())
}
