//go:build docker

package e2e

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/testutil/dockertest"
	"github.com/hatchery/hatchery/internal/testutil/pebbletest"
)

// TestNetClusterACMEOneOrderEveryHostServesTheSameCertificate: on a cluster
// of two real hosts (each in its own network namespace, with its own
// engine), a tls: auto route on a public test name gets its certificate from
// a real CA (pebble, validating HTTP-01 for real against h1's ingress, where
// its DNS resolves the name): one order for the cluster, and an HTTPS GET to
// each host's own address answers 200 with the same certificate, chaining
// to pebble's root.
func TestNetClusterACMEOneOrderEveryHostServesTheSameCertificate(t *testing.T) {
	const name = "shop.hatch.test"
	began := time.Now()
	// Every host's ingress listens on netIngressPort at its own address:
	// pebble's HTTP-01 requests go there, to the host the name resolves to
	// (set once the hosts exist; until then pebble's DNS answers loopback,
	// which no order asks for).
	ca := pebbletest.Start(t, pebbletest.Options{HTTPPort: mustPort(t, netIngressPort), ResolveTo: "127.0.0.1"})
	c := newCluster(t, clusterOptions{hosts: 2, https: true,
		serverArgs: []string{"--acme-ca", ca.DirectoryURL, "--acme-email", "ops@hatch.test", "--acme-ca-root", ca.ListenerRootFile,
			"--acme-check-interval", "1s"}})
	h1, h2 := c.agents["h1"], c.agents["h2"]
	ca.Resolve(t, name, h1.ip)
	t.Logf("pebble, 2 hosts, the server and the agents up in %v", time.Since(began).Round(time.Millisecond))

	bin, err := dockertest.Binary("./test/app")
	if err != nil {
		t.Fatal(err)
	}
	app, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	dir := writeProject(t, map[string]string{
		"hatch.yaml": fmt.Sprintf(`project: acme
eggs:
  app:
    build: ./app
    replicas: 2
    port: 8080
    health: {http: /healthz, interval: 1s, timeout: 1s}
    routes:
      - {host: %s, tls: auto}
    stop_timeout: 2s
`, name),
		"app/Dockerfile": netAppImage.Dockerfile(),
	})
	if err := os.WriteFile(filepath.Join(dir, "app", "app"), app, 0o755); err != nil {
		t.Fatal(err)
	}
	applied := time.Now()
	c.mustHatch(nil, "apply", "-f", filepath.Join(dir, "hatch.yaml"), "--yes")
	t.Logf("apply of 2 replicas over 2 hosts (2 image builds) done in %v", time.Since(applied).Round(time.Millisecond))
	for _, a := range []*clAgent{h1, h2} {
		if n := len(c.eggContainersOn(a, "acme", false)); n != 1 {
			t.Fatalf("host %s's engine runs %d replicas, want 1 of the 2", a.name, n)
		}
	}

	// Each host, at its own address, serves the route over HTTPS with a
	// certificate chaining to pebble's root; both the same one.
	roots := ca.IssuingRoots(t)
	leaves := map[string][]byte{}
	for _, a := range []*clAgent{h1, h2} {
		addr := net.JoinHostPort(a.ip, a.httpsPort)
		dockertest.Eventually(t, 45*time.Second, 250*time.Millisecond, func() error {
			resp, err := httpsGet(t.Context(), addr, name, "/healthz", roots)
			if err != nil {
				return fmt.Errorf("%s: %w", a.name, err)
			}
			if resp.StatusCode != 200 {
				return fmt.Errorf("%s: HTTPS GET: %s", a.name, resp.Status)
			}
			leaves[a.name] = resp.TLS.PeerCertificates[0].Raw
			return nil
		})
		t.Logf("%s serves HTTPS with pebble's certificate %v after the apply", a.name, time.Since(applied).Round(time.Millisecond))
	}
	if !bytes.Equal(leaves["h1"], leaves["h2"]) {
		t.Fatal("h1 and h2 serve different certificates for the name: more than one order")
	}

	// One order for the name, and pebble's validation went to h1's
	// ingress (where its DNS sends the name) and was answered there.
	issued := c.eventMessages("certificate.issued")
	if len(issued) != 1 {
		t.Errorf("%d certificate.issued events, want one order for the cluster: %q", len(issued), issued)
	}
	if !strings.Contains(h1.dataPlaneLog(), "ACME challenge answered") {
		t.Errorf("h1's data plane log does not show pebble's validation request answered by its ingress")
	}
	c.mustHatch(nil, "destroy", "acme", "--yes")
	t.Logf("the test's body took %v", time.Since(began).Round(time.Millisecond))
}
