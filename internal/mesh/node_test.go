package mesh

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/ingress"
)

// issuedCerts is a host whose certificate was issued before its Node
// started.
type issuedCerts struct {
	fixedCert
	pool *x509.CertPool
}

func (c issuedCerts) HostCA() *x509.CertPool { return c.pool }

// nodeHost is one host's ingress and mesh Node, wired as an agent wires
// them (agentd.Run).
type nodeHost struct {
	in        *ingress.Ingress
	node      *Node
	advertise []string
}

func startNodeHost(t *testing.T, c *cluster, hostID string) nodeHost {
	t.Helper()
	log := zaptest.NewLogger(t).With(zap.String("host", hostID))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Logger = log
	n, err := NewNode(cfg, hostID, issuedCerts{fixedCert{hostCert(t, c.ca, hostID)}, c.pool}, ln)
	if err != nil {
		t.Fatal(err)
	}
	icfg := ingress.DefaultConfig()
	icfg.HTTPAddr, icfg.AdminAddr, icfg.PublishAddr = "127.0.0.1:0", "", "127.0.0.1"
	icfg.Logger, icfg.Registry, icfg.Peers = log, prometheus.NewRegistry(), n
	in, err := ingress.New(icfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeWithin(t, in.Close) })
	if err := n.Start(in); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeWithin(t, n.Close) })
	return nodeHost{in: in, node: n, advertise: []string{ln.Addr().String()}}
}

// closeWithin closes what a test started, giving it 15 seconds.
func closeWithin(t *testing.T, closeFn func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := closeFn(ctx); err != nil {
		t.Errorf("close: %v", err)
	}
}

// Two agents' ingresses joined by the real mesh (mutual TLS, HTTP/2): a
// request to host A, which has no replica, is served by host B's, and a
// host that the valid host set no longer lists is not reached.
func TestTheIngressReachesAnotherHostsReplicaThroughTheMesh(t *testing.T) {
	c := newCluster(t)
	a, b := startNodeHost(t, c, "h-a"), startNodeHost(t, c, "h-b")
	const wl = "default/shop/web"
	peers := []contract.Peer{
		{HostID: "h-a", Addresses: a.advertise, Reaches: []string{wl}},
		{HostID: "h-b", Addresses: b.advertise},
	}
	a.node.SetPeers(peers)
	b.node.SetPeers(peers)

	replica := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "b1 %s", r.Header.Get("X-Forwarded-Host"))
	}))
	t.Cleanup(replica.Close)
	route := []ingress.Route{{Host: "shop.localhost"}}
	if err := b.in.Update(ingress.Table{Eggs: []ingress.Egg{{Name: wl, Routes: route,
		Backends: []ingress.Backend{{ContainerID: "b1", Addr: replica.Listener.Addr().String(), Healthy: true}}}}}); err != nil {
		t.Fatal(err)
	}
	if err := a.in.Update(ingress.Table{Eggs: []ingress.Egg{{Name: wl, Routes: route, Remote: []string{"h-b"}}}}); err != nil {
		t.Fatal(err)
	}
	get := func() (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+a.in.HTTPAddr().String()+"/", nil)
		req.Host = "shop.localhost"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for range 3 {
		if code, body := get(); code != 200 || body != "b1 shop.localhost" {
			t.Fatalf("through A: %d %q, want 200 from b1", code, body)
		}
	}
	if !a.node.Alive("h-b") {
		t.Error("A's mesh connection to B is not alive after serving through it")
	}

	// B leaves the valid host set: A's connection to it is closed at once,
	// and A answers 503 rather than reaching it.
	a.node.SetPeers(peers[:1])
	if code, _ := get(); code != http.StatusServiceUnavailable {
		t.Fatalf("after B left the valid host set: %d, want 503", code)
	}
}
