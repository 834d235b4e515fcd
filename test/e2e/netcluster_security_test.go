//go:build docker

package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/mesh"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/pki/authority"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// The mesh's and the host certificates' rules, checked against the real
// agents of the namespace cluster with the certificates they were given:
// only a host of the cluster's host CA, in the valid host set, opens a
// stream; a host certificate is never a server's to the CLI.

// hostCredentials are an agent's host certificate (with the host CA after
// it, as a TLS server presents a chain) and the host CA's pool, read from
// the agent's data directory.
func (c *cluster) hostCredentials(a *clAgent) (tls.Certificate, *x509.CertPool) {
	c.t.Helper()
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(a.dataDir, name))
		if err != nil {
			c.t.Fatalf("%s's host certificate: %v", a.name, err)
		}
		return b
	}
	hc, err := pki.ParseHostCertificate(read("host.pem"), read("host-key.pem"))
	if err != nil {
		c.t.Fatal(err)
	}
	if hc.HostID != a.hostID {
		c.t.Fatalf("%s's host certificate names %s, want %s", a.name, hc.HostID, a.hostID)
	}
	caPEM := read("host-ca.pem")
	ca, err := pki.ParseCertificatePEM(caPEM)
	if err != nil {
		c.t.Fatal(err)
	}
	hc.Certificate.Certificate = append(hc.Certificate.Certificate, ca.Raw)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return hc.Certificate, pool
}

// meshAddresses is where a's mesh listens, as its last report says.
func (c *cluster) meshAddresses(a *clAgent) []string {
	c.t.Helper()
	var addrs []string
	dockertest.Eventually(c.t, 10*time.Second, 200*time.Millisecond, func() error {
		r, err := c.api.Hosts().Report(c.t.Context(), a.hostID)
		if err != nil {
			return err
		}
		if r == nil || len(r.MeshAddresses) == 0 {
			return fmt.Errorf("%s has reported no mesh address", a.name)
		}
		addrs = r.MeshAddresses
		return nil
	})
	return addrs
}

// staticCert is a mesh.Certificates that never changes.
type staticCert struct{ cert tls.Certificate }

func (s staticCert) HostCertificate() (*tls.Certificate, error) { return &s.cert, nil }

// meshGet opens an HTTP stream to the project's egg "app" on server's mesh
// as the host hostID with cert, trusting roots, and asks its
// /env/HOSTNAME: the mesh's whole path, the peer's ingress answering.
func (c *cluster) meshGet(server *clAgent, hostID string, cert tls.Certificate, roots *x509.CertPool, project string) (string, error) {
	cfg := mesh.DefaultConfig()
	cfg.Logger = zaptest.NewLogger(c.t)
	mc, err := mesh.NewClient(cfg, mesh.Credentials{HostID: hostID, HostCA: roots, Certificate: staticCert{cert}})
	if err != nil {
		return "", err
	}
	defer mc.Close()
	mc.SetPeers([]contract.Peer{{HostID: server.hostID, Name: server.name, Addresses: c.meshAddresses(server)}})
	ctx, cancel := context.WithTimeout(c.t.Context(), 10*time.Second)
	defer cancel()
	conn, err := mc.DialStream(ctx, server.hostID, contract.WorkloadID("default", project, "app"), 0)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET /env/HOSTNAME HTTP/1.1\r\nHost: %s.localhost\r\nConnection: close\r\n\r\n", project)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return "", fmt.Errorf("the stream's answer: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("the stream's answer: %s %q %v", resp.Status, body, err)
	}
	return strings.TrimSpace(string(body)), nil
}

// meshRefusesPlainCallers checks that a's mesh port gives nothing, not even
// an HTTP error, to a caller without a client certificate, over TLS or in
// plain text.
func (c *cluster) meshRefusesPlainCallers(a *clAgent) {
	c.t.Helper()
	addr := c.meshAddresses(a)[0]
	raw, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		c.t.Fatalf("%s's mesh at %s: %v", a.name, addr, err)
	}
	tc := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	var got []byte
	if err = tc.Handshake(); err == nil {
		// TLS 1.3: the client's handshake ends before the server has
		// checked the (missing) certificate; the refusal comes on read.
		_, _ = tc.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
		got, err = io.ReadAll(tc)
	}
	tc.Close()
	if len(got) > 0 || err == nil {
		c.t.Fatalf("%s's mesh answered a caller without a certificate: %d bytes %q, %v", a.name, len(got), got, err)
	}
	raw, err = net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		c.t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(raw, "POST /v1/stream/default/x/app HTTP/1.1\r\nHost: x\r\n\r\n")
	if got, _ := io.ReadAll(raw); strings.Contains(string(got), "HTTP/") {
		c.t.Fatalf("%s's mesh answered plain HTTP: %q", a.name, got)
	}
}

// checkMeshIdentity checks, on a cluster running the routed project:
//   - a process with no certificate, or with a host certificate of a host
//     CA of its own, gets nothing from server's mesh;
//   - removed's own certificate opens a stream to server's mesh, then,
//     once `hatch hosts remove` removed it, is refused.
//
// It removes removed from the cluster.
func (c *cluster) checkMeshIdentity(server, removed *clAgent, project string) {
	c.t.Helper()
	c.meshRefusesPlainCallers(server)

	cert, roots := c.hostCredentials(removed)
	ownCA, err := authority.LoadOrCreateHostCA(c.t.TempDir(), authority.MaxHostLifetime, time.Now())
	if err != nil {
		c.t.Fatal(err)
	}
	key, err := pki.NewHostKey()
	if err != nil {
		c.t.Fatal(err)
	}
	csr, err := pki.HostCSR(key, removed.hostID)
	if err != nil {
		c.t.Fatal(err)
	}
	certPEM, err := ownCA.SignHost(csr, removed.hostID, time.Now())
	if err != nil {
		c.t.Fatal(err)
	}
	keyPEM, err := pki.HostKeyPEM(key)
	if err != nil {
		c.t.Fatal(err)
	}
	forged, err := pki.ParseHostCertificate(certPEM, keyPEM)
	if err != nil {
		c.t.Fatal(err)
	}
	// The forger trusts the cluster's host CA: only its own certificate is
	// wrong.
	if id, err := c.meshGet(server, removed.hostID, forged.Certificate, roots, project); err == nil {
		c.t.Fatalf("a host certificate of another host CA opened a stream to %s's mesh (answer %q)", server.name, id)
	}

	id, err := c.meshGet(server, removed.hostID, cert, roots, project)
	if err != nil {
		c.t.Fatalf("%s's own certificate on %s's mesh: %v", removed.name, server.name, err)
	}
	c.t.Logf("%s's certificate opened a stream to %s's mesh, answered by replica %s", removed.name, server.name, id)
	c.mustHatch(nil, "hosts", "remove", removed.name)
	removedAt := time.Now()
	dockertest.Eventually(c.t, 30*time.Second, 250*time.Millisecond, func() error {
		if id, err := c.meshGet(server, removed.hostID, cert, roots, project); err == nil {
			return fmt.Errorf("%s's certificate still opens streams on %s's mesh (answer %q)", removed.name, server.name, id)
		}
		return nil
	})
	c.t.Logf("%s's certificate refused by %s's mesh %v after its removal", removed.name, server.name, time.Since(removedAt).Round(time.Millisecond))
}

// checkCLIRefusesHostCertificate serves a's host certificate (the chain to
// the host CA) on loopback and points the CLI at it with the admin token:
// the CLI must refuse it before sending any request, whether the token
// pins the control plane's CA or the host CA.
func (c *cluster) checkCLIRefusesHostCertificate(a *clAgent) {
	c.t.Helper()
	cert, _ := c.hostCredentials(a)
	var requests atomic.Int32
	impostor := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { requests.Add(1) }))
	impostor.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	impostor.StartTLS()
	defer impostor.Close()

	hostCA := cert.Certificate[len(cert.Certificate)-1]
	for name, token := range map[string]string{
		"the control plane's CA": c.token,
		"the host CA":            pki.NewToken(pki.KindAdmin, pki.Fingerprint(hostCA)).String(),
	} {
		if name == "the host CA" {
			c.keepSecret(tokenSecret(token))
		}
		out, err := c.hatch([]string{client.EnvServer + "=" + impostor.URL, client.EnvToken + "=" + token}, "hosts")
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			c.t.Fatalf("hatch hosts against %s's host certificate, with a token pinning %s: %v, want a refusal\n%s", a.name, name, err, out)
		}
		c.t.Logf("with a token pinning %s, the CLI refused %s's host certificate: %s", name, a.name, strings.TrimSpace(out))
	}
	if n := requests.Load(); n != 0 {
		c.t.Fatalf("the server presenting a host certificate got %d requests", n)
	}
}
