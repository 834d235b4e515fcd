package ingress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Config sets up an Ingress. Start from DefaultConfig.
type Config struct {
	// HTTPAddr is where Start listens for proxied HTTP requests; empty means
	// Start opens no HTTP listener (the caller serves the Ingress itself).
	HTTPAddr string
	// HTTPSAddr is where Start listens for HTTPS (SNI, HTTP/2), serving
	// Table.Certificates; empty means none. One that cannot be listened on
	// does not fail Start: HTTP keeps serving and HTTPSProblem says why.
	HTTPSAddr string
	// TrustedProxies are the addresses whose X-Forwarded-Proto: https is
	// believed: a TLS-terminating load balancer in front, whose plain HTTP
	// requests for TLS routes must not be redirected (they would loop).
	TrustedProxies []netip.Prefix
	// AdminAddr is where Start serves /healthz and /metrics; empty means none.
	AdminAddr string
	// PublishAddr is the IP published ports listen on; empty means all
	// interfaces.
	PublishAddr string
	// DialTimeout bounds a connection attempt to a backend. It is short
	// because a failed dial is retried on another backend while the client
	// waits.
	DialTimeout time.Duration
	// EjectFor is how long a backend whose dial failed stays out of the pool
	// if the agent keeps reporting it healthy (a dead container is normally
	// reported gone well before).
	EjectFor time.Duration
	// UpstreamTimeout bounds the wait for a backend's response headers on a
	// route that sets none (see Route.UpstreamTimeout).
	UpstreamTimeout time.Duration
	// RemoteDialTimeout bounds opening a mesh stream to another host's
	// replicas: a TCP dial and TLS handshake when no connection to the host
	// is open, then the peer's own dial of a replica.
	RemoteDialTimeout time.Duration
	// DrainTimeout is the drain timeout of an egg whose table entry gives none.
	DrainTimeout time.Duration
	// HoldTimeout bounds how long a stateful egg's requests are held while
	// it has no backend (Egg.Stateful), counted from the moment its last
	// backend left the pool; then they get 503.
	HoldTimeout time.Duration
	// Logger receives the ingress's logs. Required.
	Logger *zap.Logger
	// Peers reaches the eggs' replicas on other hosts (the mesh). Required:
	// a table that names no other host never uses it.
	Peers Peers
	// Registry receives the ingress's metrics and is what /metrics serves.
	// Required: `hatch agent` gives the ingress one of its own.
	Registry *prometheus.Registry
	// Listeners, if set, opens every listener the ingress needs (HTTP,
	// HTTPS, admin, published ports, relay sockets) instead of the ingress
	// itself: the data plane hands them on to its successor this way, so an
	// upgrade closes no listening socket (see package dataplane).
	Listeners Listeners
}

// Listeners opens the ingress's listeners. Listen returns the listener for
// network and address: one kept from an earlier process, else what open
// makes (and may then keep it to hand it on).
type Listeners interface {
	Listen(network, address string, open func() (net.Listener, error)) (net.Listener, error)
}

// listen opens a listener through c.Listeners, or with open itself when
// there is none.
func (c Config) listen(network, address string, open func() (net.Listener, error)) (net.Listener, error) {
	if c.Listeners == nil {
		return open()
	}
	return c.Listeners.Listen(network, address, open)
}

// listenTCP is listen for a TCP address.
func (c Config) listenTCP(address string) (net.Listener, error) {
	return c.listen("tcp", address, func() (net.Listener, error) { return net.Listen("tcp", address) })
}

// DefaultConfig returns the settings `hatch agent` uses unless told
// otherwise; the caller adds the Logger and the Registry.
func DefaultConfig() Config {
	return Config{
		HTTPAddr:          ":8080",
		AdminAddr:         "127.0.0.1:7701",
		PublishAddr:       "0.0.0.0",
		DialTimeout:       250 * time.Millisecond,
		EjectFor:          5 * time.Second,
		UpstreamTimeout:   30 * time.Second,
		RemoteDialTimeout: time.Second,
		DrainTimeout:      10 * time.Second,
		HoldTimeout:       10 * time.Second,
	}
}

// Validate reports every setting that cannot work, missing dependencies
// included.
func (c Config) Validate() error {
	var errs []error
	if c.Logger == nil {
		errs = append(errs, errors.New("no logger (Logger)"))
	}
	if c.Peers == nil {
		errs = append(errs, errors.New("no mesh client (Peers)"))
	}
	if c.Registry == nil {
		errs = append(errs, errors.New("no metrics registry (Registry)"))
	}
	for _, a := range []struct{ name, addr string }{{"HTTPAddr", c.HTTPAddr}, {"HTTPSAddr", c.HTTPSAddr}, {"AdminAddr", c.AdminAddr}} {
		if a.addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", a.name, a.addr, err))
		}
	}
	if c.PublishAddr != "" {
		if _, err := netip.ParseAddr(c.PublishAddr); err != nil {
			errs = append(errs, fmt.Errorf("PublishAddr %q: want an IP address: %w", c.PublishAddr, err))
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"DialTimeout", c.DialTimeout}, {"EjectFor", c.EjectFor}, {"UpstreamTimeout", c.UpstreamTimeout}, {"RemoteDialTimeout", c.RemoteDialTimeout}, {"DrainTimeout", c.DrainTimeout}, {"HoldTimeout", c.HoldTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", d.name, d.v))
		}
	}
	return errors.Join(errs...)
}
