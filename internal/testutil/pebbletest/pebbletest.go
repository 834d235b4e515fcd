// Package pebbletest runs a real ACME CA for tests: Debian's pebble, with
// pebble-challtestsrv as its DNS server (every name resolves to the address
// the test gives), both on loopback, both stopped when the test ends.
// Pebble validates HTTP-01 for real (PEBBLE_VA_NOSLEEP=1, never
// PEBBLE_VA_ALWAYS_VALID) on the port the test's ingress listens on. Its
// issuing root is made anew at each start and read from its management
// port. Without the binaries a test is skipped, except under CI=true, where
// it fails: .ci/run installs them.
package pebbletest

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/testutil/testca"
)

// Options set up a CA.
type Options struct {
	// HTTPPort is where pebble sends HTTP-01 validation requests: the
	// ingress's HTTP port.
	HTTPPort int
	// TLSPort is where it sends TLS-ALPN-01 validations: the ingress's
	// HTTPS port (0: a free port, nothing listening).
	TLSPort int
	// ResolveTo is the IPv4 address every name resolves to (the host the
	// ingress listens on), but those given to CA.Resolve.
	ResolveTo string
	// Validity is the certificates' life (0: pebble's default, 5 years).
	Validity time.Duration
	// Proxy puts a TCP proxy in front of the ACME port, which counts the
	// connections made to the CA (Connections) and keeps accepting them
	// once pebble is stopped. Pebble writes its URLs with the Host a
	// request came to, so every request of an ACME client goes through it.
	Proxy bool
}

// CA is a running pebble.
type CA struct {
	// DirectoryURL is the ACME directory.
	DirectoryURL string
	// ListenerRootFile is a PEM file of the root that signed pebble's own
	// HTTPS certificate (hatch server --acme-ca-root).
	ListenerRootFile string
	// ListenerRoots is the same as a pool.
	ListenerRoots *x509.CertPool
	mgmt          string
	// dnsMgmt is pebble-challtestsrv's management address (Resolve).
	dnsMgmt    string
	log        *lockedBuffer
	stopPebble func()
	conns      atomic.Int64
}

// Connections is how many connections the ACME client made through the
// proxy (Options.Proxy).
func (ca *CA) Connections() int64 { return ca.conns.Load() }

// proxy accepts on a new loopback port, counts each connection, and pipes
// it to upstream (closing it when upstream is gone), until the test ends.
func (ca *CA) proxy(t testing.TB, upstream string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ca.conns.Add(1)
			go func() {
				defer c.Close()
				u, err := net.DialTimeout("tcp", upstream, 2*time.Second)
				if err != nil {
					return
				}
				defer u.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return ln.Addr().String()
}

// Stop stops pebble (not its DNS server): the CA is unreachable from then
// on.
func (ca *CA) Stop() { ca.stopPebble() }

// Start runs pebble and its DNS server until the test ends.
func Start(t testing.TB, opts Options) *CA {
	t.Helper()
	pebble, err1 := exec.LookPath("pebble")
	challtest, err2 := exec.LookPath("pebble-challtestsrv")
	if err := errors.Join(err1, err2); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("pebble is not installed (apt-get install pebble; .ci/run does): %v", err)
		}
		t.Skipf("pebble is not installed (apt-get install pebble): %v", err)
	}
	dir := t.TempDir()
	rootPEM, certPEM, keyPEM := listenerCertificate(t)
	ca := &CA{ListenerRootFile: filepath.Join(dir, "listener-root.pem"), ListenerRoots: x509.NewCertPool(), log: &lockedBuffer{}}
	ca.ListenerRoots.AppendCertsFromPEM(rootPEM)
	for name, data := range map[string][]byte{"listener-root.pem": rootPEM, "cert.pem": certPEM, "key.pem": keyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	dnsPort, acmePort, mgmtPort, tlsPort, challMgmt := freePort(t), freePort(t), freePort(t), freePort(t), freePort(t)
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress":                  "127.0.0.1:" + acmePort,
		"managementListenAddress":        "127.0.0.1:" + mgmtPort,
		"certificate":                    filepath.Join(dir, "cert.pem"),
		"privateKey":                     filepath.Join(dir, "key.pem"),
		"httpPort":                       opts.HTTPPort,
		"tlsPort":                        tlsPortOf(opts.TLSPort, tlsPort),
		"ocspResponderURL":               "",
		"externalAccountBindingRequired": false,
	}}
	if opts.Validity > 0 {
		cfg["pebble"].(map[string]any)["certificateValidityPeriod"] = int(opts.Validity.Seconds())
	}
	cfgJSON, _ := json.Marshal(cfg)
	cfgFile := filepath.Join(dir, "pebble.json")
	if err := os.WriteFile(cfgFile, cfgJSON, 0o600); err != nil {
		t.Fatal(err)
	}
	_ = run(t, ca.log, "challtestsrv", exec.Command(challtest, "-dns01", "127.0.0.1:"+dnsPort, "-http01", "", "-https01", "", "-tlsalpn01", "",
		"-defaultIPv4", opts.ResolveTo, "-defaultIPv6", "", "-management", "127.0.0.1:"+challMgmt))
	cmd := exec.Command(pebble, "-config", cfgFile, "-dnsserver", "127.0.0.1:"+dnsPort)
	cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1")
	ca.stopPebble = run(t, ca.log, "pebble", cmd)
	ca.DirectoryURL = "https://127.0.0.1:" + acmePort + "/dir"
	if opts.Proxy {
		ca.DirectoryURL = "https://" + ca.proxy(t, "127.0.0.1:"+acmePort) + "/dir"
	}
	ca.mgmt = "https://127.0.0.1:" + mgmtPort
	ca.dnsMgmt = "http://127.0.0.1:" + challMgmt
	client := ca.client()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := client.Get(ca.DirectoryURL)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pebble did not answer at %s: %v\n%s", ca.DirectoryURL, err, ca.log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return ca
}

// Resolve has the CA's DNS server answer A queries for name with ip
// instead of Options.ResolveTo: for a test whose hosts' addresses are known
// only after the CA must be running (its URL is on the server's command
// line), and whose name must resolve to one host of several.
func (ca *CA) Resolve(t testing.TB, name, ip string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"host": name, "addresses": []string{ip}})
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Post(ca.dnsMgmt+"/add-a", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("pebble-challtestsrv: resolve %s to %s: %v", name, ip, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		t.Fatalf("pebble-challtestsrv: resolve %s to %s: %s %s", name, ip, resp.Status, msg)
	}
}

// Log is what pebble and its DNS server printed.
func (ca *CA) Log() string { return ca.log.String() }

// client trusts pebble's listener.
func (ca *CA) client() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.ListenerRoots}}}
}

// IssuingRoots returns pebble's root of the certificates it issues, as its
// management port gives it.
func (ca *CA) IssuingRoots(t testing.TB) *x509.CertPool {
	t.Helper()
	resp, err := ca.client().Get(ca.mgmt + "/roots/0")
	if err != nil {
		t.Fatalf("pebble's root: %v", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("pebble's root: %s %v", resp.Status, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		t.Fatalf("pebble's root is not PEM: %q", data)
	}
	return pool
}

// run starts cmd, stopped and waited for at the test's end (or when the
// function it returns is called), its output in log.
func run(t testing.TB, log *lockedBuffer, name string, cmd *exec.Cmd) func() {
	t.Helper()
	cmd.Stdout = prefixed{log, name}
	cmd.Stderr = prefixed{log, name}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop := func() {
		_ = cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("%s did not stop", name)
		}
	}
	t.Cleanup(stop)
	return stop
}

// listenerCertificate makes a root and, signed by it, pebble's own HTTPS
// certificate for 127.0.0.1 and localhost (the package ships none).
func listenerCertificate(t testing.TB) (rootPEM, certPEM, keyPEM []byte) {
	t.Helper()
	root := testca.New(t, "pebbletest listener root")
	certPEM, keyPEM = root.Leaf(t, 2, "localhost", "127.0.0.1")
	return root.PEM(), certPEM, keyPEM
}

func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

func tlsPortOf(given int, free string) int {
	if given != 0 {
		return given
	}
	return mustAtoi(free)
}

func mustAtoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}

// lockedBuffer collects the processes' output.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

type prefixed struct {
	l    *lockedBuffer
	name string
}

func (p prefixed) Write(b []byte) (int, error) {
	p.l.mu.Lock()
	defer p.l.mu.Unlock()
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if line != "" {
			fmt.Fprintf(&p.l.b, "%s: %s", p.name, line)
		}
	}
	return len(b), nil
}
