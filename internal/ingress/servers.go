package ingress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// servers are the Ingress's HTTP servers: proxied HTTP and HTTPS, the admin
// endpoints, and the server of the HTTP streams from peers. start opens
// them; Close shuts the proxies down, lets the connections they handed on
// finish, then shuts the admin down. The fields below wg are set by start
// under Ingress.mu and never change after: once Close has marked the
// Ingress closed, start cannot run, so Close reads them without the lock.
type servers struct {
	log *zap.Logger
	wg  sync.WaitGroup // counts the Serve goroutines
	// problem is why there is no HTTPS listener although one was asked
	// for; read without the lock.
	problem atomic.Pointer[string]
	// open counts the HTTP and HTTPS servers' connections, which Release
	// waits to see closed; released, once set, closes each after its next
	// response.
	open     atomic.Int64
	released atomic.Bool

	started            bool
	http, https, admin *server // nil when not listening
	// stream serves the HTTP streams from peers that DialLocal hands to
	// streamLn.
	stream      *server
	streamLn    *streamListener
	streamFresh *unstarted
}

// server is an http.Server with the listener it serves.
type server struct {
	*http.Server
	ln net.Listener
}

// addr returns where s listens, or nil for no server.
func (s *server) addr() net.Addr {
	if s == nil {
		return nil
	}
	return s.ln.Addr()
}

// start listens on cfg.HTTPAddr and cfg.AdminAddr (each if set) and serves
// proxy and admin there, serves the peers' streams with streams, and HTTPS
// if cfg.HTTPSAddr is set. It fails, having opened nothing, if the HTTP or
// admin address cannot be listened on; an HTTPS listener that fails is kept
// for HTTPSProblem. The caller holds Ingress.mu.
func (s *servers) start(cfg Config, proxy, admin, streams http.Handler, certs *tlsState) error {
	if s.started {
		return errors.New("ingress already started")
	}
	var httpLn, adminLn net.Listener
	var err error
	if cfg.HTTPAddr != "" {
		if httpLn, err = cfg.listenTCP(cfg.HTTPAddr); err != nil {
			return fmt.Errorf("ingress listen: %w", err)
		}
	}
	if cfg.AdminAddr != "" {
		if adminLn, err = cfg.listenTCP(cfg.AdminAddr); err != nil {
			if httpLn != nil {
				_ = httpLn.Close() // we are failing Start; nothing was served on it
			}
			return fmt.Errorf("ingress admin listen: %w", err)
		}
	}
	s.started = true
	s.streamLn = newStreamListener()
	s.stream, s.streamFresh = newStreamServer(streams, s.streamLn, s.log)
	s.serve(s.stream)
	if httpLn != nil {
		s.http = s.proxyServer(proxy, httpLn)
		s.serve(s.http)
	}
	if cfg.HTTPSAddr != "" {
		s.startHTTPS(cfg, proxy, certs)
	}
	if adminLn != nil {
		s.admin = &server{Server: &http.Server{Handler: admin, ReadHeaderTimeout: 10 * time.Second, ErrorLog: warnLog(s.log)}, ln: adminLn}
		s.serve(s.admin)
	}
	s.log.Info("ingress started", listenerField("http", s.http), listenerField("https", s.https),
		listenerField("admin", s.admin))
	return nil
}

// proxyServer returns the server of proxied requests on ln, plain or TLS.
func (s *servers) proxyServer(proxy http.Handler, ln net.Listener) *server {
	return &server{Server: &http.Server{
		Handler:           s.closingOnceReleased(proxy),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          warnLog(s.log),
		ConnState:         s.countConn,
	}, ln: ln}
}

// closingOnceReleased serves with h, asking for the connection to close
// after the response once released. Not SetKeepAlivesEnabled(false): it
// also closes the idle connections at once, racing their clients' next
// request, which a client retries only if it is idempotent.
func (s *servers) closingOnceReleased(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.released.Load() {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}

// countConn keeps s.open.
func (s *servers) countConn(_ net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		s.open.Add(1)
	case http.StateClosed, http.StateHijacked:
		s.open.Add(-1)
	}
}

// startHTTPS listens on cfg.HTTPSAddr and serves proxy behind TLS, with HTTP/2,
// presenting the certificates certs picks by SNI. A failure to listen is
// kept for HTTPSProblem: the host serves HTTP all the same.
func (s *servers) startHTTPS(cfg Config, proxy http.Handler, certs *tlsState) {
	addr := cfg.HTTPSAddr
	ln, err := cfg.listenTCP(addr)
	if err != nil {
		problem := fmt.Sprintf("HTTPS listener %s: %v (HTTP keeps serving)", addr, err)
		s.problem.Store(&problem)
		s.log.Error("ingress cannot serve HTTPS", zap.String("addr", addr), zap.Error(err))
		return
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok {
		certs.httpsPort.Store(int32(tcp.Port))
	}
	s.https = s.proxyServer(proxy, ln)
	s.https.TLSConfig = &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: certs.getCertificate,
		NextProtos:     []string{"h2", "http/1.1", acmeTLSALPN},
	}
	s.serve(s.https)
}

// serve runs srv on its listener (behind TLS if it has a TLS config) until
// it is shut down.
func (s *servers) serve(srv *server) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		var err error
		if srv.TLSConfig != nil {
			err = srv.ServeTLS(srv.ln, "", "")
		} else {
			err = srv.Serve(srv.ln)
		}
		if !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) { // net.ErrClosed: released
			s.log.Error("ingress server stopped", zap.Stringer("addr", srv.ln.Addr()), zap.Error(err))
		}
	}()
}

// release stops the HTTP, HTTPS and admin servers from accepting, and
// their open connections from being kept alive (see Ingress.Release): each
// closes after its next response. The caller holds Ingress.mu.
func (s *servers) release() {
	s.released.Store(true)
	for _, srv := range []*server{s.http, s.https, s.admin} {
		if srv != nil {
			_ = srv.ln.Close() // Serve returns net.ErrClosed; Shutdown closes it again
		}
	}
}

// shutdownProxies stops the HTTP, HTTPS and stream servers from accepting
// and lets their requests finish until ctx ends, then cuts what is left.
func (s *servers) shutdownProxies(ctx context.Context) error {
	errs := []error{shutdown(ctx, s.http, "shutdown"), shutdown(ctx, s.https, "HTTPS shutdown")}
	if s.streamFresh != nil {
		s.streamFresh.closeAll()
	}
	return errors.Join(append(errs, shutdown(ctx, s.stream, "shutdown of peer streams"))...)
}

// shutdown shuts srv down, if any, cutting what it could not wait for.
func shutdown(ctx context.Context, srv *server, what string) error {
	if srv == nil {
		return nil
	}
	if err := srv.Shutdown(ctx); err != nil {
		_ = srv.Close() // cut what Shutdown could not wait for
		return fmt.Errorf("ingress %s: %w", what, err)
	}
	return nil
}

// shutdownAdmin stops the admin server, last, so that /healthz answers 503
// while the proxies shut down, and waits for every server's goroutine.
func (s *servers) shutdownAdmin(ctx context.Context) {
	if s.admin != nil {
		if err := s.admin.Shutdown(ctx); err != nil {
			_ = s.admin.Close() // a scrape cut short is harmless
		}
	}
	s.wg.Wait()
}

// listenerField logs where srv listens, or "off" when there is none: a nil
// net.Addr given to zap.Stringer logs a recovered panic, not the address.
func listenerField(key string, srv *server) zap.Field {
	if srv == nil {
		return zap.String(key, "off")
	}
	return zap.String(key, srv.ln.Addr().String())
}
