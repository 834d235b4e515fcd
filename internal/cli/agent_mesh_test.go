package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/agent"
	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/ingress"
	"github.com/hatchery/hatchery/internal/mesh"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/pki/authority"
)

type noRenewer struct{}

func (noRenewer) RenewCertificate(context.Context, []byte) (api.HostCertificate, error) {
	return api.HostCertificate{}, errors.New("no control plane in this test")
}

// hostCertsFor writes a host certificate from ca into a data dir, as a join
// leaves it, and opens it.
func hostCertsFor(t *testing.T, ca *authority.HostCA, hostID string) *agent.HostCerts {
	t.Helper()
	dir := t.TempDir()
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
	for name, data := range map[string][]byte{"host-key.pem": keyPEM, "host.pem": certPEM, "host-ca.pem": ca.CertPEM()} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	certs, err := agent.OpenHostCerts(dir, hostID, noRenewer{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if certs.HostCA() == nil {
		t.Fatal("the host certificate written was not loaded")
	}
	return certs
}

// meshHost is one host's ingress and mesh, wired as runAgent wires them.
type meshHost struct {
	in        *ingress.Ingress
	mesh      *agentMesh
	advertise []string
}

func startMeshHost(t *testing.T, ca *authority.HostCA, hostID string) meshHost {
	t.Helper()
	log := zaptest.NewLogger(t).With(zap.String("host", hostID))
	ln, advertise, err := listenMesh("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := newAgentMesh(mesh.DefaultConfig(), hostID, hostCertsFor(t, ca, hostID), ln, log)
	if err != nil {
		t.Fatal(err)
	}
	cfg := ingress.DefaultConfig()
	cfg.HTTPAddr, cfg.AdminAddr, cfg.PublishAddr = "127.0.0.1:0", "", "127.0.0.1"
	cfg.Logger, cfg.Registry, cfg.Peers = log, prometheus.NewRegistry(), m
	in, err := ingress.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeWithin(log, "ingress", in.Close) })
	if err := m.start(ingressDialer{in}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeWithin(log, "mesh", m.Close) })
	return meshHost{in: in, mesh: m, advertise: advertise}
}

// Two agents' ingresses joined by the real mesh (mutual TLS, HTTP/2): a
// request to host A, which has no replica, is served by host B's, and a
// host that the valid host set no longer lists is not reached.
func TestTheIngressReachesAnotherHostsReplicaThroughTheMesh(t *testing.T) {
	ca, err := authority.LoadOrCreateHostCA(t.TempDir(), 24*time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	a, b := startMeshHost(t, ca, "h-a"), startMeshHost(t, ca, "h-b")
	const wl = "default/shop/web"
	peers := []contract.Peer{
		{HostID: "h-a", Addresses: a.advertise, Reaches: []string{wl}},
		{HostID: "h-b", Addresses: b.advertise},
	}
	a.mesh.SetPeers(peers)
	b.mesh.SetPeers(peers)

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
	if !a.mesh.Alive("h-b") {
		t.Error("A's mesh connection to B is not alive after serving through it")
	}

	// B leaves the valid host set: A's connection to it is closed at once,
	// and A answers 503 rather than reaching it.
	a.mesh.SetPeers(peers[:1])
	if code, _ := get(); code != http.StatusServiceUnavailable {
		t.Fatalf("after B left the valid host set: %d, want 503", code)
	}
}

func TestListenMeshAdvertises(t *testing.T) {
	ln, adv, err := listenMesh("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if want := []string{ln.Addr().String()}; !slices.Equal(adv, want) {
		t.Errorf("a specific listening IP: advertised %v, want %v", adv, want)
	}
	ln, adv, err = listenMesh("127.0.0.1:0", []string{"10.0.0.1:7702"})
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if !slices.Equal(adv, []string{"10.0.0.1:7702"}) {
		t.Errorf("--advertise given: advertised %v", adv)
	}
	ln, adv, err = listenMesh(":0", nil)
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	for _, a := range adv {
		host, p, _ := net.SplitHostPort(a)
		if p != port || net.ParseIP(host).IsLoopback() {
			t.Errorf("all interfaces: advertised %q, want a non-loopback address with port %s", a, port)
		}
	}
	if _, _, err := listenMesh("", nil); err == nil {
		t.Error("no mesh address was accepted")
	}
}

func TestRelayImageOfRefusesABinaryReplacedSinceTheStart(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "hatch")
	if err := os.WriteFile(bin, []byte("binary v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	ref, build, err := relayImageOf(func() (string, error) { return bin, nil })
	if err != nil {
		t.Fatal(err)
	}
	if ctx, err := build(); err != nil || ctx == nil {
		t.Fatalf("the context of an unchanged binary: %v", err)
	}
	if err := os.WriteFile(bin, []byte("binary v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := build(); err == nil {
		t.Fatalf("the context of a replaced binary was made for %s", ref)
	}
}
