package ingress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// ServeHTTP routes a request by Host and path to its egg's least loaded
// healthy backend: 404 when no egg serves the host and path, 503 naming the
// egg when it has no healthy backend, 502 when the backend failed and the
// request could not safely be sent elsewhere.
func (in *Ingress) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	routes := in.routes.Load()
	if routes == nil {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "hatch ingress: starting, no routing table yet", http.StatusServiceUnavailable)
		return
	}
	if strings.HasPrefix(r.URL.Path, acmeChallengePath) && in.tls.serveChallenge(w, r) {
		return
	}
	route := routes.match(r.Host, r.URL.Path)
	if route == nil {
		in.m.unrouted.Inc()
		http.Error(w, fmt.Sprintf("hatch ingress: no egg serves %q", r.Host+r.URL.Path), http.StatusNotFound)
		return
	}
	secure := in.tls.secure(r)
	if route.tls && !secure && in.tls.hasCertificate(r.Host) {
		in.tls.redirect(w, r)
		return
	}
	if route.hsts && secure {
		w.Header().Set("Strict-Transport-Security", hstsValue)
	}
	if secure && r.TLS == nil {
		// A trusted proxy's: the backend hears the scheme the client used.
		r = r.WithContext(context.WithValue(r.Context(), forwardedHTTPSKey{}, true))
	}
	e, timeout := route.egg, route.timeout
	if timeout == 0 {
		timeout = in.cfg.UpstreamTimeout
	}
	r = r.WithContext(context.WithValue(r.Context(), upstreamTimeoutKey{}, timeout))
	start := time.Now()
	defer func() { e.m.duration.Observe(time.Since(start).Seconds()) }()
	e.proxy.ServeHTTP(w, r)
}

// upstreamTimeoutKey carries a request's upstream timeout (its route's) from
// ServeHTTP to the egg's transport.
type upstreamTimeoutKey struct{}

// upstreamTimeoutHeader carries the upstream timeout of a request sent to a
// peer, whose ingress applies it to its own replicas (the peer does not know
// the route). It is removed before a request reaches a container.
const upstreamTimeoutHeader = "Hatch-Upstream-Timeout"

// errUpstreamTimeout is a backend that sent no response headers within the
// upstream timeout.
var errUpstreamTimeout = errors.New("no response headers within the upstream timeout")

// upstreamTimeout returns the bound on req's wait for response headers:
// its route's, or for a request from a peer, the one the peer sent (both
// put in the context), else the default.
func (t *eggTransport) upstreamTimeout(req *http.Request) time.Duration {
	if d, ok := req.Context().Value(upstreamTimeoutKey{}).(time.Duration); ok {
		return d
	}
	return t.e.up.upstreamTimeout
}

// newProxy returns the reverse proxy of one egg. The backend is chosen in
// the proxy's transport (eggTransport), where a failed attempt can be sent to
// another backend before the proxy writes anything to the client.
func newProxy(e *egg) http.Handler {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.Header.Del(upstreamTimeoutHeader) // ours, never the client's
			// Out.Host keeps the client's Host. The client's X-Forwarded-*
			// were stripped by ReverseProxy: the ingress is the edge, so the
			// backend sees the real client, not what it claims.
			pr.SetXForwarded()
			if pr.In.Context().Value(forwardedHTTPSKey{}) != nil {
				pr.Out.Header.Set("X-Forwarded-Proto", "https")
			}
		},
		Transport: &eggTransport{e: e},
		ModifyResponse: func(resp *http.Response) error {
			e.m.countStatus(resp.StatusCode)
			return nil
		},
		ErrorHandler: e.proxyError,
		ErrorLog:     warnLog(e.log),
		BufferPool:   copyBuffers,
	}
}

// proxyError answers a request that got no response from a backend.
func (e *egg) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	var held *holdExpiredError
	switch {
	case errors.As(err, &held):
		e.m.requests[class5xx].Inc()
		w.Header().Set("Retry-After", "1")
		http.Error(w, "hatch ingress: "+held.Error(), http.StatusServiceUnavailable)
	case errors.Is(err, errNoBackend):
		e.m.requests[class5xx].Inc()
		w.Header().Set("Retry-After", "1")
		http.Error(w, fmt.Sprintf("hatch ingress: egg %q has no healthy backend", e.name), http.StatusServiceUnavailable)
	case errors.Is(err, errUpstreamTimeout) && r.Context().Err() == nil:
		e.m.requests[class5xx].Inc()
		http.Error(w, fmt.Sprintf("hatch ingress: egg %q: %v", e.name, err), http.StatusGatewayTimeout)
	case r.Context().Err() != nil:
		e.m.requests[classAborted].Inc() // the client left; nobody reads the answer
		w.WriteHeader(http.StatusBadGateway)
	default:
		e.m.requests[class5xx].Inc()
		if ce := e.log.Check(zap.DebugLevel, "backend gave no response"); ce != nil {
			ce.Write(zap.String("method", r.Method), zap.Error(err))
		}
		http.Error(w, fmt.Sprintf("hatch ingress: egg %q: backend failed", e.name), http.StatusBadGateway)
	}
}

// eggTransport sends a request to one of the egg's backends, and once more to
// another when the first gave no response and sending again is safe.
type eggTransport struct {
	e *egg
	// localOnly keeps the requests on this host's backends: those of HTTP
	// streams from peers.
	localOnly bool
}

func (t *eggTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	b := t.e.acquire(nil, unixNano, t.localOnly)
	if b == nil {
		var err error
		if b, err = t.e.await(req.Context(), nil, unixNano, t.localOnly); err != nil {
			return nil, err
		}
	}
	timeout := t.upstreamTimeout(req)
	resp, err := t.send(b, req, timeout)
	if err == nil || !retryable(req, err) {
		return resp, err
	}
	other := t.e.acquire(b, unixNano, t.localOnly)
	if other == nil {
		// A stateful egg's only replica died under the request: it may be
		// held until the next one is up.
		if other, _ = t.e.await(req.Context(), b, unixNano, t.localOnly); other == nil {
			return nil, err
		}
	}
	t.e.m.retries.Inc()
	return t.send(other, req, timeout)
}

// retryable says whether a request that got no response may be sent again:
// when the dial failed nothing was sent (send keeps the body unread and
// open); a request without a body can be sent again as it is.
// A request with a body that may have been partly sent cannot be replayed.
func retryable(req *http.Request, err error) bool {
	if req.Context().Err() != nil {
		return false
	}
	var de *dialError
	return errors.As(err, &de) || req.Body == nil || req.Body == http.NoBody
}

// send runs one attempt on b, which holds a slot that the response body's
// Close releases (or send itself, on error). A local backend that sends no
// response headers within timeout is ejected at once and the attempt fails
// with errUpstreamTimeout (a frozen container holds no request past it); a
// remote one is given the timeout to apply to its own replicas.
func (t *eggTransport) send(b *backend, req *http.Request, timeout time.Duration) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	out := *req.WithContext(ctx) // RoundTrip must not change the caller's request
	u := *req.URL
	u.Host = b.addr
	out.URL = &u
	if req.Body != nil && req.Body != http.NoBody {
		// The transport closes the body when the dial fails, which would
		// stop a retry from reading it. ReverseProxy closes it at the end.
		out.Body = io.NopCloser(req.Body)
	}
	var timer *time.Timer
	var timedOut atomic.Bool
	if b.remote != nil {
		out.Header = out.Header.Clone()
		out.Header.Set(upstreamTimeoutHeader, timeout.String())
	} else {
		timer = time.AfterFunc(timeout, func() { timedOut.Store(true); cancel() })
	}
	resp, err := b.transport.RoundTrip(&out)
	if timer != nil && !timer.Stop() && timedOut.Load() && req.Context().Err() == nil {
		// The timer fired: the request was cut, or its response came just
		// as it did, with its context already cancelled. Either way the
		// backend was too slow.
		if err == nil {
			_ = resp.Body.Close()
		}
		cancel()
		b.releaseHTTP()
		err = fmt.Errorf("container %s: %w (%s)", shortID(b.id), errUpstreamTimeout, timeout)
		b.eject(err)
		return nil, err
	}
	if err != nil {
		cancel()
		b.releaseHTTP()
		return nil, err
	}
	if b.remote != nil && resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get(noBackendHeader) != "" {
		// The peer has no healthy replica left (they drained or died since
		// the stream opened): like a failed dial, out for EjectFor, and the
		// request goes elsewhere if it can.
		_ = resp.Body.Close() // a short error page; nothing to keep
		cancel()
		b.releaseHTTP()
		b.eject(errors.New("the peer has no healthy replica"))
		return nil, fmt.Errorf("host %s: %w", b.remote.host, errNoBackend)
	}
	if rw, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		// A WebSocket or other upgraded connection: it lasts until one side
		// closes, so Gone (the container died) must be able to cut it.
		conns := t.e.up.conns
		ub := &upgradedBody{w: rw, tracker: conns}
		ub.ReadCloser, ub.b, ub.cancel = rw, b, cancel
		conns.add(ub, b)
		if b.isGone() {
			_ = ub.Close() // Gone ran between the dial and here: cut it like the others
		}
		resp.Body = ub
		return resp, nil
	}
	resp.Body = &trackedBody{ReadCloser: resp.Body, b: b, cancel: cancel}
	return resp, nil
}

// bufferPool recycles ReverseProxy's copy buffers, which it would otherwise
// allocate (32 KiB) for every response.
type bufferPool struct{ p sync.Pool }

var copyBuffers = &bufferPool{p: sync.Pool{New: func() any { b := make([]byte, 32*1024); return &b }}}

func (bp *bufferPool) Get() []byte  { return *bp.p.Get().(*[]byte) }
func (bp *bufferPool) Put(b []byte) { bp.p.Put(&b) }

// AdminHandler serves /healthz (200 until Close starts, then 503; 503 with
// the reason while a problem is set, see SetProblem) and /metrics (the
// Config.Registry).
func (in *Ingress) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", &in.health)
	reg := in.cfg.Registry
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux
}

// health is what /healthz answers; both fields are read without a lock.
type health struct {
	closing atomic.Bool // set when Close starts
	// problem, if set, is why the host is not healthy although the ingress
	// serves (the agent cannot verify its control plane).
	problem atomic.Pointer[string]
}

func (h *health) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	if h.closing.Load() {
		http.Error(w, "closing", http.StatusServiceUnavailable)
		return
	}
	if p := h.problem.Load(); p != nil {
		http.Error(w, *p, http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(w, "ok\n") // a failed write means the prober left
}
