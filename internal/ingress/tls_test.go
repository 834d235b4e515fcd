package ingress

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/testutil/testca"
)

// httpsClient dials addr whatever the URL's host, trusting ca, with HTTP/2.
func httpsClient(ca *testca.CA, addr string) *http.Client {
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	return &http.Client{
		Transport: &http.Transport{DialContext: dial, TLSClientConfig: &tls.Config{RootCAs: ca.Pool}, ForceAttemptHTTP2: true},
		Timeout:   5 * time.Second,
	}
}

// plainClient dials addr whatever the URL's host and follows no redirect.
func plainClient(addr string) *http.Client {
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	return &http.Client{
		Transport:     &http.Transport{DialContext: dial},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       5 * time.Second,
	}
}

func TestHTTPSServesBySNIWithHTTP2AndRedirectsPlainHTTP(t *testing.T) {
	ca := testca.New(t, "ingress test CA")
	in := startIngress(t, func(c *Config) {
		c.HTTPSAddr = "127.0.0.1:0"
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}
	})
	b := newTestBackend(t, "a")
	chain, key := ca.Leaf(t, 2, "shop.test")
	mustUpdate(t, in, Table{
		Eggs: []Egg{{Name: "p/shop/web", Routes: []Route{{Host: "shop.test", TLS: true, HSTS: true}, {Host: "plain.test"}},
			Backends: []Backend{{ContainerID: "c1", Addr: b.addr(), Healthy: true}}}},
		Certificates: []Certificate{{Host: "shop.test", Chain: chain, Key: key}},
		Challenges:   map[string]string{"tok1": "tok1.thumb"},
	})
	httpsAddr := in.HTTPSAddr().String()
	_, port, _ := net.SplitHostPort(httpsAddr)

	resp, err := httpsClient(ca, httpsAddr).Get("https://shop.test/headers")
	if err != nil {
		t.Fatalf("HTTPS GET: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		t.Fatalf("HTTPS GET: %s over %s, want 200 over HTTP/2", resp.Status, resp.Proto)
	}
	if got := resp.Header.Get("Strict-Transport-Security"); got != hstsValue {
		t.Errorf("HSTS header %q, want %q", got, hstsValue)
	}
	if !strings.Contains(string(body), "X-Forwarded-Proto=https") {
		t.Errorf("the backend did not hear the client's scheme:\n%s", body)
	}

	plain := plainClient(in.HTTPAddr().String())
	resp, err = plain.Get("http://shop.test/a/b?q=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if want := "https://shop.test:" + port + "/a/b?q=1"; resp.StatusCode != http.StatusPermanentRedirect || resp.Header.Get("Location") != want {
		t.Errorf("plain HTTP: %s to %q, want 308 to %q", resp.Status, resp.Header.Get("Location"), want)
	}
	if resp.Header.Get("Strict-Transport-Security") != "" {
		t.Error("HSTS sent over plain HTTP")
	}

	// The ACME challenge is answered over plain HTTP, never redirected.
	resp, err = plain.Get("http://shop.test/.well-known/acme-challenge/tok1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "tok1.thumb" {
		t.Errorf("challenge: %s %q, want 200 %q", resp.Status, body, "tok1.thumb")
	}
	// An unknown token of a TLS route is redirected like any other path.
	resp, err = plain.Get("http://shop.test/.well-known/acme-challenge/other")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusPermanentRedirect {
		t.Errorf("unknown token: %s, want 308", resp.Status)
	}

	// A route without TLS stays plain HTTP.
	resp, err = plain.Get("http://plain.test/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("plain route: %s, want 200", resp.Status)
	}

	// A name without a certificate gets no handshake.
	if _, err := httpsClient(ca, httpsAddr).Get("https://plain.test/"); err == nil {
		t.Error("HTTPS for a name without a certificate succeeded")
	}
}

func TestTrustedProxyForwardedHTTPSIsNotRedirected(t *testing.T) {
	in := startIngress(t, func(c *Config) {
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	})
	b := newTestBackend(t, "a")
	mustUpdate(t, in, Table{Eggs: []Egg{{Name: "p/shop/web", Routes: []Route{{Host: "shop.test", TLS: true, HSTS: true}},
		Backends: []Backend{{ContainerID: "c1", Addr: b.addr(), Healthy: true}}}}})
	req, _ := http.NewRequest("GET", "http://shop.test/headers", nil)
	req.Header.Set("X-Forwarded-Proto", "https")
	resp, err := plainClient(in.HTTPAddr().String()).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Strict-Transport-Security") == "" || !strings.Contains(string(body), "X-Forwarded-Proto=https") {
		t.Errorf("trusted proxy's HTTPS request: %s, HSTS %q, backend saw:\n%s", resp.Status, resp.Header.Get("Strict-Transport-Security"), body)
	}
}

func TestATLSRouteServesPlainHTTPUntilItsCertificateArrives(t *testing.T) {
	ca := testca.New(t, "ingress test CA")
	in := startIngress(t, func(c *Config) { c.HTTPSAddr = "127.0.0.1:0" })
	b := newTestBackend(t, "a")
	eggs := []Egg{{Name: "p/shop/web", Routes: []Route{{Host: "shop.test", TLS: true}},
		Backends: []Backend{{ContainerID: "c1", Addr: b.addr(), Healthy: true}}}}
	mustUpdate(t, in, Table{Eggs: eggs})
	plain := plainClient(in.HTTPAddr().String())
	resp, err := plain.Get("http://shop.test/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("before its certificate: %s, want 200 over plain HTTP", resp.Status)
	}
	chain, key := ca.Leaf(t, 3, "shop.test")
	mustUpdate(t, in, Table{Eggs: eggs, Certificates: []Certificate{{Host: "shop.test", Chain: chain, Key: key}}})
	resp, err = plain.Get("http://shop.test/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusPermanentRedirect {
		t.Fatalf("with its certificate: %s, want 308", resp.Status)
	}
}

func TestTrustedOnlyFromListedAddresses(t *testing.T) {
	prefixes := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	for remote, want := range map[string]bool{
		"10.1.2.3:5000": true, "[::ffff:10.1.2.3]:5000": true, "[::1]:80": true,
		"11.0.0.1:5000": false, "127.0.0.1:80": false, "garbage": false,
	} {
		if got := trusted(prefixes, remote); got != want {
			t.Errorf("trusted(%s) = %v, want %v", remote, got, want)
		}
	}
	if trusted(nil, "10.1.2.3:5000") {
		t.Error("no trusted proxies, yet trusted")
	}
}

func TestHTTPSURL(t *testing.T) {
	for _, c := range []struct {
		host string
		port int32
		uri  string
		want string
	}{
		{"shop.test", 443, "/", "https://shop.test/"},
		{"shop.test:8080", 0, "/a?b=c", "https://shop.test/a?b=c"},
		{"shop.test:8080", 8443, "/a", "https://shop.test:8443/a"},
		{"[::1]:8080", 8443, "/", "https://[::1]:8443/"},
	} {
		if got := httpsURL(c.host, c.port, c.uri); got != c.want {
			t.Errorf("httpsURL(%q, %d, %q) = %q, want %q", c.host, c.port, c.uri, got, c.want)
		}
	}
}

func TestCertificateRotatesAndABadOneIsReportedWithoutItsKey(t *testing.T) {
	ca := testca.New(t, "ingress test CA")
	in := startIngress(t, func(c *Config) { c.HTTPSAddr = "127.0.0.1:0" })
	b := newTestBackend(t, "a")
	eggs := []Egg{{Name: "p/shop/web", Routes: []Route{{Host: "shop.test", TLS: true}},
		Backends: []Backend{{ContainerID: "c1", Addr: b.addr(), Healthy: true}}}}
	serial := func() int64 {
		t.Helper()
		conn, err := tls.Dial("tcp", in.HTTPSAddr().String(), &tls.Config{ServerName: "shop.test", RootCAs: ca.Pool})
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	chain, key := ca.Leaf(t, 10, "shop.test")
	mustUpdate(t, in, Table{Eggs: eggs, Certificates: []Certificate{{Host: "shop.test", Chain: chain, Key: key}}})
	if got := serial(); got != 10 {
		t.Fatalf("serial %d, want 10", got)
	}
	chain2, key2 := ca.Leaf(t, 11, "shop.test")
	mustUpdate(t, in, Table{Eggs: eggs, Certificates: []Certificate{{Host: "shop.test", Chain: chain2, Key: key2}}})
	if got := serial(); got != 11 {
		t.Fatalf("after rotation serial %d, want 11", got)
	}
	// A key that does not match its chain: reported by host, the key's
	// bytes nowhere in the message, and the routes still served.
	err := in.Update(Table{Eggs: eggs, Certificates: []Certificate{{Host: "shop.test", Chain: chain, Key: key2}}})
	if err == nil || !strings.Contains(err.Error(), "shop.test") {
		t.Fatalf("mismatched key: %v, want an error naming shop.test", err)
	}
	if strings.Contains(err.Error(), string(key2[30:60])) {
		t.Fatal("the error carries the key")
	}
	if got := serial(); got != 11 {
		t.Fatalf("after a bad certificate serial %d, want the valid one, 11", got)
	}
	resp, err := plainClient(in.HTTPAddr().String()).Get("http://shop.test/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusPermanentRedirect {
		t.Errorf("after a bad certificate the route answers %s, want 308", resp.Status)
	}
}

func TestHTTPSCannotBindKeepsHTTP(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	in := startIngress(t, func(c *Config) { c.HTTPSAddr = busy.Addr().String() })
	if in.HTTPSProblem() == "" || !strings.Contains(in.HTTPSProblem(), busy.Addr().String()) {
		t.Fatalf("HTTPSProblem %q, want the address that could not be bound", in.HTTPSProblem())
	}
	if in.HTTPAddr() == nil {
		t.Fatal("HTTP not served")
	}
}

func TestTLSALPNChallengeIsPresentedOnlyForAcmeTLS1(t *testing.T) {
	ca, challengeCA := testca.New(t, "ingress test CA"), testca.New(t, "ingress test CA")
	in := startIngress(t, func(c *Config) { c.HTTPSAddr = "127.0.0.1:0" })
	chain, key := ca.Leaf(t, 5, "shop.test")
	alpnChain, alpnKey := challengeCA.Leaf(t, 6, "shop.test")
	mustUpdate(t, in, Table{Certificates: []Certificate{{Host: "shop.test", Chain: chain, Key: key}},
		ALPNChallenges: []Certificate{{Host: "shop.test", Chain: alpnChain, Key: alpnKey, Token: "tok-alpn"}}})
	serial := func(protos []string) int64 {
		t.Helper()
		conn, err := tls.Dial("tcp", in.HTTPSAddr().String(), &tls.Config{ServerName: "shop.test", NextProtos: protos, InsecureSkipVerify: true})
		if err != nil {
			t.Fatalf("handshake with %v: %v", protos, err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	if got := serial([]string{"acme-tls/1"}); got != 6 {
		t.Errorf("acme-tls/1 got serial %d, want the challenge's 6", got)
	}
	if got := serial([]string{"h2", "http/1.1"}); got != 5 {
		t.Errorf("a browser got serial %d, want the site's 5", got)
	}
	if got := in.Challenges(); len(got) != 1 || got[0] != "tok-alpn" {
		t.Errorf("Challenges %v, want the ALPN token", got)
	}
}
