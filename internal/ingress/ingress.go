package ingress

import (
	"context"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// ErrClosed is returned by the calls made after Close.
var ErrClosed = errors.New("ingress closed")

// Ingress is the host's proxy. Create it with New, feed it with Update, serve
// it with Start (or mount ServeHTTP yourself), stop it with Close. All methods
// are safe for concurrent use.
type Ingress struct {
	cfg     Config
	log     *zap.Logger
	reg     *prometheus.Registry
	m       *metrics
	conns   *tracker
	now     func() int64 // UnixNano; a field so that the pick reads one clock
	closing atomic.Bool  // read by /healthz without the lock
	// problem, if set, is why the host is not healthy although the ingress
	// serves (the agent cannot verify its control plane): /healthz answers
	// 503 with it.
	problem atomic.Pointer[string]

	// ctx is cancelled by Close; it bounds dials for published ports.
	ctx    context.Context
	cancel context.CancelFunc

	routes atomic.Pointer[routeTable] // read per request without a lock
	// certs and challenges are the table's, read per handshake and
	// request without a lock.
	certs      atomic.Pointer[certTable]
	challenges atomic.Pointer[map[string]string]
	// alpn are the TLS-ALPN-01 challenge certificates by host, and
	// alpnTokens their tokens, for Challenges.
	alpn       atomic.Pointer[certTable]
	alpnTokens atomic.Pointer[[]string]
	// httpsPort is the HTTPS listener's port, for redirects; httpsProblem
	// why there is no listener although one was asked for.
	httpsPort    atomic.Int32
	httpsProblem atomic.Pointer[string]
	// tabled is set by the first Update. Until then the ingress does not know
	// what it serves: a request gets 503 with Retry-After, never a false 404
	// (an agent starts listening before its first converge).
	tabled atomic.Bool

	// wg counts the goroutines the Ingress started: servers, accept loops, TCP
	// pipes.
	wg sync.WaitGroup

	mu       sync.Mutex          // guards the fields below, and the fields of egg and backend marked so
	eggs     map[string]*egg     // by name, as in the last table
	backends map[string]*backend // by container ID: listed ones, and unlisted ones still busy or draining
	fenced   map[string]bool     // containers drained and not yet reported gone: never rejoin
	ports    map[int]*portListener
	sockets  map[string]*portListener // by path
	started  bool
	closed   bool
	httpSrv  *http.Server
	httpLn   net.Listener
	httpsSrv *http.Server
	httpsLn  net.Listener
	adminSrv *http.Server
	adminLn  net.Listener
	// streamSrv serves the HTTP streams from peers that DialLocal hands to
	// streamLn; both are set by Start.
	streamSrv   *http.Server
	streamLn    *streamListener
	streamFresh *unstarted
}

// New returns an Ingress with an empty table; it listens on nothing until
// Start (HTTP, admin) or Update (published ports).
func New(cfg Config) (*Ingress, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("ingress config: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &Ingress{
		cfg:      cfg,
		log:      cfg.Logger.Named("ingress"),
		reg:      cfg.Registry,
		conns:    newTracker(),
		now:      func() int64 { return time.Now().UnixNano() },
		ctx:      ctx,
		cancel:   cancel,
		eggs:     make(map[string]*egg),
		backends: make(map[string]*backend),
		fenced:   make(map[string]bool),
		ports:    make(map[int]*portListener),
		sockets:  make(map[string]*portListener),
	}
	in.m = newMetrics(cfg.Registry, in)
	in.routes.Store(newRouteTable(nil))
	in.certs.Store(&certTable{})
	in.challenges.Store(&map[string]string{})
	in.alpn.Store(&certTable{})
	in.alpnTokens.Store(&[]string{})
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
	if in.started {
		return errors.New("ingress already started")
	}
	var httpLn, adminLn net.Listener
	var err error
	if in.cfg.HTTPAddr != "" {
		if httpLn, err = net.Listen("tcp", in.cfg.HTTPAddr); err != nil {
			return fmt.Errorf("ingress listen: %w", err)
		}
	}
	if in.cfg.AdminAddr != "" {
		if adminLn, err = net.Listen("tcp", in.cfg.AdminAddr); err != nil {
			if httpLn != nil {
				_ = httpLn.Close() // we are failing Start; nothing was served on it
			}
			return fmt.Errorf("ingress admin listen: %w", err)
		}
	}
	in.started = true
	in.streamLn = newStreamListener()
	in.streamSrv, in.streamFresh = in.newStreamServer()
	in.serve(in.streamSrv, in.streamLn)
	errLog := warnLog(in.log)
	if httpLn != nil {
		in.httpLn = httpLn
		in.httpSrv = &http.Server{
			Handler:           in,
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       2 * time.Minute,
			ErrorLog:          errLog,
		}
		in.serve(in.httpSrv, httpLn)
	}
	if in.cfg.HTTPSAddr != "" {
		in.startHTTPS()
	}
	if adminLn != nil {
		in.adminLn = adminLn
		in.adminSrv = &http.Server{Handler: in.AdminHandler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: errLog}
		in.serve(in.adminSrv, adminLn)
	}
	in.log.Info("ingress started", listenerField("http", httpLn), listenerField("https", in.httpsLn),
		listenerField("admin", adminLn))
	return nil
}

func (in *Ingress) serve(srv *http.Server, ln net.Listener) {
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			in.log.Error("ingress server stopped", zap.Stringer("addr", ln.Addr()), zap.Error(err))
		}
	}()
}

// HTTPAddr returns the address Start listens on for HTTP, or nil.
func (in *Ingress) HTTPAddr() net.Addr {
	in.mu.Lock()
	defer in.mu.Unlock()
	return addrOf(in.httpLn)
}

// SetProblem makes /healthz answer 503 with reason, or 200 again when
// reason is empty. The agent sets it for what an operator must fix on the
// host (a control plane it cannot verify), which a prober then sees.
func (in *Ingress) SetProblem(reason string) {
	if reason == "" {
		in.problem.Store(nil)
		return
	}
	in.problem.Store(&reason)
}

// AdminAddr returns the address Start serves /healthz and /metrics on, or nil.
func (in *Ingress) AdminAddr() net.Addr {
	in.mu.Lock()
	defer in.mu.Unlock()
	return addrOf(in.adminLn)
}

// listenerField logs where ln listens, or "off" when there is none: a nil
// net.Addr given to zap.Stringer logs a recovered panic, not the address.
func listenerField(key string, ln net.Listener) zap.Field {
	if ln == nil {
		return zap.String(key, "off")
	}
	return zap.String(key, ln.Addr().String())
}

func addrOf(ln net.Listener) net.Addr {
	if ln == nil {
		return nil
	}
	return ln.Addr()
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
			empty := []*backend{}
			e.pool.Store(&empty)
			e.closeHold(false) // what it held gets 503: the egg is gone from here
			in.updateRemotes(e, nil)
			in.m.dropEgg(name)
		}
	}
	in.eggs = eggs
	certs, certErr := loadCertificates(t.Certificates, in.certs.Load(), false)
	in.certs.Store(certs)
	alpn, alpnErr := loadCertificates(t.ALPNChallenges, in.alpn.Load(), true)
	in.alpn.Store(alpn)
	var tokens []string
	for _, c := range t.ALPNChallenges {
		if _, ok := alpn.byHost[strings.TrimSuffix(strings.ToLower(c.Host), ".")]; ok {
			tokens = append(tokens, c.Token)
		}
	}
	in.alpnTokens.Store(&tokens)
	certErr = errors.Join(certErr, alpnErr)
	challenges := make(map[string]string, len(t.Challenges))
	for token, keyAuth := range t.Challenges {
		challenges[token] = keyAuth
	}
	in.challenges.Store(&challenges)
	in.routes.Store(newRouteTable(routes))
	in.tabled.Store(true)
	return errors.Join(certErr, in.syncPorts(t))
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
			b = newBackend(s.ContainerID, s.Addr, e, in.cfg.DialTimeout, in.eject)
			in.backends[s.ContainerID] = b
		}
		b.healthy = s.Healthy
		b.drainTimeout = e.drainTimeout
		listed[s.ContainerID] = true
		e.backends = append(e.backends, b)
	}
	e.rebuildPool(in.fenced)
	in.updateRemotes(e, spec.Remote)
	return e
}

func (in *Ingress) newEgg(name string) *egg {
	e := &egg{name: name, m: in.m.forEgg(name), log: in.log.With(zap.String("egg", name))}
	empty := []*backend{}
	e.pool.Store(&empty)
	e.proxy = in.newProxy(e)
	e.localProxy = in.newLocalProxy(e)
	return e
}

// forget drops a backend the table no longer lists. The caller holds mu.
func (in *Ingress) forget(b *backend) {
	delete(in.backends, b.id)
	b.transport.CloseIdleConnections()
}

// eject takes a backend out of the pool for Config.EjectFor: its dial failed,
// it sent no response headers within the upstream timeout, or (a peer) it has
// no healthy replica left.
func (in *Ingress) eject(b *backend, err error) {
	now := in.now()
	prev := b.ejectedUntil.Swap(now + int64(in.cfg.EjectFor))
	b.ejectedOnGuess.Store(!errors.Is(err, errUpstreamTimeout))
	b.egg.m.dialFailures.Inc()
	if prev <= now { // log once per ejection, not once per failed request
		where := []zap.Field{zap.String("container", shortID(b.id)), zap.String("addr", b.addr)}
		if b.remote != nil {
			where = []zap.Field{zap.String("peer", b.remote.host)}
		}
		in.log.Warn("backend left the pool", append(where,
			zap.String("egg", b.egg.name), zap.Duration("for", in.cfg.EjectFor), zap.Error(err))...)
	}
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
	log := in.log.With(zap.String("egg", b.egg.name), zap.String("container", shortID(containerID)))
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
		return fmt.Errorf("drain %s: %w", shortID(containerID), ctx.Err())
	}
	b.transport.CloseIdleConnections()
	return nil
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
		kept := b.egg.backends[:0:0]
		for _, o := range b.egg.backends {
			if o != b {
				kept = append(kept, o)
			}
		}
		b.egg.backends = kept
		// As in Drain: the pool (and a hold window) first, then the mark
		// that makes a concurrent pick back off.
		b.egg.rebuildPool(in.fenced)
		b.markGone()
	}
	in.mu.Unlock()
	if b == nil {
		return
	}
	in.conns.finishFor(b, time.Now().Add(goneGrace))
	b.transport.CloseIdleConnections()
}

// goneGrace bounds how long a connection of a container that is gone may
// still pass on what the container sent before it went. Those bytes are
// already on this host, so a second is plenty even on a busy machine, and
// short enough for a client waiting on a dead backend.
const goneGrace = time.Second

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
	return in.snapshot()
}

func (in *Ingress) snapshot() []EggStatus {
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
			case !b.available(in.now, false):
				s.Ejected++
			default:
				s.Ready++
			}
		}
		for _, b := range e.remotes {
			s.InFlight += b.inflight.Load()
			if b.available(in.now, false) {
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
	in.closing.Store(true)
	for _, e := range in.eggs {
		// What is held would keep the shutdown waiting for a replica that
		// this ingress will no longer route to: 503 now.
		e.closeHold(false)
	}
	listeners := make([]*portListener, 0, len(in.ports)+len(in.sockets))
	for _, pl := range in.ports {
		listeners = append(listeners, pl)
	}
	for _, pl := range in.sockets {
		listeners = append(listeners, pl)
	}
	in.ports, in.sockets = nil, nil
	httpSrv, httpsSrv, adminSrv, streamSrv, streamFresh := in.httpSrv, in.httpsSrv, in.adminSrv, in.streamSrv, in.streamFresh
	in.mu.Unlock()

	in.cancel()
	for _, pl := range listeners {
		pl.close()
	}
	var errs []error
	if httpSrv != nil {
		if err := httpSrv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("ingress shutdown: %w", err))
			_ = httpSrv.Close() // cut what Shutdown could not wait for
		}
	}
	if httpsSrv != nil {
		if err := httpsSrv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("ingress HTTPS shutdown: %w", err))
			_ = httpsSrv.Close() // cut what Shutdown could not wait for
		}
	}
	if streamSrv != nil {
		streamFresh.closeAll()
		if err := streamSrv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("ingress shutdown of peer streams: %w", err))
			_ = streamSrv.Close() // cut what Shutdown could not wait for
		}
	}
	select {
	case <-in.conns.whenEmpty():
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("ingress close: open connections cut: %w", ctx.Err()))
		in.conns.closeFor(nil)
	}
	if adminSrv != nil {
		if err := adminSrv.Shutdown(ctx); err != nil {
			_ = adminSrv.Close() // a scrape cut short is harmless
		}
	}
	in.wg.Wait()
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
