// Package mesh is the transport between agents: every agent serves one mesh
// port, and a connection to an egg whose healthy replica runs on another host
// travels there as a stream of one HTTP/2 connection per pair of hosts.
//
// Invariants:
//   - Both ends authenticate with host certificates from the host CA (and
//     nothing else: not the control plane's CA, not a certificate without
//     the hatch://host/<id> URI). A caller without a valid host certificate
//     gets no HTTP answer at all: its TLS handshake fails.
//   - A peer is accepted only while it is in the valid host set the control
//     plane sends with each desired state; when it leaves the set, its open
//     connections, both directions, are closed at once.
//   - A peer may open a stream only to the workloads, and on the ports, its
//     entry in the set says it streams to (contract.Peer.MayOpen: HTTP where
//     it routes the egg, a published port's target, the egg's port for its
//     relays; 403 otherwise, before anything is dialled); the workload is
//     dialled on this host through the Dialer (503 when no healthy replica
//     is there), which holds the port to the egg's own too. A stream whose
//     workload or port leaves the peer's entry is reset at once.
//   - A dead peer is found by HTTP/2 pings: one after KeepAlive without a
//     frame, the connection closed when it goes unanswered KeepAliveTimeout,
//     so about two seconds with the defaults; and by a failed dial.
//
// Streams are HTTP/2 requests (net/http's HTTP/2, no framing of our own): POST /v1/stream/<namespace>/<project>/<egg>, the request body the
// caller's bytes and the response body the workload's. The caller's
// half-close (CloseWrite) reaches the workload as EOF and the workload can
// still answer; the workload's end of output ends the stream both ways (an
// HTTP handler cannot end its response and go on reading).
package mesh

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/contract"
)

// DefaultPort is the mesh's port unless told otherwise.
const DefaultPort = 7702

// Config tunes the mesh. Start from DefaultConfig.
type Config struct {
	// Addr is where the Server listens, host:port (default ":7702").
	Addr string
	// Advertise are the addresses peers dial, tried in order (default:
	// every non-loopback address of the host, with Addr's port; see
	// DefaultAdvertise).
	Advertise []string
	// KeepAlive is how long a connection may go without a frame before it
	// is pinged, and KeepAliveTimeout how long the ping may go unanswered
	// before the connection is closed as dead.
	KeepAlive        time.Duration
	KeepAliveTimeout time.Duration
	// DialTimeout bounds one TCP dial of one peer address, and
	// HandshakeTimeout the TLS handshake that follows (both ways).
	DialTimeout      time.Duration
	HandshakeTimeout time.Duration
	// MaxConcurrentStreams is how many streams one connection carries.
	MaxConcurrentStreams uint32
	// DialWorkloadTimeout bounds the Dialer's call for one stream.
	DialWorkloadTimeout time.Duration
	// Logger is where the mesh logs (required: DefaultConfig leaves it to
	// the caller).
	Logger *zap.Logger
}

// DefaultConfig returns the defaults: port 7702, a ping after 1 s without a
// frame and the peer dead 1 s later. It has no Logger: the caller sets one.
func DefaultConfig() Config {
	return Config{
		Addr:                 ":" + strconv.Itoa(DefaultPort),
		KeepAlive:            time.Second,
		KeepAliveTimeout:     time.Second,
		DialTimeout:          2 * time.Second,
		HandshakeTimeout:     5 * time.Second,
		MaxConcurrentStreams: 1000,
		DialWorkloadTimeout:  5 * time.Second,
	}
}

// Validate joins every setting that cannot work.
func (c Config) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		errs = append(errs, fmt.Errorf("mesh address %q: want host:port (for example :%d)", c.Addr, DefaultPort))
	}
	for _, a := range c.Advertise {
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" || port == "" || port == "0" {
			errs = append(errs, fmt.Errorf("advertised address %q: want host:port with both set", a))
		}
	}
	if c.KeepAlive <= 0 || c.KeepAlive > time.Second {
		errs = append(errs, fmt.Errorf("mesh keep-alive %v: want more than 0 and at most 1s (a dead peer must be found within seconds)", c.KeepAlive))
	}
	if c.KeepAliveTimeout <= 0 || c.KeepAliveTimeout > time.Second {
		errs = append(errs, fmt.Errorf("mesh keep-alive timeout %v: want more than 0 and at most 1s", c.KeepAliveTimeout))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"dial timeout", c.DialTimeout}, {"handshake timeout", c.HandshakeTimeout}, {"workload dial timeout", c.DialWorkloadTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("mesh %s must be positive, not %v", d.name, d.v))
		}
	}
	if c.MaxConcurrentStreams < 1 {
		errs = append(errs, errors.New("mesh max concurrent streams must be at least 1"))
	}
	if c.Logger == nil {
		errs = append(errs, errors.New("mesh: no logger"))
	}
	return errors.Join(errs...)
}

// DefaultAdvertise returns host:port for every non-loopback unicast address
// of this host (link-local IPv6 addresses, which need a zone, left out),
// IPv4 first, in the order of the interfaces: what peers try, in order,
// when --advertise is not given. It returns at most
// contract.MaxMeshAddresses, the most a report may carry: a Docker host has
// an address on every bridge network, one per project network.
func DefaultAdvertise(port int) ([]string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list the host's addresses: %w", err)
	}
	var v4, v6 []string
	for _, a := range addrs {
		ipNet, ok := a.(*net.IPNet)
		if !ok || ipNet.IP.IsLoopback() || !ipNet.IP.IsGlobalUnicast() {
			continue
		}
		hp := net.JoinHostPort(ipNet.IP.String(), strconv.Itoa(port))
		if ipNet.IP.To4() != nil {
			v4 = append(v4, hp)
		} else {
			v6 = append(v6, hp)
		}
	}
	all := append(v4, v6...)
	return all[:min(len(all), contract.MaxMeshAddresses)], nil
}
