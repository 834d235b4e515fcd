package ingress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// backend is one container as the ingress knows it, or (remote) the egg's
// replicas on another host. Its identity (container, address, egg) never
// changes: a container that comes back with another address becomes a new
// backend. It owns its lifecycle, as kamal-proxy's Target drains itself:
// it ejects itself when a dial fails, drains (startDrain, then drain) and
// ends its connections once gone (markGone, then endConnections); the
// Ingress only finds it by container ID and rebuilds its egg's pool.
type backend struct {
	id   string
	addr string // "ip:port" for HTTP
	ip   string // for published ports with their own target port
	egg  *egg
	// remote is set for a backend that stands for the egg's replicas on
	// another host, reached through the mesh; nil for a local container.
	remote *remoteHost
	// transport holds this backend's keep-alive connections only, so that
	// draining it can close exactly those.
	transport *http.Transport

	// inflight counts requests and TCP connections reserved on the backend; it
	// is both the load that picks and what Drain waits on.
	inflight atomic.Int64
	// draining is set once, by Drain or Gone, and never cleared: a container
	// that comes back after it died is a new backend.
	draining atomic.Bool
	// ejectedUntil is the UnixNano time until which a failed dial keeps the
	// backend out of the pool; zero means never ejected.
	ejectedUntil atomic.Int64
	// ejectedOnGuess tells that the last ejection may be overruled by
	// acquire's last resort: a failed dial (a replica slow to accept is
	// enough) or a peer's "no healthy replica" (its replica may be back).
	// A request held past its upstream timeout (a frozen replica) is not.
	ejectedOnGuess atomic.Bool

	idleOnce sync.Once
	idle     chan struct{} // closed once inflight reaches zero while draining
	goneOnce sync.Once
	gone     chan struct{} // closed by Gone

	// Guarded by Ingress.mu.
	healthy      bool
	drainTimeout time.Duration
}

// dialError marks a failed connection attempt: nothing reached the backend,
// so the request may go to another one whatever its method and body.
type dialError struct{ err error }

func (e *dialError) Error() string { return "dial backend: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// upstream is what an Ingress's eggs and backends share to reach their
// containers and peers: the dial, ejection and timeout settings of its
// Config, the mesh, the tracker of connections that outlive a request, and
// the ingress's life. New makes one; it never changes.
type upstream struct {
	// life is cancelled by Close: it bounds dials for published ports, and
	// a dial it cut says nothing of the backend.
	life              context.Context
	conns             *tracker
	peers             Peers
	dialTimeout       time.Duration // Config.DialTimeout
	remoteDialTimeout time.Duration // Config.RemoteDialTimeout
	ejectFor          time.Duration // Config.EjectFor
	upstreamTimeout   time.Duration // Config.UpstreamTimeout
}

// unixNano is the clock of ejections.
func unixNano() int64 { return time.Now().UnixNano() }

// newBackend returns a local backend of e with its own transport, whose
// failed dials (not merely cancelled) eject it.
func newBackend(id, addr string, e *egg) *backend {
	ip, _, _ := net.SplitHostPort(addr) // validated by Update
	b := &backend{id: id, addr: addr, ip: ip, egg: e, idle: make(chan struct{}), gone: make(chan struct{})}
	dialer := &net.Dialer{Timeout: e.up.dialTimeout, KeepAlive: 30 * time.Second}
	b.transport = newTransport(func(ctx context.Context) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, "tcp", b.addr)
		if err != nil {
			if ctx.Err() == nil {
				b.eject(err)
			}
			return nil, &dialError{err}
		}
		return c, nil
	})
	return b
}

// newTransport returns a backend's transport, its connections made by dial.
func newTransport(dial func(ctx context.Context) (net.Conn, error)) *http.Transport {
	return &http.Transport{
		Proxy:                 nil, // never the environment's HTTP_PROXY: backends are ours
		DialContext:           func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		// The client's Accept-Encoding goes through as it is; the transport
		// must not add gzip and decompress behind the client's back.
		DisableCompression: true,
	}
}

// available reports whether the backend may take new work. now is called
// only for an ejected backend, so the common case reads no clock; a last
// resort overrules an ejection after a failed dial. A remote backend whose
// mesh connection the keep-alives found dead is ejected here, before any
// request waits on a dial to it.
func (b *backend) available(now func() int64, lastResort bool) bool {
	if b.draining.Load() {
		return false
	}
	if u := b.ejectedUntil.Load(); u != 0 && !(lastResort && b.overrulable()) && now() < u {
		return false
	}
	if r := b.remote; r != nil && r.connected.Load() && !r.peers.Alive(r.host) {
		if r.connected.CompareAndSwap(true, false) {
			r.onDead(b)
		}
		return false
	}
	return true
}

// overrulable reports whether a last resort may try the backend although it
// is ejected: the ejection was a guess, and a remote backend's mesh
// connection is alive (a dead peer, or one that left the valid host set,
// would only fail again).
func (b *backend) overrulable() bool {
	if !b.ejectedOnGuess.Load() {
		return false
	}
	return b.remote == nil || b.remote.peers.Alive(b.remote.host)
}

// release gives back a slot taken by acquire and wakes Drain when the last
// one goes.
func (b *backend) release() {
	if b.inflight.Add(-1) == 0 && b.draining.Load() {
		b.idleOnce.Do(func() { close(b.idle) })
	}
}

// releaseHTTP releases a request's slot. A draining backend's keep-alive
// connection returns to the idle pool before the response body reports EOF,
// so closing the idle connections here closes it right after its request.
func (b *backend) releaseHTTP() {
	b.release()
	if b.draining.Load() {
		b.transport.CloseIdleConnections()
	}
}

// startDrain stops new work from reaching the backend. Together with the
// check in acquire it is a Dekker-style handshake: either a concurrent
// acquire sees draining and backs off, or startDrain sees its slot and waits.
func (b *backend) startDrain() {
	b.draining.Store(true)
	if b.inflight.Load() == 0 {
		b.idleOnce.Do(func() { close(b.idle) })
	}
}

// markGone records that the container died: nothing waits for it any more.
func (b *backend) markGone() {
	b.draining.Store(true)
	b.goneOnce.Do(func() { close(b.gone) })
}

func (b *backend) isGone() bool {
	select {
	case <-b.gone:
		return true
	default:
		return false
	}
}

// eject takes the backend out of the pool for Config.EjectFor: its dial
// failed, it sent no response headers within the upstream timeout, or (a
// peer) it has no healthy replica left.
func (b *backend) eject(err error) {
	e := b.egg
	now := unixNano()
	prev := b.ejectedUntil.Swap(now + int64(e.up.ejectFor))
	b.ejectedOnGuess.Store(!errors.Is(err, errUpstreamTimeout))
	e.m.dialFailures.Inc()
	if prev <= now { // log once per ejection, not once per failed request
		where := []zap.Field{zap.String("container", shortID(b.id)), zap.String("addr", b.addr)}
		if b.remote != nil {
			where = []zap.Field{zap.String("peer", b.remote.host)}
		}
		e.log.Warn("backend left the pool", append(where, zap.Duration("for", e.up.ejectFor), zap.Error(err))...)
	}
}

// dialTCP opens a TCP connection to port of the backend (zero: the port of
// its address), through the mesh for a remote one. A failure that was
// neither ctx ending nor the ingress closing ejects it.
func (b *backend) dialTCP(ctx context.Context, port int) (net.Conn, error) {
	if b.remote != nil {
		return b.dialRemote(ctx, port)
	}
	addr := b.addr
	if port != 0 {
		addr = net.JoinHostPort(b.ip, strconv.Itoa(port))
	}
	up := b.egg.up
	d := net.Dialer{Timeout: up.dialTimeout, KeepAlive: 30 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil && ctx.Err() == nil && up.life.Err() == nil {
		b.eject(err)
	}
	return c, err
}

// drain waits, once startDrain has taken the backend out of the pool, until
// its in-flight requests and connections have finished, timeout has passed,
// or it is reported gone; it closes its keep-alive connections before and
// after. What is still open then is left to the container's stop. It fails
// only when ctx ends first.
func (b *backend) drain(ctx context.Context, timeout time.Duration) error {
	log := b.egg.log.With(zap.String("container", shortID(b.id)))
	log.Info("draining backend", zap.Int64("in_flight", b.inflight.Load()), zap.Duration("timeout", timeout))
	b.transport.CloseIdleConnections()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-b.idle:
		log.Info("backend drained")
	case <-b.gone:
		log.Info("backend gone while draining")
	case <-timer.C:
		log.Info("drain timeout passed; what is still open is left to the container's stop",
			zap.Int64("in_flight", b.inflight.Load()))
	case <-ctx.Done():
		return fmt.Errorf("drain %s: %w", shortID(b.id), ctx.Err())
	}
	b.transport.CloseIdleConnections()
	return nil
}

// endConnections ends, once markGone has run, the connections still open
// to the backend: a published port's pass on what the container sent before
// it went and are cut at most goneGrace later; upgraded HTTP connections are
// cut at once.
func (b *backend) endConnections() {
	b.egg.up.conns.finishFor(b, time.Now().Add(goneGrace))
	b.transport.CloseIdleConnections()
}

// goneGrace bounds how long a connection of a container that is gone may
// still pass on what the container sent before it went. Those bytes are
// already on this host, so a second is plenty even on a busy machine, and
// short enough for a client waiting on a dead backend.
const goneGrace = time.Second

var errNoBackend = errors.New("no healthy backend")
