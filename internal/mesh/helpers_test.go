package mesh

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/pki/authority"
	"github.com/hatchery/hatchery/internal/testutil/listentest"
)

// fixedCert is a host certificate that does not change.
type fixedCert struct{ cert *tls.Certificate }

func (f fixedCert) HostCertificate() (*tls.Certificate, error) { return f.cert, nil }

// cluster is a host CA and the credentials of the hosts it signed.
type cluster struct {
	t    *testing.T
	ca   *authority.HostCA
	pool *x509.CertPool
}

func newCluster(t testing.TB) *cluster {
	tt, _ := t.(*testing.T)
	ca, err := authority.LoadOrCreateHostCA(t.TempDir(), authority.MaxHostLifetime, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return &cluster{t: tt, ca: ca, pool: pool}
}

func (c *cluster) creds(t testing.TB, hostID string) Credentials {
	t.Helper()
	return Credentials{HostID: hostID, HostCA: c.pool, Certificate: fixedCert{hostCert(t, c.ca, hostID)}}
}

func hostCert(t testing.TB, ca *authority.HostCA, hostID string) *tls.Certificate {
	t.Helper()
	key, err := pki.NewHostKey()
	if err != nil {
		t.Fatal(err)
	}
	csr, err := pki.HostCSR(key, hostID)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := ca.SignHost(csr, hostID, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := pki.HostKeyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := pki.ParseHostCertificate(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &hc.Certificate
}

func testConfig(t testing.TB) Config {
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.Logger = zaptest.NewLogger(t)
	return cfg
}

// backends is a Dialer to TCP servers on loopback, one per workload ID.
type backends struct {
	mu    sync.Mutex // guards addrs and asked
	addrs map[string]string
	asked []Workload // every workload dialled, in order
	dials atomic.Int64
}

func (b *backends) DialWorkload(ctx context.Context, w Workload) (net.Conn, error) {
	b.dials.Add(1)
	b.mu.Lock()
	b.asked = append(b.asked, w)
	addr, ok := b.addrs[w.ID()]
	b.mu.Unlock()
	if !ok {
		return nil, errors.New("no replica")
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

func (b *backends) add(t testing.TB, id string, serve func(net.Conn)) {
	t.Helper()
	ln := listentest.Serve(t, "tcp", "127.0.0.1:0", serve)
	b.mu.Lock()
	if b.addrs == nil {
		b.addrs = map[string]string{}
	}
	b.addrs[id] = ln.Addr().String()
	b.mu.Unlock()
}

// echo copies what it reads back, and half-closes when the caller does.
func echo(c net.Conn) {
	defer c.Close()
	_, _ = io.Copy(c, c)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// testTCPPort is the TCP stream port newPair lets the client open to each
// workload it reaches, besides HTTP streams (port 0).
const testTCPPort = 5432

// streamsTo returns the reach of a peer streaming to each workload on
// ports.
func streamsTo(ports []int, workloads ...string) []contract.Reach {
	var out []contract.Reach
	for _, w := range workloads {
		out = append(out, contract.Reach{Workload: w, Ports: ports})
	}
	return out
}

// pair is a server host ("h-srv") and a client host ("h-cli") of one
// cluster, the server reaching backends, the client allowed reaches: HTTP
// streams and TCP streams to testTCPPort.
type pair struct {
	cluster *cluster
	server  *Server
	client  *Client
	ln      *countingListener
	dialer  *backends
	peers   []contract.Peer
}

func newPair(t testing.TB, reaches ...string) *pair {
	t.Helper()
	c := newCluster(t)
	p := &pair{cluster: c, dialer: &backends{}}
	srv, err := NewServer(testConfig(t), c.creds(t, "h-srv"), p.dialer)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.ln = &countingListener{Listener: ln}
	if err := srv.Serve(p.ln); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	cli, err := NewClient(testConfig(t), c.creds(t, "h-cli"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	p.server, p.client = srv, cli
	p.peers = []contract.Peer{
		{HostID: "h-srv", Addresses: []string{ln.Addr().String()}},
		{HostID: "h-cli", Addresses: []string{"127.0.0.1:1"}, Reaches: reaches, Streams: streamsTo([]int{0, testTCPPort}, reaches...)},
	}
	srv.SetPeers(p.peers)
	cli.SetPeers(p.peers)
	return p
}

func (p *pair) dial(t testing.TB, id string) (net.Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w, err := parseWorkload(id)
	if err != nil {
		t.Fatal(err)
	}
	return p.client.DialWorkload(ctx, "h-srv", w)
}

func parseWorkload(id string) (Workload, error) {
	var w Workload
	parts := strings.SplitN(id, "/", 3)
	if len(parts) != 3 {
		return w, errors.New("bad workload " + id)
	}
	w.Namespace, w.Project, w.Egg = parts[0], parts[1], parts[2]
	return w, w.validate()
}
