package ingress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Peers is the mesh as the ingress needs it: streams to an egg's replicas on
// another host, and whether the connection to a host is known to be alive.
// *mesh.Client is one.
type Peers interface {
	// DialStream opens a stream to the egg (its workload ID) on the host:
	// an HTTP stream when port is zero, else a TCP stream to that port of
	// one of the host's healthy replicas. It fails when the host cannot be
	// reached or has no healthy replica of the egg.
	DialStream(ctx context.Context, hostID, workloadID string, port int) (net.Conn, error)
	// Alive reports whether a live connection to the host is open: false
	// once its keep-alives went unanswered, and before any stream to it.
	Alive(hostID string) bool
}

// noBackendHeader marks a 503 of a peer's ingress that has no healthy
// replica for an HTTP stream's request: the calling ingress then takes the
// peer out for EjectFor and sends the request elsewhere if it can, as for a
// failed dial, instead of passing the 503 on.
const noBackendHeader = "X-Hatch-Ingress-No-Backend"

// remoteAddr is the URL host of requests to a remote backend. Each backend
// has a transport of its own whose dial ignores it; it only has to parse.
const remoteAddr = "mesh.invalid:80"

// remoteHost is what a remote backend knows of the host it stands for.
type remoteHost struct {
	host  string
	peers Peers
	// connected is set by a successful dial and cleared when the mesh says
	// the connection died: then (and only then) Alive's false means dead,
	// not "never dialled".
	connected atomic.Bool
	// onDead ejects the backend whose connection died.
	onDead func(*backend)
}

// newRemoteBackend returns the backend standing for e's replicas on host,
// reached through the mesh. Its transport's connections are HTTP streams;
// the peer's ingress proxies each request on them to one of its own
// replicas.
func newRemoteBackend(host string, e *egg) *backend {
	r := &remoteHost{host: host, peers: e.up.peers}
	b := &backend{id: "peer/" + host, addr: remoteAddr, egg: e, remote: r,
		idle: make(chan struct{}), gone: make(chan struct{}), healthy: true}
	r.onDead = func(b *backend) {
		b.eject(errors.New("mesh connection lost (keep-alives unanswered)"))
		b.transport.CloseIdleConnections()
	}
	b.transport = newTransport(func(ctx context.Context) (net.Conn, error) {
		c, err := b.dialRemote(ctx, 0)
		if err != nil {
			return nil, &dialError{err}
		}
		return c, nil
	})
	// Idle streams hold a goroutine on both hosts: let them go sooner than
	// local keep-alive connections.
	b.transport.IdleConnTimeout = 30 * time.Second
	return b
}

// dialRemote opens a stream for b (a remote backend) to port (zero: HTTP),
// bounded by Config.RemoteDialTimeout. A failure that was neither the
// caller giving up nor the ingress closing ejects b.
func (b *backend) dialRemote(ctx context.Context, port int) (net.Conn, error) {
	up := b.egg.up
	dctx, cancel := context.WithTimeout(ctx, up.remoteDialTimeout)
	defer cancel()
	c, err := b.remote.peers.DialStream(dctx, b.remote.host, b.egg.name, port)
	if err != nil {
		if ctx.Err() == nil && up.life.Err() == nil {
			b.eject(err)
		}
		return nil, err
	}
	b.remote.connected.Store(true)
	return c, nil
}

// setRemotes applies the egg's list of other hosts running it, keeping the
// backends of hosts still listed (their ejection and kept-alive streams
// carry on). The caller holds Ingress.mu.
func (e *egg) setRemotes(hosts []string) {
	old := make(map[string]*backend, len(e.remotes))
	for _, b := range e.remotes {
		old[b.remote.host] = b
	}
	e.remotes = make([]*backend, 0, len(hosts))
	for _, h := range hosts {
		b := old[h]
		delete(old, h)
		if b == nil {
			b = newRemoteBackend(h, e)
		}
		e.remotes = append(e.remotes, b)
	}
	for _, b := range old {
		b.transport.CloseIdleConnections() // requests in flight finish
	}
	pool := append([]*backend(nil), e.remotes...)
	e.remotePool.Store(&pool)
}

// newLocalProxy returns the proxy of one egg for the requests of HTTP
// streams from peers: local backends only, and the X-Forwarded-* headers
// the calling ingress set (it is the edge, authenticated by the mesh) kept.
func newLocalProxy(e *egg) http.Handler {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			// The calling ingress's upstream timeout, for the transport;
			// not for the container.
			if d, err := time.ParseDuration(pr.In.Header.Get(upstreamTimeoutHeader)); err == nil && d > 0 {
				pr.Out = pr.Out.WithContext(context.WithValue(pr.Out.Context(), upstreamTimeoutKey{}, d))
			}
			pr.Out.Header.Del(upstreamTimeoutHeader)
			for _, h := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
				if v, ok := pr.In.Header[h]; ok {
					pr.Out.Header[h] = v
				}
			}
		},
		Transport: &eggTransport{e: e, localOnly: true},
		ModifyResponse: func(resp *http.Response) error {
			e.m.countStatus(resp.StatusCode)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, errNoBackend) {
				w.Header().Set(noBackendHeader, "1")
			}
			e.proxyError(w, r, err)
		},
		ErrorLog:   warnLog(e.log.With(zap.Bool("from_peer", true))),
		BufferPool: copyBuffers,
	}
}

// ErrNotServedToPeers is DialLocal's refusal of a stream to a port (or, for
// HTTP, an egg without routes) that no peer's ingress or relay streams to:
// only a host acting beyond what was placed on it asks for one.
var ErrNotServedToPeers = errors.New("not served to peers")

// peerPorts are the ports of an egg a TCP stream from a peer may reach:
// the egg's own port (other hosts' relays), and the targets of its
// published ports and relay sockets; sorted, each once.
func peerPorts(spec Egg) []int {
	var ports []int
	if spec.Port > 0 {
		ports = append(ports, spec.Port)
	}
	for _, p := range spec.Ports {
		if p.Target > 0 {
			ports = append(ports, p.Target)
		}
	}
	for _, so := range spec.Sockets {
		ports = append(ports, so.Target)
	}
	slices.Sort(ports)
	return slices.Compact(ports)
}

// DialLocal is the ingress's entry for streams from peers (the mesh
// server's Dialer): a connection to the egg (its workload ID) served by this
// host's replicas only, never passed on to a third host. With port zero it
// is an HTTP connection whose every request goes to a healthy, undrained
// local replica, picked per request, and must be one this host's routes
// send to the egg (serveStream); otherwise a TCP connection to port of one
// local replica, tracked like a published port's (Gone cuts it, Drain
// leaves it to the container's stop). Whatever the mesh allowed, it refuses
// (ErrNotServedToPeers) an HTTP stream to an egg without routes and a port
// that is not the egg's own nor a published port's or relay's target: a
// replica's other ports (an admin or debug port) are never reached from
// another host. It fails, wrapping a "no healthy backend" error, when the
// egg has no local replica that can take it, except while a stateful egg's
// hold window is open: then an HTTP stream is accepted and its requests are
// held, and a TCP stream waits for a replica as long as ctx allows.
func (in *Ingress) DialLocal(ctx context.Context, workloadID string, port int) (net.Conn, error) {
	in.mu.Lock()
	e, lis, closed := in.eggs[workloadID], in.srv.streamLn, in.closed
	var served bool
	if e != nil {
		served = (port == 0 && e.routed) || (port > 0 && slices.Contains(e.peerPorts, port))
	}
	in.mu.Unlock()
	switch {
	case closed:
		return nil, ErrClosed
	case e == nil:
		return nil, fmt.Errorf("egg %q is not in the table: %w", workloadID, errNoBackend)
	case port < 0 || port > 65535:
		return nil, fmt.Errorf("egg %q: port %d out of range", workloadID, port)
	case !served && port == 0:
		return nil, fmt.Errorf("egg %q has no route: an HTTP stream to it is %w", workloadID, ErrNotServedToPeers)
	case !served:
		return nil, fmt.Errorf("egg %q: port %d is %w (neither its port nor a published or relayed one)", workloadID, port, ErrNotServedToPeers)
	case port == 0:
		if lis == nil {
			return nil, errors.New("ingress not started")
		}
		// As acquire's last resort would: a replica out after one failed
		// dial still counts, so that peers do not eject this host for it.
		// A stateful egg between replicas holds the stream's requests.
		if leastLoaded(*e.pool.Load(), 0, nil, unixNano, true) == nil && !e.holding() {
			return nil, fmt.Errorf("egg %q: %w here", workloadID, errNoBackend)
		}
		mine, theirs := net.Pipe()
		if err := lis.push(ctx, &streamConn{Conn: theirs, egg: e}); err != nil {
			_ = mine.Close()
			return nil, err
		}
		return mine, nil
	}
	var failed *backend
	for range 2 {
		b := e.acquire(failed, unixNano, true)
		if b == nil {
			// A stateful egg between replicas: held as long as the
			// peer waits for the stream, within the hold window.
			if b, _ = e.await(ctx, failed, unixNano, true); b == nil {
				break
			}
		}
		up, err := b.dialTCP(ctx, port)
		if err != nil {
			failed = b
			b.release()
			continue
		}
		c := &trackedConn{Conn: up, b: b, tracker: in.up.conns}
		in.up.conns.add(c, b)
		if b.isGone() || in.up.life.Err() != nil {
			_ = c.Close() // Gone or Close ran while we dialled: they could not see it
			break
		}
		e.m.tcpConns.Inc()
		return c, nil
	}
	e.m.tcpRejected.Inc()
	return nil, fmt.Errorf("egg %q: %w here", workloadID, errNoBackend)
}

// IsNoBackend reports whether err says the egg has no healthy backend
// (here, for DialLocal), as opposed to a failure of the ingress itself.
func IsNoBackend(err error) bool { return errors.Is(err, errNoBackend) }

// trackedConn is a TCP stream from a peer to a local backend: it holds a
// slot on the backend until closed, and sits in the tracker so that Gone
// and Close reach it.
type trackedConn struct {
	net.Conn
	b       *backend
	tracker *tracker
	once    sync.Once
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.tracker.remove(c)
		c.b.release()
	})
	return err
}

// CloseWrite passes the peer's half-close on to the backend.
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// finish lets what the backend sent before it went reach the peer until
// deadline, as a published port's pipe does.
func (c *trackedConn) finish(deadline time.Time) {
	_ = c.Conn.SetDeadline(deadline) // a closed conn refuses it: then it has ended anyway
}

// streamConn is an HTTP stream from a peer, as the stream server accepts
// it: the egg it was opened to travels with it.
type streamConn struct {
	net.Conn
	egg *egg
}

type streamEggKey struct{}

// serveStream serves a request of an HTTP stream from a peer: only one this
// host's routes send to the stream's egg (its host and path prefix), so a
// peer cannot reach a path of the egg that no route exposes; any other is
// refused 403.
func (in *Ingress) serveStream(w http.ResponseWriter, r *http.Request) {
	e, _ := r.Context().Value(streamEggKey{}).(*egg)
	if e == nil { // cannot happen: every connection of the stream server is a streamConn
		http.Error(w, "hatch ingress: stream without an egg", http.StatusInternalServerError)
		return
	}
	if route := in.routes.Load().match(r.Host, r.URL.Path); route == nil || route.egg != e {
		in.m.unrouted.Inc()
		in.log.Warn("request of a peer's stream refused: no route of the egg serves it",
			zap.String("egg", e.name), zap.String("host", r.Host), zap.String("path", r.URL.Path))
		http.Error(w, fmt.Sprintf("hatch ingress: egg %q serves no route for %q", e.name, r.Host+r.URL.Path), http.StatusForbidden)
		return
	}
	start := time.Now()
	defer func() { e.m.duration.Observe(time.Since(start).Seconds()) }()
	e.localProxy.ServeHTTP(w, r)
}

// newStreamServer returns the HTTP server of the streams from peers, and
// the set of its connections that have not begun a request yet.
func newStreamServer(handler http.Handler, ln *streamListener, log *zap.Logger) (*server, *unstarted) {
	fresh := &unstarted{conns: map[net.Conn]struct{}{}}
	return &server{Server: &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          warnLog(log),
		ConnState:         fresh.track,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if sc, ok := c.(*streamConn); ok {
				return context.WithValue(ctx, streamEggKey{}, sc.egg)
			}
			return ctx
		},
	}, ln: ln}, fresh
}

// unstarted holds the stream server's connections that have not begun a
// request: a peer's transport dials a stream it may never use. Shutdown
// waits up to five seconds for such a connection (net/http cannot tell it
// from one whose request is on its way), so Close closes them first.
type unstarted struct {
	mu    sync.Mutex // guards conns
	conns map[net.Conn]struct{}
}

func (u *unstarted) track(c net.Conn, st http.ConnState) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if st == http.StateNew {
		u.conns[c] = struct{}{}
	} else {
		delete(u.conns, c)
	}
}

func (u *unstarted) closeAll() {
	u.mu.Lock()
	defer u.mu.Unlock()
	for c := range u.conns {
		_ = c.Close() // nothing was asked on it yet
	}
}

// streamListener hands the HTTP streams DialLocal makes to the stream
// server, as a net.Listener.
type streamListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newStreamListener() *streamListener {
	return &streamListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *streamListener) push(ctx context.Context, c net.Conn) error {
	select {
	case l.conns <- c:
		return nil
	case <-l.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *streamListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *streamListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *streamListener) Addr() net.Addr { return streamAddr{} }

type streamAddr struct{}

func (streamAddr) Network() string { return "mesh" }
func (streamAddr) String() string  { return "mesh-streams" }
