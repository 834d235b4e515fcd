// Package server is the control plane's HTTP API: hosts long-poll their
// desired state and report their status (which is also their heartbeat),
// clients upload source blobs, follow the event log and read hosts and
// projects. The server never connects to a host: agents only ever pull.
//
// Invariants:
//   - A change of a host's desired state wakes every one of its waiting
//     long-polls at once; a long-poll otherwise returns after its wait.
//   - A host is down only after the liveness timeout without a report, and
//     never within one timeout of the server's start: a restart of the server
//     is not an outage of the fleet. Liveness never changes a desired state.
//   - Every route has a body limit and a deadline of its own; streams have no
//     deadline and send keep-alive comments instead. There is no server-wide
//     write timeout that would cut them.
//   - Close (and Serve's shutdown) lets requests in flight finish and makes
//     long-polls and streams return at once.
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/blob"
	"github.com/hatchery/hatchery/internal/seal"
	"github.com/hatchery/hatchery/internal/store"
)

// Config tunes the server. The zero value is not valid: start from DefaultConfig.
type Config struct {
	// LivenessTimeout is how long a host may go without a report before it is
	// marked down (agents report every 2 s).
	LivenessTimeout time.Duration
	// MaxWait caps the wait a long-poll may ask for.
	MaxWait time.Duration
	// WaitMargin is added to a long-poll's wait to make its deadline.
	WaitMargin time.Duration
	// RequestTimeout is the deadline of every plain request.
	RequestTimeout time.Duration
	// BlobTimeout is the deadline of a blob upload or download.
	BlobTimeout time.Duration
	// KeepAlive is how often an idle event stream gets a comment line.
	KeepAlive time.Duration
	// MaxBodyBytes limits JSON request bodies.
	MaxBodyBytes int64
	// MaxBlobBytes limits a blob's size.
	MaxBlobBytes int64
	// BlobGrace is how long an unreferenced blob is kept after its upload or
	// its last HEAD, and BlobGCInterval how often unreferenced blobs are sought.
	BlobGrace      time.Duration
	BlobGCInterval time.Duration
	// ShutdownTimeout bounds how long Serve waits for requests in flight.
	ShutdownTimeout time.Duration
	// AuthFailureBurst is how many failed authentications in a row a client
	// address may make before it is answered 429; one is forgiven every
	// AuthFailureRefill.
	AuthFailureBurst  int
	AuthFailureRefill time.Duration
}

// DefaultConfig returns the defaults documented in docs/API.md.
func DefaultConfig() Config {
	return Config{
		LivenessTimeout: 6 * time.Second,
		MaxWait:         5 * time.Minute,
		WaitMargin:      10 * time.Second,
		RequestTimeout:  30 * time.Second,
		BlobTimeout:     30 * time.Minute,
		KeepAlive:       15 * time.Second,
		MaxBodyBytes:    4 << 20,
		MaxBlobBytes:    1 << 30,
		BlobGrace:       time.Hour,
		BlobGCInterval:  10 * time.Minute,
		ShutdownTimeout: 30 * time.Second,

		AuthFailureBurst:  20,
		AuthFailureRefill: time.Second,
	}
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"liveness timeout", c.LivenessTimeout}, {"max wait", c.MaxWait}, {"wait margin", c.WaitMargin},
		{"request timeout", c.RequestTimeout}, {"blob timeout", c.BlobTimeout}, {"keep-alive", c.KeepAlive},
		{"blob grace", c.BlobGrace}, {"blob gc interval", c.BlobGCInterval}, {"shutdown timeout", c.ShutdownTimeout},
		{"auth failure refill", c.AuthFailureRefill},
	} {
		if d.v <= 0 {
			return fmt.Errorf("server config: %s must be positive, not %v", d.name, d.v)
		}
	}
	if c.MaxBodyBytes <= 0 || c.MaxBlobBytes <= 0 {
		return fmt.Errorf("server config: body and blob size limits must be positive")
	}
	if c.AuthFailureBurst < 1 {
		return fmt.Errorf("server config: auth failure burst must be at least 1, not %d", c.AuthFailureBurst)
	}
	return nil
}

// Deps are what the server works with. Each store interface is the narrow one
// its handlers need; one store implementation usually provides them all.
type Deps struct {
	Liveness  store.Liveness
	Statuses  store.Statuses
	Desired   store.DesiredStates
	Events    store.Events
	Retention store.BlobRetention
	Applies   store.ApplyHistory
	Projects  store.Projects
	Blobs     *blob.Store
	// Box opens the secret values sealed in stored desired states.
	Box  *seal.Box
	Auth Authenticator
	// Tokens keeps join tokens and joined hosts; without it (tests of other
	// concerns) the join and token endpoints do not exist.
	Tokens store.Tokens
	// Fingerprint is the served CA's fingerprint, which every token the
	// server issues carries; required with Tokens.
	Fingerprint string
	// HostCA signs the certificates hosts present to each other on the
	// mesh (pki.HostCA); required with Tokens.
	HostCA HostSigner
	// Apply runs plans, applies, rollouts and rescheduling; without it (tests
	// of other concerns) those endpoints and loops do not exist.
	Apply *ApplyDeps
	// Logger may be nil (no logs).
	Logger *zap.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (d Deps) validate() error {
	if d.Liveness == nil || d.Statuses == nil || d.Desired == nil || d.Events == nil || d.Retention == nil ||
		d.Applies == nil || d.Projects == nil || d.Blobs == nil || d.Box == nil || d.Auth == nil {
		return errors.New("server: every dependency but Logger, Now and Tokens must be set")
	}
	if d.Apply != nil {
		if err := d.Apply.validate(); err != nil {
			return err
		}
	}
	if d.Tokens != nil {
		if err := checkFingerprint(d.Fingerprint); err != nil {
			return fmt.Errorf("server: the tokens it issues need the CA's fingerprint: %w", err)
		}
		if d.HostCA == nil {
			return errors.New("server: joining hosts need the host CA (Deps.HostCA)")
		}
	}
	return nil
}

// HostSigner issues host certificates; pki.HostCA is the one.
type HostSigner interface {
	// SignHost signs the key of a PEM CSR for hostID; an error wrapping
	// pki.ErrBadCSR is the request's fault.
	SignHost(csrPEM []byte, hostID string, now time.Time) ([]byte, error)
	// CertPEM is the host CA's certificate.
	CertPEM() []byte
}

// Server is the control plane's API. Start launches its background work,
// Close stops it; Serve does both around an HTTP server.
type Server struct {
	cfg     Config
	deps    Deps
	log     *zap.Logger
	now     func() time.Time
	metrics *metrics
	handler http.Handler

	liveness *liveness
	rollouts *rolloutTracker
	limiter  *failureLimiter
	applies  *applier // nil without Deps.Apply

	// closing is closed by Drain: long-polls and streams return when it is.
	closing   chan struct{}
	drainOnce sync.Once
	stop      context.CancelFunc // stops the background loops; set by Start
	loops     sync.WaitGroup
}

// New returns a server; nothing runs until Start or Serve.
func New(cfg Config, deps Deps) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := deps.validate(); err != nil {
		return nil, err
	}
	log := deps.Logger
	if log == nil {
		log = zap.NewNop()
	}
	now := deps.Now
	if now == nil {
		now = time.Now
	}
	s := &Server{
		cfg:      cfg,
		deps:     deps,
		log:      log,
		now:      now,
		metrics:  newMetrics(deps.Blobs),
		closing:  make(chan struct{}),
		rollouts: newRolloutTracker(),
		limiter:  newFailureLimiter(cfg.AuthFailureBurst, cfg.AuthFailureRefill),
	}
	s.liveness = &liveness{store: deps.Liveness, timeout: cfg.LivenessTimeout, now: now, log: log.With(zap.String("component", "liveness")), hosts: s.metrics.hosts}
	if deps.Apply != nil {
		s.applies = newApplier(s, *deps.Apply)
	}
	s.handler = s.routes()
	return s, nil
}

// Handler returns the API's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Start begins the server's life: every host becomes unknown (the server has
// heard from none yet), then the liveness monitor and the blob collector run
// until Close.
func (s *Server) Start(ctx context.Context) error {
	if err := s.liveness.begin(ctx); err != nil {
		return err
	}
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.stop = cancel
	s.loops.Go(func() { s.liveness.run(loopCtx) })
	s.loops.Go(func() { s.collectBlobs(loopCtx) })
	if s.applies != nil {
		if err := s.applies.start(ctx, loopCtx); err != nil {
			return fmt.Errorf("start applies: %w", err)
		}
	}
	return nil
}

// Drain makes every long-poll and stream return now and any new one return
// at once; plain requests are served as usual.
func (s *Server) Drain() { s.drainOnce.Do(func() { close(s.closing) }) }

// Close drains, stops the background loops and waits for them.
func (s *Server) Close() {
	s.Drain()
	if s.stop != nil {
		s.stop()
	}
	s.loops.Wait()
}

// Serve runs the API on ln until ctx is done, then shuts down gracefully:
// long-polls and streams return, requests in flight finish (within
// ShutdownTimeout), and the background loops stop. The caller closes the store.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if err := s.Start(ctx); err != nil {
		ln.Close()
		return err
	}
	defer s.Close()
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          zap.NewStdLog(s.log.With(zap.String("component", "http"))),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	s.Drain()
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// collectBlobs removes unreferenced blobs past their grace, every BlobGCInterval.
func (s *Server) collectBlobs(ctx context.Context) {
	log := s.log.With(zap.String("component", "blob-gc"))
	t := time.NewTicker(s.cfg.BlobGCInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.collectOnce(ctx); err != nil && ctx.Err() == nil {
			log.Warn("blob collection failed", zap.Error(err))
		}
	}
}

func (s *Server) collectOnce(ctx context.Context) error {
	refs, err := s.deps.Retention.ReferencedBlobs(ctx)
	if err != nil {
		return err
	}
	removed, err := s.deps.Blobs.Collect(ctx, refs, s.cfg.BlobGrace)
	for _, b := range removed {
		s.log.Info("collected unreferenced blob", zap.String("digest", b.Digest), zap.Int64("bytes", b.Size))
	}
	return err
}
