package mesh

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/contract"
)

// ErrNoMeshYet answers a stream asked for before the mesh could start.
var ErrNoMeshYet = errors.New("mesh: not running yet: no host certificate")

// certWait is how often a Node without a host certificate looks whether it
// got one, to start.
const certWait = time.Second

// HostCertificates is a host's mesh credentials as they change: HostCA is
// nil until the host has a certificate (an agent that joined before host
// certificates gets one from the control plane later), and the certificate
// is renewed in place (agent.HostCerts).
type HostCertificates interface {
	Certificates
	HostCA() *x509.CertPool
}

// LocalReplicas is this host's side of the streams peers open: it dials a
// healthy replica of the workload on this host, HTTP when port is zero,
// else that port, and holds the port to the egg's own (the ingress's
// DialLocal). Only local replicas: a stream never hops on to a third host.
type LocalReplicas interface {
	DialLocal(ctx context.Context, workloadID string, port int) (net.Conn, error)
}

// localDialer is the Server's Dialer over LocalReplicas.
type localDialer struct{ local LocalReplicas }

func (d localDialer) DialWorkload(ctx context.Context, w Workload) (net.Conn, error) {
	return d.local.DialLocal(ctx, w.ID(), w.Port)
}

// Node is a host's end of the mesh: a Server on the mesh port whose streams
// its LocalReplicas serve, and a Client through which this host reaches
// other hosts' replicas (what the ingress calls its Peers). Both need the
// host certificate and the host CA; a Node whose host has none yet holds
// its port and starts them as soon as HostCertificates has one (the ingress
// serves local replicas meanwhile, and DialStream fails with ErrNoMeshYet).
// It lives here, beside the Client and Server it assembles, so that a
// request crossing hosts goes from the ingress to the mesh and back to an
// ingress, and through nothing else. Safe for concurrent use.
type Node struct {
	cfg    Config
	hostID string
	certs  HostCertificates
	ln     net.Listener // the mesh port, held from the start
	log    *zap.Logger

	mu     sync.Mutex // guards peers, client, server and closed
	peers  []contract.Peer
	client *Client
	server *Server
	closed bool

	cancel context.CancelFunc
	done   chan struct{} // closed when the wait for a certificate ends
}

var _ Dialer = localDialer{}

// NewNode returns the Node serving on ln, not started: see Start. cfg's
// Addr is ln's; cfg.Logger is required.
func NewNode(cfg Config, hostID string, certs HostCertificates, ln net.Listener) (*Node, error) {
	cfg.Addr = ln.Addr().String()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("mesh config: %w", err)
	}
	return &Node{cfg: cfg, hostID: hostID, certs: certs, ln: ln, log: cfg.Logger.Named("mesh"), done: make(chan struct{})}, nil
}

// Start starts the server (serving streams from local) and the client now
// if the host certificate is there, else as soon as it comes, until Close.
func (n *Node) Start(local LocalReplicas) error {
	dialer := localDialer{local}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	if n.certs.HostCA() != nil {
		close(n.done)
		return n.startNow(dialer)
	}
	n.log.Warn("no host certificate yet: the mesh starts once the control plane gives one")
	go func() {
		defer close(n.done)
		t := time.NewTicker(certWait)
		defer t.Stop()
		for n.certs.HostCA() == nil {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		if err := n.startNow(dialer); err != nil {
			n.log.Error("mesh not started", zap.Error(err))
		}
	}()
	return nil
}

func (n *Node) startNow(dialer Dialer) error {
	creds := Credentials{HostID: n.hostID, HostCA: n.certs.HostCA(), Certificate: n.certs}
	client, err := NewClient(n.cfg, creds)
	if err != nil {
		return fmt.Errorf("mesh client: %w", err)
	}
	server, err := NewServer(n.cfg, creds, dialer)
	if err != nil {
		_ = client.Close()
		return fmt.Errorf("mesh server: %w", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		_ = client.Close()
		return nil
	}
	client.SetPeers(n.peers)
	server.SetPeers(n.peers)
	if err := server.Serve(n.ln); err != nil {
		_ = client.Close()
		return fmt.Errorf("mesh server: %w", err)
	}
	n.client, n.server = client, server
	n.log.Info("mesh running", zap.Stringer("addr", n.ln.Addr()), zap.Strings("advertise", n.cfg.Advertise))
	return nil
}

// SetPeers installs the valid host set of the latest desired state.
func (n *Node) SetPeers(peers []contract.Peer) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.peers = peers
	if n.client != nil {
		n.client.SetPeers(peers)
		n.server.SetPeers(peers)
	}
}

func (n *Node) currentClient() *Client {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.client
}

// DialStream opens a stream to the workload's replicas on host: HTTP when
// port is zero, else TCP to that port.
func (n *Node) DialStream(ctx context.Context, hostID, workloadID string, port int) (net.Conn, error) {
	c := n.currentClient()
	if c == nil {
		return nil, ErrNoMeshYet
	}
	return c.DialStream(ctx, hostID, workloadID, port)
}

// Alive reports whether the connection to host is alive.
func (n *Node) Alive(hostID string) bool {
	c := n.currentClient()
	return c != nil && c.Alive(hostID)
}

// Close stops the wait for a certificate, then the server (its streams end)
// and the client.
func (n *Node) Close(ctx context.Context) error {
	if n.cancel != nil {
		n.cancel()
		<-n.done
	}
	n.mu.Lock()
	n.closed = true
	client, server := n.client, n.server
	n.mu.Unlock()
	if server == nil {
		_ = n.ln.Close() // never served: nothing else closes it
		return nil
	}
	err := server.Close(ctx)
	_ = client.Close() // it only closes connections; nothing to report
	return err
}
