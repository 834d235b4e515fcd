package ingress

import (
	"net/http"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// egg is one egg's live state. Its name never changes; an egg removed from
// the table and added again later is a new egg.
type egg struct {
	name string
	up   *upstream
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

// remove drops a backend reported gone from the egg's list and its pool
// (opening a hold window if it was the last). The caller holds Ingress.mu.
func (e *egg) remove(b *backend, fenced map[string]bool) {
	kept := e.backends[:0:0]
	for _, o := range e.backends {
		if o != b {
			kept = append(kept, o)
		}
	}
	e.backends = kept
	e.rebuildPool(fenced)
}

// retire empties the pools of an egg the table no longer lists: what it
// held gets 503, for the egg is gone from here. The caller holds
// Ingress.mu.
func (e *egg) retire() {
	empty := []*backend{}
	e.pool.Store(&empty)
	e.closeHold(false)
	e.setRemotes(nil)
}
