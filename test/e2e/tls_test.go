//go:build docker

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/testutil/dockertest"
	"github.com/hatchery/hatchery/internal/testutil/pebbletest"
	"github.com/hatchery/hatchery/internal/testutil/testca"
)

// TestHTTPSWithACMECertificatesAndTheUsersOwn runs the server with a real
// ACME CA (pebble, validating HTTP-01 against the agent's ingress) and
// applies a project with a route on a public name (tls: auto by default)
// and a route with the user's certificate from secrets. The first is served
// over HTTPS and HTTP/2 with a certificate chaining to pebble's root, after
// pebble's validation request reached the ingress; plain HTTP redirects; a
// new user certificate is served without a container restart; no private
// key is in any log, event or answer.
func TestHTTPSWithACMECertificatesAndTheUsersOwn(t *testing.T) {
	const ip = "127.0.0.2"
	ingressPort := clFreePort(t, ip)
	// Certificates live 20 s: renewed with a third of their life left,
	// every 13 s or so, while the test runs.
	ca := pebbletest.Start(t, pebbletest.Options{HTTPPort: mustPort(t, ingressPort), ResolveTo: ip, Validity: 20 * time.Second})
	c := newCluster(t, clusterOptions{agents: []string{"a", "b"}, ingressPorts: map[string]string{"a": ingressPort}, https: true,
		serverArgs: []string{"--acme-ca", ca.DirectoryURL, "--acme-email", "ops@hatch.test", "--acme-ca-root", ca.ListenerRootFile,
			"--acme-check-interval", "1s"}})
	a, b := c.agents["a"], c.agents["b"]
	own := testca.New(t, "user CA")
	crt, key := own.Leaf(t, 1, "own.hatch.test")
	dir := writeProject(t, map[string]string{
		"hatch.yaml": fmt.Sprintf(`project: tls
secrets:
  crt: {file: ./own.crt}
  key: {file: ./own.key}
eggs:
  app:
    image: %s
    pull: missing
    replicas: 2
    port: 8080
    health: {http: /healthz, interval: 1s, timeout: 1s}
    routes:
      - {host: shop.hatch.test, hsts: true}
      - {host: own.hatch.test, tls: {cert: "${secret.crt}", key: "${secret.key}"}}
`, dockertest.Image(t, dockertest.ImageSpec{})),
		"own.crt": string(crt), "own.key": string(key),
	})
	file := filepath.Join(dir, "hatch.yaml")
	c.keepFileSecrets(filepath.Join(dir, "own.key"))
	plan := c.mustHatch(nil, "plan", "-f", file)
	if !strings.Contains(plan, "shop.hatch.test to app (HTTPS, certificate from the ACME CA)") ||
		!strings.Contains(plan, "own.hatch.test to app (HTTPS, certificate from secrets)") {
		t.Fatalf("the plan does not say how the routes are served:\n%s", plan)
	}
	if !strings.Contains(plan, "warning: route shop.hatch.test gets its certificate over HTTP-01 on port 80") {
		t.Errorf("the plan does not warn that the hosts' ingresses are off ports 80 and 443:\n%s", plan)
	}
	start := time.Now()
	c.mustHatch(nil, "apply", "-f", file, "--yes")

	httpsAddr := net.JoinHostPort(ip, a.httpsPort)
	pebbleRoots := ca.IssuingRoots(t)
	var resp *http.Response
	dockertest.Eventually(t, 60*time.Second, 250*time.Millisecond, func() error {
		r, err := httpsGet(t.Context(), httpsAddr, "shop.hatch.test", "/healthz", pebbleRoots)
		if err != nil {
			return err
		}
		resp = r
		return nil
	})
	t.Logf("HTTPS with pebble's certificate %v after the apply", time.Since(start).Round(time.Millisecond))
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		t.Fatalf("HTTPS GET: %s over %s, want 200 over HTTP/2", resp.Status, resp.Proto)
	}
	if resp.Header.Get("Strict-Transport-Security") == "" {
		t.Error("no HSTS on a route that asks for it")
	}
	if !strings.Contains(a.dataPlaneLog(), "ACME challenge answered") {
		t.Error("the data plane's log does not show pebble's validation request answered by the ingress")
	}

	// Every host serves the same certificate, from one order (pebble sends
	// its validation to a alone: the name resolves there).
	dockertest.Eventually(t, 10*time.Second, 250*time.Millisecond, func() error {
		ca, errA := peerCertificate(net.JoinHostPort(ip, a.httpsPort), "shop.hatch.test", pebbleRoots)
		cb, errB := peerCertificate(net.JoinHostPort(b.ip, b.httpsPort), "shop.hatch.test", pebbleRoots)
		if err := errors.Join(errA, errB); err != nil {
			return err
		}
		if !ca.Equal(cb) {
			return fmt.Errorf("a serves serial %s, b serial %s", ca.SerialNumber, cb.SerialNumber)
		}
		return nil
	})

	// 8 keep-alive HTTPS clients through a roll of the egg and a renewal
	// of the certificate: no failed request.
	first, err := peerCertificate(httpsAddr, "shop.hatch.test", pebbleRoots)
	if err != nil {
		t.Fatal(err)
	}
	load := startHTTPSLoad(t, httpsAddr, "shop.hatch.test", pebbleRoots, 8)
	c.mustHatch(nil, "rollout", "restart", "tls/app")
	dockertest.Eventually(t, 40*time.Second, 250*time.Millisecond, func() error {
		now, err := peerCertificate(httpsAddr, "shop.hatch.test", pebbleRoots)
		if err == nil && now.Equal(first) {
			err = fmt.Errorf("still serial %s", first.SerialNumber)
		}
		return err
	})
	ok, failed := load.stop()
	t.Logf("under load through a roll and a renewal: %d requests, %d failed", ok+len(failed), len(failed))
	if len(failed) > 0 || ok == 0 {
		t.Fatalf("%d requests succeeded, %d failed: %v", ok, len(failed), failed[:min(len(failed), 5)])
	}

	// Plain HTTP redirects to HTTPS, on the agent's HTTPS port.
	plain := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, Timeout: 5 * time.Second}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, a.IngressURL()+"/version?x=1", nil)
	req.Host = "shop.hatch.test"
	pr, err := plain.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	pr.Body.Close()
	if want := "https://shop.hatch.test:" + a.httpsPort + "/version?x=1"; pr.StatusCode != http.StatusPermanentRedirect || pr.Header.Get("Location") != want {
		t.Fatalf("plain HTTP: %s to %q, want 308 to %q", pr.Status, pr.Header.Get("Location"), want)
	}

	// The user's certificate is served, and a new one replaces it without
	// a container restart.
	serialOf := func() (int64, error) {
		conn, err := tls.Dial("tcp", httpsAddr, &tls.Config{ServerName: "own.hatch.test", RootCAs: own.Pool})
		if err != nil {
			return 0, err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), nil
	}
	dockertest.Eventually(t, 30*time.Second, 250*time.Millisecond, func() error {
		s, err := serialOf()
		if err == nil && s != 1 {
			err = fmt.Errorf("serial %d, want 1", s)
		}
		return err
	})
	before := containerIDs(c.projectContainers("default", "tls", "app", ""))
	crt2, key2 := own.Leaf(t, 2, "own.hatch.test")
	for name, data := range map[string][]byte{"own.crt": crt2, "own.key": key2} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c.keepFileSecrets(filepath.Join(dir, "own.key"))
	c.mustHatch(nil, "apply", "-f", file, "--yes")
	dockertest.Eventually(t, 30*time.Second, 250*time.Millisecond, func() error {
		s, err := serialOf()
		if err == nil && s != 2 {
			err = fmt.Errorf("serial %d, want 2", s)
		}
		return err
	})
	if after := containerIDs(c.projectContainers("default", "tls", "app", "")); !slices.Equal(before, after) {
		t.Fatalf("a new certificate restarted containers: %v, were %v", after, before)
	}

	events := c.mustHatch(nil, "events")
	if n := strings.Count(events, "certificate.issued"); n != 1 || !strings.Contains(events, "certificate.renewed") {
		t.Errorf("%d certificate.issued events, want one order for the cluster, then renewals:\n%s", n, events)
	}
	status := c.mustHatch(nil, "status")
	for _, want := range []string{"certificates", "shop.hatch.test  acme", "Pebble", "own.hatch.test   secret", "user CA"} {
		if !strings.Contains(status, want) {
			t.Errorf("hatch status lacks %q:\n%s", want, status)
		}
	}
	c.getJSON("/api/v1/events?limit=1000", nil)
	c.getJSON("/api/v1/certificates", nil)
	c.mustHatch(nil, "destroy", "tls", "--yes")
	// The secret check runs when the test ends (newCluster's cleanup):
	// the private keys are nowhere in the logs, outputs and answers.
}

// peerCertificate is the leaf certificate addr serves for name.
func peerCertificate(addr, name string, roots *x509.CertPool) (*x509.Certificate, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{ServerName: name, RootCAs: roots})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// httpsLoad is clients each GETting in a loop on one kept-alive HTTP/2
// connection, every failure kept.
type httpsLoad struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	ok     int
	failed []string
}

func startHTTPSLoad(t testing.TB, addr, name string, roots *x509.CertPool, clients int) *httpsLoad {
	ctx, cancel := context.WithCancel(t.Context())
	l := &httpsLoad{cancel: cancel}
	for range clients {
		dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: dial,
			TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer client.CloseIdleConnections()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+name+"/version", nil)
				resp, err := client.Do(req)
				if err == nil {
					var body []byte
					body, err = io.ReadAll(resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != 200 {
						err = fmt.Errorf("status %s: %.200s", resp.Status, body)
					}
				}
				if ctx.Err() != nil {
					return
				}
				l.mu.Lock()
				if err != nil {
					l.failed = append(l.failed, err.Error())
				} else {
					l.ok++
				}
				l.mu.Unlock()
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	return l
}

func (l *httpsLoad) stop() (int, []string) {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok, l.failed
}

// httpsGet GETs path from name over HTTPS at addr, trusting roots.
func httpsGet(ctx context.Context, addr, name, path string, roots *x509.CertPool) (*http.Response, error) {
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: dial,
		TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+name+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	client.CloseIdleConnections()
	return resp, nil
}

func mustPort(t testing.TB, port string) int {
	t.Helper()
	var p int
	if _, err := fmt.Sscan(port, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAnUnreachableCAKeepsTheCertificateServingAcrossARestart stops the CA
// once a certificate is served: the renewal fails, the certificate keeps
// serving, the event and hatch status say why, and a restarted server keeps
// the back-off instead of asking the CA again at once.
func TestAnUnreachableCAKeepsTheCertificateServingAcrossARestart(t *testing.T) {
	const ip = "127.0.0.2"
	ingressPort := clFreePort(t, ip)
	ca := pebbletest.Start(t, pebbletest.Options{HTTPPort: mustPort(t, ingressPort), ResolveTo: ip, Validity: 24 * time.Second, Proxy: true})
	c := newCluster(t, clusterOptions{agents: []string{"a"}, ingressPorts: map[string]string{"a": ingressPort}, https: true,
		serverArgs: []string{"--acme-ca", ca.DirectoryURL, "--acme-email", "ops@hatch.test", "--acme-ca-root", ca.ListenerRootFile,
			"--acme-check-interval", "1s"}})
	a := c.agents["a"]
	dir := writeProject(t, map[string]string{"hatch.yaml": fmt.Sprintf(`project: fail
eggs:
  app:
    image: %s
    pull: missing
    port: 8080
    health: {http: /healthz, interval: 1s, timeout: 1s}
    routes: [fail.hatch.test]
`, dockertest.Image(t, dockertest.ImageSpec{}))})
	c.mustHatch(nil, "apply", "-f", filepath.Join(dir, "hatch.yaml"), "--yes")
	httpsAddr := net.JoinHostPort(ip, a.httpsPort)
	roots := ca.IssuingRoots(t)
	var first *x509.Certificate
	dockertest.Eventually(t, 60*time.Second, 250*time.Millisecond, func() error {
		var err error
		first, err = peerCertificate(httpsAddr, "fail.hatch.test", roots)
		return err
	})
	ca.Stop()
	failures := func() []string { return c.eventMessages("certificate.failed") }
	dockertest.Eventually(t, 40*time.Second, 500*time.Millisecond, func() error {
		if len(failures()) == 0 {
			return fmt.Errorf("no certificate.failed event yet")
		}
		return nil
	})
	failed := failures()
	tries := ca.Connections()
	if !strings.Contains(failed[0], "keeps serving") || !strings.Contains(failed[0], "next try in") {
		t.Errorf("the failure event does not say the certificate keeps serving and when it tries again: %s", failed[0])
	}
	c.restartServer()
	time.Sleep(5 * time.Second) // five checks' worth: a server forgetting its back-off would try again
	if now := failures(); len(now) != len(failed) {
		t.Fatalf("%d failures after the restart, %d before: the back-off was not kept", len(now), len(failed))
	}
	if now := ca.Connections(); now != tries {
		t.Fatalf("%d connections to the CA after the restart, %d before: the back-off was not kept", now, tries)
	}
	t.Logf("connections to the CA through the proxy: %d in all, none after the failure and the restart", tries)
	conn, err := tls.Dial("tcp", httpsAddr, &tls.Config{ServerName: "fail.hatch.test", InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	served := conn.ConnectionState().PeerCertificates[0]
	conn.Close()
	if !served.Equal(first) {
		t.Fatal("the certificate served changed while the CA was down")
	}
	// The status shows the failure's reason, as the event gives it.
	reason := strings.TrimPrefix(failed[len(failed)-1], "certificate for fail.hatch.test: ")
	reason = reason[:min(len(reason), 30)]
	status := c.mustHatch(nil, "status")
	if !strings.Contains(status, "fail.hatch.test") || !strings.Contains(status, reason) {
		t.Errorf("hatch status does not show the last error (%q):\n%s", reason, status)
	}
}
