// Package server is the control plane's HTTP API. It maps each request to
// a call of a service, the apply protocol (package deploy) or the fleet
// (package fleet), and the answer back; besides that it does only what
// belongs to HTTP: authentication and the limit on failed ones, the route
// table with each route's access rule, deadline and body limit, and the
// long-polls and event streams. The server never connects to a host:
// agents only ever pull.
//
// Invariants:
//   - A change of a host's desired state wakes every one of its waiting
//     long-polls at once; a long-poll otherwise returns after its wait.
//   - Every route has a body limit and a deadline of its own; streams have no
//     deadline and send keep-alive comments instead. There is no server-wide
//     write timeout that would cut them.
//   - Close (and Serve's shutdown) lets requests in flight finish and makes
//     long-polls and streams return at once.
//   - Every long-poll and stream is held under its principal (package
//     holds): a host holds at most pollsPerHost polls per endpoint, and what
//     a revoked token or a removed host holds ends (watchRights); a long-poll
//     that waited checks its token again before it answers.
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

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/deploy"
	"github.com/hatchery/hatchery/internal/fleet"
	"github.com/hatchery/hatchery/internal/holds"
	"github.com/hatchery/hatchery/internal/leader"
	"github.com/hatchery/hatchery/internal/seal"
	"github.com/hatchery/hatchery/internal/sessionbroker"
	"github.com/hatchery/hatchery/internal/store"
)

// Config tunes the HTTP side of the server. The zero value is not valid:
// start from DefaultConfig.
type Config struct {
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
	// ShutdownTimeout bounds how long Serve waits for requests in flight.
	ShutdownTimeout time.Duration
	// AuthFailureBurst is how many failed authentications in a row a client
	// address may make before it is answered 429; one is forgiven every
	// AuthFailureRefill.
	AuthFailureBurst  int
	AuthFailureRefill time.Duration
	// Sessions are the limits of `hatch logs` and `hatch exec` streams.
	Sessions sessionbroker.Config
}

// DefaultConfig returns the defaults documented in docs/API.md.
func DefaultConfig() Config {
	return Config{
		MaxWait:         5 * time.Minute,
		WaitMargin:      10 * time.Second,
		RequestTimeout:  30 * time.Second,
		BlobTimeout:     30 * time.Minute,
		KeepAlive:       15 * time.Second,
		MaxBodyBytes:    4 << 20,
		MaxBlobBytes:    1 << 30,
		ShutdownTimeout: 30 * time.Second,

		AuthFailureBurst:  20,
		AuthFailureRefill: time.Second,
		Sessions:          sessionbroker.DefaultConfig(),
	}
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"max wait", c.MaxWait}, {"wait margin", c.WaitMargin}, {"request timeout", c.RequestTimeout},
		{"blob timeout", c.BlobTimeout}, {"keep-alive", c.KeepAlive}, {"shutdown timeout", c.ShutdownTimeout},
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
	if err := c.Sessions.Validate(); err != nil {
		return fmt.Errorf("server config: %w", err)
	}
	return nil
}

// DesiredStates is what the agents' long-poll reads: a host's desired state,
// the fleet's peer list, and a wake-up at the next change of either.
type DesiredStates interface {
	DesiredState(ctx context.Context, hostID string) (store.DesiredState, error)
	DesiredPeers(ctx context.Context) (store.PeerList, error)
	DesiredPeersVersion(ctx context.Context) (string, error)
	WatchDesiredState(hostID string) <-chan struct{}
}

// ServerList is the control plane's live servers, as every desired-state
// answer names them (package roster): the list, and a channel closed at its
// next change, which ends the long-polls held (so hosts hear of it at once).
type ServerList interface {
	Servers() ([]string, <-chan struct{})
}

// CertificateLister lists the certificates of the hostnames served over
// HTTPS.
type CertificateLister interface {
	Certificates(ctx context.Context) ([]api.Certificate, error)
}

// CertificateLoop obtains and renews the certificates of TLS routes (the
// ACME client): a background loop, run by the one server running them.
type CertificateLoop interface {
	Run(ctx context.Context)
}

// Deps are what the server works with; every one is required but those
// marked optional.
type Deps struct {
	// Deploy is the apply protocol, Fleet the hosts and what runs on them.
	// The server starts and stops both with itself.
	Deploy *deploy.Service
	Fleet  *fleet.Service
	// Jobs are runs and schedules (internal/jobs).
	Jobs Jobs
	// Backups are volume backups and restores (internal/volumes).
	Backups Backups
	// Loops elects the one server that runs both services' background
	// loops; the server runs it with itself.
	Loops *leader.Elector
	// Desired are the hosts' desired states, which their long-polls wait on,
	// and Box opens the secret values sealed in them.
	Desired DesiredStates
	Box     *seal.Box
	Blobs   BlobStore
	Auth    Authenticator
	// Servers are the live servers' URLs, sent with every desired state
	// (api.HeaderServers) so that hosts fail over to any of them.
	Servers ServerList
	Logger  *zap.Logger
	// Certificates is the ACME client's loop, run with the other
	// background loops; nil when the server has no ACME CA (optional).
	Certificates CertificateLoop
	// TLS lists the certificates of the hostnames served over HTTPS, for
	// status (optional: none).
	TLS CertificateLister
	// Notifications delivers the webhooks (package notify), run with the
	// other background loops (optional: none).
	Notifications BackgroundLoop
	// Now is the clock.
	Now func() time.Time
}

func (d Deps) validate() error {
	if d.Deploy == nil || d.Fleet == nil || d.Jobs == nil || d.Backups == nil || d.Loops == nil || d.Desired == nil || d.Box == nil || d.Blobs == nil || d.Auth == nil ||
		d.Servers == nil || d.Logger == nil || d.Now == nil {
		return errors.New("server: every dependency must be set")
	}
	return nil
}

// Server is the control plane's API. Start launches its services'
// background work, Close stops it; Serve does both around an HTTP server.
type Server struct {
	cfg     Config
	deps    Deps
	log     *zap.Logger
	now     func() time.Time
	metrics *metrics
	handler http.Handler
	limiter *failureLimiter
	// sessions pairs operators' streams with the ones agents open for them.
	sessions *sessionbroker.Broker
	peers    peerCache
	// holds are the streams and long-polls held open, by principal: bounded
	// per host, ended when a right ends (watchRights).
	holds *holds.Registry

	// closing is closed by Drain: long-polls and streams return when it is.
	closing   chan struct{}
	drainOnce sync.Once
	started   bool // set by Start: Close stops the services only then
	// stopLoops ends the elector's run and the rights check, and loopsDone
	// is closed once they returned; both set by Start.
	stopLoops context.CancelFunc
	loopsDone chan struct{}
}

// New returns a server; nothing runs until Start or Serve.
func New(cfg Config, deps Deps) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := deps.validate(); err != nil {
		return nil, err
	}
	broker, err := sessionbroker.New(cfg.Sessions)
	if err != nil {
		return nil, err
	}
	held, err := holds.New(holdLimits())
	if err != nil {
		return nil, err
	}
	s := &Server{
		sessions: broker,
		holds:    held,
		cfg:      cfg,
		deps:     deps,
		log:      deps.Logger,
		now:      deps.Now,
		metrics:  newMetrics(deps.Blobs, append(deps.Loops.Collectors(), deps.Fleet.Collector(), deps.Jobs.Collector(), deps.Backups.Collector())...),
		closing:  make(chan struct{}),
		limiter:  newFailureLimiter(cfg.AuthFailureBurst, cfg.AuthFailureRefill),
	}
	s.metrics.registry.MustRegister(heldOpenGauge(held))
	s.handler = s.routes()
	return s, nil
}

// Handler returns the API's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Start begins the services' life: the fleet first, then the apply
// protocol, which recovers from the server's previous life (releasing its
// leases, the loops' among them), then the election of the one server that
// runs the background loops, which runs them here while this server holds
// their lease; and the check that ends what revoked tokens and removed hosts
// hold open (watchRights), on every server.
func (s *Server) Start(ctx context.Context) error {
	if err := s.deps.Fleet.Start(ctx); err != nil {
		return fmt.Errorf("start the fleet: %w", err)
	}
	if err := s.deps.Deploy.Start(ctx); err != nil {
		return fmt.Errorf("start applies: %w", err)
	}
	loopsCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stopLoops, s.loopsDone = stop, make(chan struct{})
	go func() {
		defer close(s.loopsDone)
		var wg sync.WaitGroup
		wg.Go(func() { s.watchRights(loopsCtx) })
		s.deps.Loops.Run(loopsCtx, s.beginLoops)
		wg.Wait()
	}()
	s.started = true
	// The first try settles before the server answers: on SQLite (one
	// server) the loops have begun, every host is unknown.
	select {
	case <-s.deps.Loops.FirstTry():
	case <-ctx.Done():
	}
	return nil
}

// beginLoops begins both services' background loops and returns what runs
// them until its context ends.
func (s *Server) beginLoops(ctx context.Context) (func(context.Context), error) {
	if err := s.deps.Fleet.BeginLoops(ctx); err != nil {
		return nil, err
	}
	runDeploy, err := s.deps.Deploy.BeginLoops(ctx)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) {
		var wg sync.WaitGroup
		wg.Go(func() { s.deps.Fleet.RunLoops(ctx) })
		wg.Go(func() { runDeploy(ctx) })
		if s.deps.Certificates != nil {
			wg.Go(func() { s.deps.Certificates.Run(ctx) })
		}
		if s.deps.Notifications != nil {
			wg.Go(func() { s.deps.Notifications.Run(ctx) })
		}
		wg.Wait()
	}, nil
}

// Drain makes every long-poll and stream return now and any new one return
// at once; plain requests are served as usual.
func (s *Server) Drain() { s.drainOnce.Do(func() { close(s.closing) }) }

// Close drains, stops the services' background work and waits for it.
func (s *Server) Close() {
	s.Drain()
	if s.started {
		s.stopLoops()
		<-s.loopsDone
		s.deps.Deploy.Close()
	}
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
