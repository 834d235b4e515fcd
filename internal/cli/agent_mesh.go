package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/agent"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/ingress"
	"github.com/hatchery/hatchery/internal/mesh"
)

// errNoMeshYet answers a stream asked for before the mesh could start.
var errNoMeshYet = errors.New("mesh not running yet: no host certificate")

// certWait is how often an agent without a host certificate looks whether
// HostCerts got one, to start its mesh.
const certWait = time.Second

// agentMesh is the agent's end of the mesh: a server on the mesh port whose
// streams the ingress serves from this host's replicas, and a client
// through which the ingress reaches other hosts' replicas (ingress.Peers).
// Both need the host certificate and the host CA; an agent that has none yet
// (it joined before host certificates and the control plane cannot be
// reached) holds its port and starts them as soon as HostCerts has one, its
// ingress serving local replicas meanwhile. Safe for concurrent use.
type agentMesh struct {
	cfg    mesh.Config
	hostID string
	certs  *agent.HostCerts
	ln     net.Listener // the mesh port, held from the start
	log    *zap.Logger

	mu     sync.Mutex // guards peers, client, server and closed
	peers  []contract.Peer
	client *mesh.Client
	server *mesh.Server
	closed bool

	cancel context.CancelFunc
	done   chan struct{} // closed when the wait for a certificate ends
}

var (
	_ ingress.Peers = (*agentMesh)(nil)
	_ agent.Mesh    = (*agentMesh)(nil)
	_ mesh.Dialer   = ingressDialer{}
)

// ingressDialer is the ingress as the mesh server's Dialer: the streams
// peers open are served by local replicas only.
type ingressDialer struct{ in *ingress.Ingress }

func (d ingressDialer) DialWorkload(ctx context.Context, w mesh.Workload) (net.Conn, error) {
	return d.in.DialLocal(ctx, w.ID(), w.Port)
}

// listenMesh holds the mesh port and works out the addresses to advertise:
// those given (checked by contract.CheckMeshAddresses), else the listening
// IP when it is a specific one, else every non-loopback address of the host,
// each with the port listened on.
func listenMesh(addr string, advertise []string) (net.Listener, []string, error) {
	if addr == "" {
		return nil, nil, errors.New("no mesh address (--mesh-addr)")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("mesh listen: %w", err)
	}
	if len(advertise) > 0 {
		// The control plane refuses a report with an address no peer may
		// dial: say so now, not in every report. Loopback is the control
		// plane's to judge (it takes it when it listens on loopback).
		if err := contract.CheckMeshAddresses(advertise, true); err != nil {
			_ = ln.Close()
			return nil, nil, fmt.Errorf("--advertise: %w", err)
		}
		return ln, advertise, nil
	}
	tcp := ln.Addr().(*net.TCPAddr)
	if !tcp.IP.IsUnspecified() {
		return ln, []string{tcp.String()}, nil
	}
	all, err := mesh.DefaultAdvertise(tcp.Port)
	if err != nil {
		_ = ln.Close()
		return nil, nil, err
	}
	return ln, all, nil
}

// newAgentMesh returns the mesh for ln, not started: see start.
func newAgentMesh(cfg mesh.Config, hostID string, certs *agent.HostCerts, ln net.Listener, log *zap.Logger) (*agentMesh, error) {
	cfg.Addr, cfg.Logger = ln.Addr().String(), log
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("mesh config: %w", err)
	}
	return &agentMesh{cfg: cfg, hostID: hostID, certs: certs, ln: ln, log: log.Named("mesh"), done: make(chan struct{})}, nil
}

// start starts the server (serving streams with dialer) and the client now
// if the host certificate is there, else as soon as it comes, until Close.
func (m *agentMesh) start(dialer mesh.Dialer) error {
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	if m.certs.HostCA() != nil {
		close(m.done)
		return m.startNow(dialer)
	}
	m.log.Warn("no host certificate yet: the mesh starts once the control plane gives one")
	go func() {
		defer close(m.done)
		t := time.NewTicker(certWait)
		defer t.Stop()
		for m.certs.HostCA() == nil {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		if err := m.startNow(dialer); err != nil {
			m.log.Error("mesh not started", zap.Error(err))
		}
	}()
	return nil
}

func (m *agentMesh) startNow(dialer mesh.Dialer) error {
	creds := mesh.Credentials{HostID: m.hostID, HostCA: m.certs.HostCA(), Certificate: m.certs}
	client, err := mesh.NewClient(m.cfg, creds)
	if err != nil {
		return fmt.Errorf("mesh client: %w", err)
	}
	server, err := mesh.NewServer(m.cfg, creds, dialer)
	if err != nil {
		_ = client.Close()
		return fmt.Errorf("mesh server: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		_ = client.Close()
		return nil
	}
	client.SetPeers(m.peers)
	server.SetPeers(m.peers)
	if err := server.Serve(m.ln); err != nil {
		_ = client.Close()
		return fmt.Errorf("mesh server: %w", err)
	}
	m.client, m.server = client, server
	m.log.Info("mesh running", zap.Stringer("addr", m.ln.Addr()), zap.Strings("advertise", m.cfg.Advertise))
	return nil
}

// SetPeers installs the valid host set of the latest desired state.
func (m *agentMesh) SetPeers(peers []contract.Peer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.peers = peers
	if m.client != nil {
		m.client.SetPeers(peers)
		m.server.SetPeers(peers)
	}
}

func (m *agentMesh) currentClient() *mesh.Client {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.client
}

// DialStream opens a stream to the workload's replicas on host (ingress.Peers).
func (m *agentMesh) DialStream(ctx context.Context, hostID, workloadID string, port int) (net.Conn, error) {
	c := m.currentClient()
	if c == nil {
		return nil, errNoMeshYet
	}
	return c.DialStream(ctx, hostID, workloadID, port)
}

// Alive reports whether the connection to host is alive (ingress.Peers).
func (m *agentMesh) Alive(hostID string) bool {
	c := m.currentClient()
	return c != nil && c.Alive(hostID)
}

// Close stops the wait for a certificate, then the server (its streams end)
// and the client.
func (m *agentMesh) Close(ctx context.Context) error {
	if m.cancel != nil {
		m.cancel()
		<-m.done
	}
	m.mu.Lock()
	m.closed = true
	client, server := m.client, m.server
	m.mu.Unlock()
	if server == nil {
		_ = m.ln.Close() // never served: nothing else closes it
		return nil
	}
	err := server.Close(ctx)
	_ = client.Close() // it only closes connections; nothing to report
	return err
}
