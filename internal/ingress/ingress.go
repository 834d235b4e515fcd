package ingress

import (
	"context"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// ErrClosed is returned by the calls made after Close.
var ErrClosed = errors.New("ingress: closed")

// Ingress is the host's proxy. Create it with New, feed it with Update, serve
// it with Start (or mount ServeHTTP yourself), stop it with Close. All methods
// are safe for concurrent use.
//
// It keeps the table: the eggs, their backends and routes. What it serves
// lives in types of their own: each egg picks among its backends and holds
// its requests through a stateful gap, each backend drains, ejects and ends
// its connections itself, tlsState holds the certificates and challenges,
// servers the HTTP servers, and published the published ports' listeners.
type Ingress struct {
	cfg    Config
	log    *zap.Logger
	m      *metrics
	up     *upstream          // shared with every egg and backend
	cancel context.CancelFunc // ends up.life; called by Close
	health health

	// routes is read per request without a lock; nil until the first
	// Update. Until then the ingress does not know what it serves: a
	// request gets 503 with Retry-After, never a false 404 (an agent starts
	// listening before its first converge).
	routes atomic.Pointer[routeTable]
	tls    *tlsState

	// mu guards the fields below, the listeners of ports, the servers srv
	// starts, and the fields of egg and backend marked so.
	mu       sync.Mutex
	eggs     map[string]*egg     // by name, as in the last table
	backends map[string]*backend // by container ID: listed ones, and unlisted ones still busy or draining
	fenced   map[string]bool     // containers drained and not yet reported gone: never rejoin
	closed   bool
	srv      *servers
	ports    *published
}

// New returns an Ingress with an empty table; it listens on nothing until
// Start (HTTP, admin) or Update (published ports).
func New(cfg Config) (*Ingress, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("ingress config: %w", err)
	}
	life, cancel := context.WithCancel(context.Background())
	log := cfg.Logger.Named("ingress")
	in := &Ingress{
		cfg: cfg,
		log: log,
		up: &upstream{life: life, conns: newTracker(), peers: cfg.Peers,
			dialTimeout: cfg.DialTimeout, remoteDialTimeout: cfg.RemoteDialTimeout,
			ejectFor: cfg.EjectFor, upstreamTimeout: cfg.UpstreamTimeout},
		cancel:   cancel,
		eggs:     make(map[string]*egg),
		backends: make(map[string]*backend),
		fenced:   make(map[string]bool),
		srv:      &servers{log: log},
		ports:    newPublished(cfg, life, log),
	}
	in.m = newMetrics(cfg.Registry, in)
	in.tls = newTLSState(log, in.m, cfg.TrustedProxies)
	return in, nil
}

// Start listens on Config.HTTPAddr and Config.AdminAddr (each if set) and
// serves them until Close. It fails, having opened nothing, if either
// address cannot be listened on.
func (in *Ingress) Start() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return ErrClosed
	}
	return in.srv.start(in.cfg, in, in.AdminHandler(), http.HandlerFunc(in.serveStream), in.tls)
}

// HTTPAddr returns the address Start listens on for HTTP, or nil.
func (in *Ingress) HTTPAddr() net.Addr {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.srv.http.addr()
}

// HTTPSAddr returns the address Start listens on for HTTPS, or nil.
func (in *Ingress) HTTPSAddr() net.Addr {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.srv.https.addr()
}

// AdminAddr returns the address Start serves /healthz and /metrics on, or nil.
func (in *Ingress) AdminAddr() net.Addr {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.srv.admin.addr()
}

// HTTPSProblem says why the ingress does not serve HTTPS although
// Config.HTTPSAddr asks it to, or "".
func (in *Ingress) HTTPSProblem() string {
	if p := in.srv.problem.Load(); p != nil {
		return *p
	}
	return ""
}

// Challenges returns the tokens of the ACME challenges the ingress answers.
func (in *Ingress) Challenges() []string { return in.tls.tokens() }

// SetProblem makes /healthz answer 503 with reason, or 200 again when
// reason is empty. The agent sets it for what an operator must fix on the
// host (a control plane it cannot verify), which a prober then sees.
func (in *Ingress) SetProblem(reason string) {
	if reason == "" {
		in.health.problem.Store(nil)
		return
	}
	in.health.problem.Store(&reason)
}

// Update replaces the routing table. New routes and backends serve the next
// request; requests and connections already open carry on where they are. A
// table that fails validation changes nothing and is reported. Published
// ports that cannot be listened on are reported too, with the rest of the
// table applied; each later Update tries them again.
func (in *Ingress) Update(t Table) error {
	t, err := validate(t)
	if err != nil {
		return fmt.Errorf("ingress table: %w", err)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return ErrClosed
	}
	eggs := make(map[string]*egg, len(t.Eggs))
	listed := make(map[string]bool)
	routes := make(map[Route]*egg)
	for _, spec := range t.Eggs {
		e := in.updateEgg(spec, listed)
		for _, r := range spec.Routes {
			routes[r] = e
		}
		eggs[spec.Name] = e
	}
	for id, b := range in.backends {
		// An unlisted backend gets no new work. One that is still busy or
		// draining stays known, so that Drain and Gone still find it.
		if !listed[id] && b.inflight.Load() == 0 && !b.draining.Load() {
			in.forget(b)
		}
	}
	for name, e := range in.eggs {
		if eggs[name] == nil {
			e.retire()
			in.m.dropEgg(name)
		}
	}
	in.eggs = eggs
	certErr := in.tls.update(t)
	in.routes.Store(newRouteTable(routes))
	return errors.Join(certErr, in.ports.sync(t, eggs))
}

// updateEgg applies one egg's entry: its drain timeout, its backends (adding
// the new ones to listed) and its pool. The caller holds mu.
func (in *Ingress) updateEgg(spec Egg, listed map[string]bool) *egg {
	e := in.eggs[spec.Name]
	if e == nil {
		e = in.newEgg(spec.Name)
	}
	e.drainTimeout = spec.DrainTimeout
	if e.drainTimeout == 0 {
		e.drainTimeout = in.cfg.DrainTimeout
	}
	e.routed, e.peerPorts = len(spec.Routes) > 0, peerPorts(spec)
	e.holdFor = 0
	if spec.Stateful {
		e.holdFor = in.cfg.HoldTimeout
	}
	e.backends = make([]*backend, 0, len(spec.Backends))
	for _, s := range spec.Backends {
		b := in.backends[s.ContainerID]
		if b != nil && (b.addr != s.Addr || b.egg != e) {
			in.forget(b) // same container, new address or egg: a new backend
			b = nil
		}
		if b == nil {
			b = newBackend(s.ContainerID, s.Addr, e)
			in.backends[s.ContainerID] = b
		}
		b.healthy = s.Healthy
		b.drainTimeout = e.drainTimeout
		listed[s.ContainerID] = true
		e.backends = append(e.backends, b)
	}
	e.rebuildPool(in.fenced)
	e.setRemotes(spec.Remote)
	return e
}

func (in *Ingress) newEgg(name string) *egg {
	e := &egg{name: name, up: in.up, m: in.m.forEgg(name), log: in.log.With(zap.String("egg", name))}
	empty := []*backend{}
	e.pool.Store(&empty)
	e.proxy = newProxy(e)
	e.localProxy = newLocalProxy(e)
	return e
}

// forget drops a backend the table no longer lists. The caller holds mu.
func (in *Ingress) forget(b *backend) {
	delete(in.backends, b.id)
	b.transport.CloseIdleConnections()
}

// Drain takes the container's backend out of the pool at once, then waits
// until its in-flight requests and connections have finished, the egg's drain
// timeout has passed, or the container is reported gone. Only then should the
// container be stopped. What is still open at the drain timeout (requests,
// TCP connections of published ports, upgraded connections) is left to the
// container's stop: only the application knows where one request ends on a
// connection it owns, so its stop signal lets it close each one cleanly (an
// HTTP server after the response in flight), and Gone cuts what outlives it.
// Cutting them here would lose, or make the client replay, whatever request
// was in flight on them. The container never rejoins the pool until Gone is
// called for it. Draining an unknown container returns at once (and still
// keeps it out). Drain returns an error only when ctx ends first.
func (in *Ingress) Drain(ctx context.Context, containerID string) error {
	in.mu.Lock()
	in.fenced[containerID] = true
	b := in.backends[containerID]
	var timeout time.Duration
	if b != nil {
		timeout = b.drainTimeout
		// Out of the pool (and a stateful egg's hold window open) before
		// the drain starts, so that a request that sees it draining finds
		// the window; one that picked it just before is waited for.
		b.egg.rebuildPool(in.fenced)
		b.startDrain()
	}
	in.mu.Unlock()
	if b == nil {
		return nil
	}
	return b.drain(ctx, timeout)
}

// Gone says the container died or was removed: its backend leaves the pool at
// once, a Drain waiting on it returns, and its open connections end: a
// published port's connections pass on what the container sent before it
// went (an HTTP server's last response, then the end of the stream it
// closed) and are cut at most goneGrace later; upgraded HTTP connections are
// cut at once. If a later Update lists the same container as healthy (it was
// restarted), it joins again as a new backend.
func (in *Ingress) Gone(containerID string) {
	in.mu.Lock()
	delete(in.fenced, containerID)
	b := in.backends[containerID]
	if b != nil {
		delete(in.backends, containerID)
		// As in Drain: the pool (and a hold window) first, then the mark
		// that makes a concurrent pick back off.
		b.egg.remove(b, in.fenced)
		b.markGone()
	}
	in.mu.Unlock()
	if b != nil {
		b.endConnections()
	}
}

// EggStatus is one egg's pool as the ingress sees it.
type EggStatus struct {
	Egg string
	// Backends by state. Ready ones take new work; ejected ones failed a dial
	// less than Config.EjectFor ago.
	Ready, Ejected, Draining, Unhealthy int
	// RemoteReady and RemoteEjected count the other hosts running the egg:
	// those that may take work when no local backend can, and those out
	// for a failed dial, an answer that they had no replica, or a mesh
	// connection found dead.
	RemoteReady, RemoteEjected int
	// InFlight counts requests and TCP connections open to listed backends,
	// remote ones included.
	InFlight int64
	// Held counts the requests and connections waiting for a stateful
	// egg's backend to come back (see Egg.Stateful).
	Held int64
}

// Status returns the state of every egg in the table, sorted by name.
func (in *Ingress) Status() []EggStatus {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make([]EggStatus, 0, len(in.eggs))
	for _, e := range in.eggs {
		s := EggStatus{Egg: e.name, Held: e.waiting.Load()}
		for _, b := range e.backends {
			s.InFlight += b.inflight.Load()
			switch {
			case b.draining.Load() || in.fenced[b.id]:
				s.Draining++
			case !b.healthy:
				s.Unhealthy++
			case !b.available(unixNano, false):
				s.Ejected++
			default:
				s.Ready++
			}
		}
		for _, b := range e.remotes {
			s.InFlight += b.inflight.Load()
			if b.available(unixNano, false) {
				s.RemoteReady++
			} else {
				s.RemoteEjected++
			}
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Egg < out[j].Egg })
	return out
}

// Release stops accepting on every listener (HTTP, HTTPS, admin, published
// ports and sockets) and turns keep-alive off, so that each connection open
// closes after its next response, then waits until the HTTP and HTTPS
// connections have closed or ctx ends. Nothing else is closed: a successor
// serving the same sockets (the data plane's handover) takes every new
// connection meanwhile. Close then ends the rest. Waiting matters twice:
// net/http's Shutdown drops a request it reads after it began (on a
// connection accepted just before), and closing a kept-alive connection
// races its client's next request, which a client retries only if it is
// idempotent; a connection closed after its response is closed cleanly.
func (in *Ingress) Release(ctx context.Context) {
	in.mu.Lock()
	in.srv.release()
	in.ports.close()
	in.mu.Unlock()
	// A connection accepted just before the listener closed is counted
	// a moment later.
	t := time.NewTicker(releasePoll)
	defer t.Stop()
	for first := true; first || in.srv.open.Load() > 0; first = false {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// releasePoll is how often Release looks whether the connections closed.
const releasePoll = 50 * time.Millisecond

// Close stops listening, lets open requests and connections finish until ctx
// ends, then closes what is left and waits for its goroutines. It returns
// ctx's error if it had to cut connections.
func (in *Ingress) Close(ctx context.Context) error {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return nil
	}
	in.closed = true
	in.health.closing.Store(true)
	for _, e := range in.eggs {
		// What is held would keep the shutdown waiting for a replica that
		// this ingress will no longer route to: 503 now.
		e.closeHold(false)
	}
	in.ports.close()
	in.mu.Unlock()

	in.cancel()
	// Closed, the ingress cannot start servers any more: in.srv's fields
	// no longer change.
	errs := []error{in.srv.shutdownProxies(ctx)}
	select {
	case <-in.up.conns.whenEmpty():
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("ingress close: open connections cut: %w", ctx.Err()))
		in.up.conns.closeFor(nil)
	}
	in.srv.shutdownAdmin(ctx)
	in.ports.wg.Wait()
	in.mu.Lock()
	for _, b := range in.backends {
		b.transport.CloseIdleConnections()
	}
	for _, e := range in.eggs {
		for _, b := range e.remotes {
			b.transport.CloseIdleConnections()
		}
	}
	in.mu.Unlock()
	in.log.Info("ingress closed")
	return errors.Join(errs...)
}

// warnLog adapts log for net/http's error logs, whose few lines (accept
// errors, panics, a backend's body cut short) deserve a warning.
func warnLog(log *zap.Logger) *stdlog.Logger {
	l, err := zap.NewStdLogAt(log, zap.WarnLevel)
	if err != nil { // only for a level zap does not know
		panic(err)
	}
	return l
}

// shortID shortens a container ID for logs and messages, as docker ps does.
func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
