package ingress

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// backend is one container as the ingress knows it. Its identity (container,
// address, egg) never changes: a container that comes back with another
// address becomes a new backend.
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

// newBackend returns a backend with its own transport. onDialFailure is called
// for every failed dial that was not merely cancelled.
func newBackend(id, addr string, e *egg, dialTimeout time.Duration, onDialFailure func(*backend, error)) *backend {
	ip, _, _ := net.SplitHostPort(addr) // validated by Update
	b := &backend{id: id, addr: addr, ip: ip, egg: e, idle: make(chan struct{}), gone: make(chan struct{})}
	dialer := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	b.transport = newTransport(func(ctx context.Context) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, "tcp", b.addr)
		if err != nil {
			if ctx.Err() == nil {
				onDialFailure(b, err)
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

// leastLoaded returns the backend of pool with the fewest in-flight requests
// and connections that is available and is not exclude, or nil. It scans from
// start so that ties rotate.
func leastLoaded(pool []*backend, start uint32, exclude *backend, now func() int64, lastResort bool) *backend {
	n := len(pool)
	if n == 0 {
		return nil
	}
	var best *backend
	var bestLoad int64
	first := int(start % uint32(n))
	for i := range n {
		b := pool[(first+i)%n]
		if b == exclude || !b.available(now, lastResort) {
			continue
		}
		if load := b.inflight.Load(); best == nil || load < bestLoad {
			best, bestLoad = b, load
		}
	}
	return best
}

// egg is one egg's live state. Its name never changes; an egg removed from
// the table and added again later is a new egg.
type egg struct {
	name string
	// pool holds the backends that may be picked: healthy, not drained. It is
	// replaced, never changed, under Ingress.mu, and read without a lock.
	pool atomic.Pointer[[]*backend]
	// remotePool holds one backend per other host running the egg, picked
	// only when pool has none available. Replaced under Ingress.mu.
	remotePool atomic.Pointer[[]*backend]
	next       atomic.Uint32 // rotates the scan start among equally loaded backends
	nextRemote atomic.Uint32 // the same for remotePool
	proxy      http.Handler
	// localProxy serves the requests of HTTP streams from peers: local
	// backends only, so a request never travels on to a third host.
	localProxy http.Handler
	m          *eggMetrics

	log *zap.Logger
	// window is the open hold window (see hold.go), or nil, or one that
	// ended by its bound; replaced under Ingress.mu, read without a lock.
	window atomic.Pointer[holdWindow]
	// waiting counts the requests and connections waiting in a window.
	waiting atomic.Int64

	// Guarded by Ingress.mu.
	backends     []*backend // as listed by the last Update
	remotes      []*backend // as listed by the last Update, one per host
	drainTimeout time.Duration
	// routed says the egg has routes: only then may a peer open an HTTP
	// stream to it. peerPorts are the ports a peer's TCP stream may reach
	// (see peerPorts). Both as the last Update gave them.
	routed    bool
	peerPorts []int
	// holdFor is how long a window holds requests: Config.HoldTimeout for
	// a stateful egg, zero (no holding) for the others.
	holdFor time.Duration
}

// maxAcquireTries bounds acquire's loop: each further try follows a drain
// that has already taken the backend out of the snapshot it reloads.
const maxAcquireTries = 4

// acquire reserves a slot on the least loaded available local backend other
// than exclude; when there is none and localOnly is false, on the least
// loaded available remote one; when there is still none, on an ejected one
// whose ejection may be overruled, in the same order. It returns nil when
// there is none. The caller must release it.
//
// The last resort is there because most ejections are guesses: one failed
// dial (a replica slow to accept on a loaded machine is enough), or a peer
// with no healthy replica at that moment (a stateful replica restarting).
// With nothing else to pick, keeping them out would fail every request for
// EjectFor, also after the replica is back, while trying costs one more
// failed dial or mesh round trip. A frozen replica (past its upstream
// timeout) and a peer whose mesh connection is dead stay out.
func (e *egg) acquire(exclude *backend, now func() int64, localOnly bool) *backend {
	for _, lastResort := range []bool{false, true} {
		if b := acquireFrom(&e.pool, &e.next, exclude, now, lastResort); b != nil {
			return b
		}
		if !localOnly {
			if b := acquireFrom(&e.remotePool, &e.nextRemote, exclude, now, lastResort); b != nil {
				return b
			}
		}
	}
	return nil
}

// acquireFrom reserves a slot on the least loaded available backend of pool
// other than exclude, or returns nil.
func acquireFrom(pool *atomic.Pointer[[]*backend], next *atomic.Uint32, exclude *backend, now func() int64, lastResort bool) *backend {
	for range maxAcquireTries {
		p := pool.Load()
		if p == nil {
			return nil
		}
		b := leastLoaded(*p, next.Add(1), exclude, now, lastResort)
		if b == nil {
			return nil
		}
		b.inflight.Add(1)
		if !b.draining.Load() {
			return b
		}
		b.release()
	}
	return nil
}

// rebuildPool publishes the backends that may be picked. A stateful egg
// whose last backend leaves the pool opens a hold window first, so that a
// request finding the pool empty finds the window too; a backend joining
// ends the window after it is published, so that the released requests
// find it. The caller holds Ingress.mu.
func (e *egg) rebuildPool(fenced map[string]bool) {
	pool := make([]*backend, 0, len(e.backends))
	for _, b := range e.backends {
		if b.healthy && !fenced[b.id] && !b.draining.Load() {
			pool = append(pool, b)
		}
	}
	if prev := e.pool.Load(); len(pool) == 0 && prev != nil && len(*prev) > 0 {
		e.openHold()
	}
	e.pool.Store(&pool)
	switch {
	case len(pool) > 0:
		e.closeHold(true)
	case e.holdFor <= 0:
		e.closeHold(false) // no longer stateful here: nothing is coming back
	}
}

// tracker holds the connections that outlive a request (TCP pipes, upgraded
// HTTP connections) so that Gone or Close can close them, and Close can wait
// for them.
type tracker struct {
	mu    sync.Mutex // guards conns and empty
	conns map[io.Closer]*backend
	empty chan struct{} // closed while conns is empty
}

func newTracker() *tracker {
	t := &tracker{conns: make(map[io.Closer]*backend), empty: make(chan struct{})}
	close(t.empty)
	return t
}

func (t *tracker) add(c io.Closer, b *backend) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.conns) == 0 {
		t.empty = make(chan struct{})
	}
	t.conns[c] = b
}

func (t *tracker) remove(c io.Closer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.conns[c]; !ok {
		return
	}
	delete(t.conns, c)
	if len(t.conns) == 0 {
		close(t.empty)
	}
}

// finisher is a tracked connection that can end gracefully by a deadline
// (a TCP pipe) rather than at once.
type finisher interface {
	finish(deadline time.Time)
}

// finishFor ends the connections to b: those that can pass on what b sent
// before it went do so until deadline, the others are closed at once.
func (t *tracker) finishFor(b *backend, deadline time.Time) {
	t.mu.Lock()
	var victims []io.Closer
	for c, owner := range t.conns {
		if owner == b {
			victims = append(victims, c)
		}
	}
	t.mu.Unlock()
	for _, c := range victims {
		if f, ok := c.(finisher); ok {
			f.finish(deadline)
			continue
		}
		_ = c.Close() // the connection is being cut; its error says nothing new
	}
}

// closeFor closes the connections to b, or all of them when b is nil.
func (t *tracker) closeFor(b *backend) {
	t.mu.Lock()
	var victims []io.Closer
	for c, owner := range t.conns {
		if b == nil || owner == b {
			victims = append(victims, c)
		}
	}
	t.mu.Unlock()
	for _, c := range victims {
		_ = c.Close() // the connection is being cut; its error says nothing new
	}
}

// whenEmpty returns a channel closed once no connection is tracked.
func (t *tracker) whenEmpty() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.empty
}

// trackedBody releases the backend's slot when the proxy closes the response
// body, which it always does, at the end of the copy.
type trackedBody struct {
	io.ReadCloser
	b      *backend
	cancel context.CancelFunc // ends the attempt's context, once read
	closed atomic.Bool
}

func (t *trackedBody) Close() error {
	err := t.ReadCloser.Close()
	if t.closed.CompareAndSwap(false, true) {
		t.cancel()
		t.b.releaseHTTP()
	}
	return err
}

// upgradedBody is the body of a 101 response: the backend connection itself,
// which httputil.ReverseProxy needs writable. It lives in the tracker until
// closed.
type upgradedBody struct {
	trackedBody
	w       io.Writer
	tracker *tracker
}

func (u *upgradedBody) Write(p []byte) (int, error) { return u.w.Write(p) }

func (u *upgradedBody) Close() error {
	u.tracker.remove(u)
	return u.trackedBody.Close()
}

var errNoBackend = errors.New("no healthy backend")
