package ingress

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"time"
)

// Table is everything the ingress routes on one host, as the agent last saw
// it. Update replaces the whole table at once; a table that fails validation
// changes nothing.
type Table struct {
	Eggs []Egg
	// Certificates are served on the HTTPS listener, picked by the
	// client's SNI. One that does not parse is reported by Update and left
	// out; the rest of the table applies.
	Certificates []Certificate
	// Challenges are ACME HTTP-01 key authorizations by token, answered at
	// /.well-known/acme-challenge/<token> on every host and path.
	Challenges map[string]string
	// ALPNChallenges are ACME TLS-ALPN-01 certificates, presented on the
	// HTTPS listener to a client asking for acme-tls/1 with their Host.
	ALPNChallenges []Certificate
}

// Certificate is a hostname's certificate chain and private key, PEM. The
// key is never logged.
type Certificate struct {
	Host  string
	Chain []byte
	Key   []byte
	// Token is a TLS-ALPN-01 challenge's (ALPNChallenges only).
	Token string
}

// Egg is one egg's share of the table.
type Egg struct {
	// Name identifies the egg in 503 bodies, logs and metrics; the agent
	// passes the workload ID ("namespace/project/egg"). Unique in a table.
	Name string
	// Routes are the hostnames (with optional path prefixes) served by the egg.
	Routes []Route
	// Ports are the TCP ports published for the egg on this host.
	Ports []Port
	// Sockets are Unix sockets whose connections are served like a
	// published port's: those of the egg's relays on this host's Docker
	// networks, which stand for it under its name.
	Sockets []Socket
	// Port is the egg's own port inside its containers (zero: none), which
	// other hosts' relays stream to. With the targets of Ports and Sockets
	// it is the only port a TCP stream from a peer may reach (DialLocal).
	Port int
	// DrainTimeout bounds Drain for the egg's backends; zero means
	// Config.DrainTimeout.
	DrainTimeout time.Duration
	// Stateful says the egg's replica here rolls and restarts stop-first
	// (one writer of a volume), so that losing its last backend is a gap
	// that ends by itself: requests and connections that find no backend
	// then are held, up to Config.HoldTimeout, and sent to the next one
	// to join, rather than failed. Requests from peers' ingresses are held
	// here too. The agent sets it only while a replica is desired here.
	Stateful bool
	// Backends are the egg's local containers, healthy or not.
	Backends []Backend
	// Remote are the IDs of the other hosts running the egg's replicas,
	// reached through Config.Peers when no local backend is available.
	// Requests and connections that came from a peer never go to them.
	Remote []string
}

// Route sends the requests for Host whose path is PathPrefix or lies under it
// to an egg. The path is forwarded as it came, prefix included.
type Route struct {
	// Host is a hostname without port, matched case-insensitively.
	Host string
	// PathPrefix is empty (every path) or starts with "/"; it matches whole
	// path segments: "/v1" matches "/v1" and "/v1/x" but not "/v10".
	PathPrefix string
	// UpstreamTimeout bounds the wait for a backend's response headers
	// (zero: Config.UpstreamTimeout). A backend past it is ejected at once,
	// like one whose dial failed, and a request without a body goes to
	// another; streaming bodies (SSE, downloads) and upgraded connections
	// are not bounded once the headers came.
	UpstreamTimeout time.Duration
	// TLS sends plain HTTP requests for the route to HTTPS (308) once the
	// host's certificate is loaded, except ACME challenges and those a
	// trusted proxy says came over HTTPS.
	TLS bool
	// HSTS adds Strict-Transport-Security to the route's HTTPS answers.
	HSTS bool
}

// ParseRoute reads a route as hatch.yaml writes it: a hostname, optionally
// followed by a path prefix, as in "api.localhost/v1".
func ParseRoute(s string) (Route, error) {
	host, prefix, hasPath := strings.Cut(s, "/")
	r := Route{Host: host}
	if hasPath {
		r.PathPrefix = "/" + prefix
	}
	r = r.normalized()
	if err := r.validate(); err != nil {
		return Route{}, err
	}
	return r, nil
}

// String returns the route as hatch.yaml writes it.
func (r Route) String() string { return r.Host + r.PathPrefix }

// key is what makes two routes the same claim: host and prefix, whatever
// their settings.
func (r Route) key() Route { return Route{Host: r.Host, PathPrefix: r.PathPrefix} }

// normalized lowercases the host and drops what does not change the meaning:
// a trailing dot on the host, trailing slashes on the prefix.
func (r Route) normalized() Route {
	r.Host = strings.TrimSuffix(strings.ToLower(r.Host), ".")
	r.PathPrefix = strings.TrimRight(r.PathPrefix, "/")
	return r
}

func (r Route) validate() error {
	switch {
	case r.Host == "":
		return fmt.Errorf("route %q: no hostname", r.String())
	case strings.ContainsAny(r.Host, ":/?# \t"):
		return fmt.Errorf("route %q: hostname %q may not hold a port, path or space", r.String(), r.Host)
	case r.PathPrefix != "" && !strings.HasPrefix(r.PathPrefix, "/"):
		return fmt.Errorf("route %q: path prefix must start with /", r.String())
	case strings.ContainsAny(r.PathPrefix, "?# \t"):
		return fmt.Errorf("route %q: path prefix may not hold a query, fragment or space", r.String())
	case r.UpstreamTimeout < 0:
		return fmt.Errorf("route %q: negative upstream timeout %s", r.String(), r.UpstreamTimeout)
	}
	return nil
}

// Port publishes an egg on a host port.
type Port struct {
	// Published is the port the ingress listens on (at Config.PublishAddr).
	Published int
	// Target is the egg's port inside its containers; zero means the port of
	// each backend's Addr.
	Target int
}

// Socket is a Unix socket the ingress listens on for an egg.
type Socket struct {
	// Path is where the socket is made (an absolute path; a stale socket
	// there is replaced, and its directory made if missing).
	Path string
	// Target is the egg's port inside its containers. Required: a
	// connection may go to another host's replica, and the stream there
	// names the port.
	Target int
}

// Backend is one container of an egg.
type Backend struct {
	// ContainerID is Docker's ID; Drain and Gone name backends by it.
	ContainerID string
	// Addr is where the container serves HTTP, "ip:port".
	Addr string
	// Healthy says the container passes its health check; only healthy
	// backends join the pool.
	Healthy bool
}

// Check reports what makes Update refuse t whole (every problem, each
// naming its egg); nil for a table Update applies, if perhaps not all of it
// (a published port that cannot be listened on).
func (t Table) Check() error {
	_, err := validate(t)
	return err
}

// validate checks a table and returns it with its routes normalized. Every
// problem is reported, each naming its egg.
func validate(t Table) (Table, error) {
	var errs []error
	eggs := make(map[string]bool, len(t.Eggs))
	routes := make(map[Route]string)
	ports := make(map[int]string)
	sockets := make(map[string]string)
	containers := make(map[string]string)
	out := Table{Eggs: make([]Egg, len(t.Eggs)), Certificates: t.Certificates, Challenges: t.Challenges, ALPNChallenges: t.ALPNChallenges}
	for i, e := range t.Eggs {
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("egg %q: "+format, append([]any{e.Name}, args...)...))
		}
		switch {
		case e.Name == "":
			errs = append(errs, fmt.Errorf("egg #%d has no name", i))
		case eggs[e.Name]:
			bad("listed twice")
		}
		eggs[e.Name] = true
		if e.DrainTimeout < 0 {
			bad("negative drain timeout %s", e.DrainTimeout)
		}
		if e.Port < 0 || e.Port > 65535 {
			bad("port %d out of range", e.Port)
		}
		e.Routes = append([]Route(nil), e.Routes...)
		for j, r := range e.Routes {
			r = r.normalized()
			e.Routes[j] = r
			if err := r.validate(); err != nil {
				bad("%w", err)
				continue
			}
			if holder, taken := routes[r.key()]; taken {
				bad("route %q is already held by egg %q", r.String(), holder)
				continue
			}
			routes[r.key()] = e.Name
		}
		for _, p := range e.Ports {
			if p.Published < 1 || p.Published > 65535 || p.Target < 0 || p.Target > 65535 {
				bad("port %d:%d out of range", p.Published, p.Target)
				continue
			}
			if holder, taken := ports[p.Published]; taken {
				bad("published port %d is already held by egg %q", p.Published, holder)
				continue
			}
			ports[p.Published] = e.Name
		}
		for _, so := range e.Sockets {
			switch {
			case !filepath.IsAbs(so.Path):
				bad("socket %q: want an absolute path", so.Path)
			case so.Target < 1 || so.Target > 65535:
				bad("socket %q: target port %d out of range", so.Path, so.Target)
			case sockets[so.Path] != "":
				bad("socket %q is already held by egg %q", so.Path, sockets[so.Path])
			default:
				sockets[so.Path] = e.Name
			}
		}
		hosts := make(map[string]bool, len(e.Remote))
		for _, h := range e.Remote {
			switch {
			case h == "":
				bad("a remote host without an ID")
			case hosts[h]:
				bad("remote host %q listed twice", h)
			}
			hosts[h] = true
		}
		for _, b := range e.Backends {
			if b.ContainerID == "" {
				bad("backend %q has no container ID", b.Addr)
				continue
			}
			if holder, taken := containers[b.ContainerID]; taken {
				bad("container %s is already a backend of egg %q", b.ContainerID, holder)
				continue
			}
			containers[b.ContainerID] = e.Name
			if ap, err := netip.ParseAddrPort(b.Addr); err != nil || ap.Port() == 0 {
				bad("container %s: address %q is not ip:port", b.ContainerID, b.Addr)
			}
		}
		out.Eggs[i] = e
	}
	if err := errors.Join(errs...); err != nil {
		return Table{}, err
	}
	return out, nil
}
