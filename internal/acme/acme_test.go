package acme

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/seal"
	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/testutil/pebbletest"
)

// hosts stands for the hosts' desired states and one ingress: certificates
// and challenges kept in memory, the challenges served over HTTP where
// pebble validates them.
type hosts struct {
	mu         sync.Mutex
	names      map[string]*contract.Certificate
	challenges map[string]string
	alpn       map[string]*tls.Certificate
	alpnHost   map[string]string // token -> host
	answered   int
	puts       int
}

func (h *hosts) TLSNames(context.Context) (map[string]*contract.Certificate, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]*contract.Certificate{}
	for k, v := range h.names {
		out[k] = v
	}
	return out, nil
}

func (h *hosts) PutCertificate(_ context.Context, c contract.Certificate) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.names[c.Host] = &c
	h.puts++
	return nil
}

func (h *hosts) SetChallenge(_ context.Context, c contract.Challenge, add bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !add {
		delete(h.challenges, c.Token)
		delete(h.alpn, h.alpnHost[c.Token])
		return nil
	}
	if c.ALPNCert != "" {
		cert, err := tls.X509KeyPair([]byte(c.ALPNCert), []byte(c.ALPNKey))
		if err != nil {
			return err
		}
		h.alpn[c.Host] = &cert
		if h.alpnHost == nil {
			h.alpnHost = map[string]string{}
		}
		h.alpnHost[c.Token] = c.Host
		return nil
	}
	h.challenges[c.Token] = c.KeyAuth
	return nil
}

// getCertificate answers TLS-ALPN-01 validations.
func (h *hosts) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.alpn[hello.ServerName]; ok && slices.Contains(hello.SupportedProtos, "acme-tls/1") {
		h.answered++
		return c, nil
	}
	return nil, fmt.Errorf("no challenge for %q", hello.ServerName)
}

func (h *hosts) ChallengeWaiting(context.Context, string) ([]string, error) { return nil, nil }

func (h *hosts) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	keyAuth, ok := h.challenges[strings.TrimPrefix(r.URL.Path, "/.well-known/acme-challenge/")]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h.answered++
	_, _ = w.Write([]byte(keyAuth))
}

type events struct {
	mu  sync.Mutex
	all []store.Event
}

func (e *events) AppendEvent(_ context.Context, ev store.Event) (int64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
	return int64(len(e.all)), nil
}

func TestObtainsAndRenewsFromPebbleOverHTTP01(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hosts{names: map[string]*contract.Certificate{"shop.hatch.test": nil}, challenges: map[string]string{}, alpn: map[string]*tls.Certificate{}}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	ca := pebbletest.Start(t, pebbletest.Options{HTTPPort: port, ResolveTo: "127.0.0.1", Validity: 30 * time.Second})

	box, _ := seal.New(bytes.Repeat([]byte{9}, 32))
	ev := &events{}
	clock := time.Now
	m, err := New(Config{DirectoryURL: ca.DirectoryURL, Email: "ops@hatch.test",
		HTTPClient:     &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.ListenerRoots}}},
		AccountKeyFile: filepath.Join(t.TempDir(), "account.key"), Box: box, Certificates: h, Events: ev,
		Logger: zaptest.NewLogger(t), Now: func() time.Time { return clock() }})
	if err != nil {
		t.Fatal(err)
	}
	m.CheckOnce(t.Context())
	h.mu.Lock()
	cert, answered := h.names["shop.hatch.test"], h.answered
	h.mu.Unlock()
	if cert == nil {
		t.Fatalf("no certificate; events %+v\n%s", ev.all, ca.Log())
	}
	if answered == 0 {
		t.Error("pebble never fetched the challenge: it was not really validated")
	}
	pair, err := tls.X509KeyPair([]byte(cert.Chain), []byte(cert.Key))
	if err != nil {
		t.Fatal(err)
	}
	inter := x509.NewCertPool()
	for _, c := range pair.Certificate[1:] {
		ic, _ := x509.ParseCertificate(c)
		inter.AddCert(ic)
	}
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{DNSName: "shop.hatch.test", Roots: ca.IssuingRoots(t), Intermediates: inter}); err != nil {
		t.Fatalf("the certificate does not chain to pebble's root: %v", err)
	}
	if len(h.challenges) != 0 {
		t.Errorf("challenges left on the hosts: %v", h.challenges)
	}

	// Not due yet: no new order.
	m.CheckOnce(t.Context())
	if h.puts != 1 {
		t.Fatalf("%d certificates put, want 1 (not due)", h.puts)
	}
	// Less than a third of its life left: renewed.
	life := pair.Leaf.NotAfter.Sub(pair.Leaf.NotBefore)
	clock = func() time.Time { return pair.Leaf.NotAfter.Add(-life / 4) }
	m.CheckOnce(t.Context())
	if h.puts != 2 || h.names["shop.hatch.test"].Chain == cert.Chain {
		t.Fatalf("%d certificates put, want a renewal", h.puts)
	}
	var types []string
	for _, e := range ev.all {
		types = append(types, string(e.Type))
	}
	if strings.Join(types, ",") != "certificate.issued,certificate.renewed" {
		t.Errorf("events %v", types)
	}
	for _, e := range ev.all {
		if strings.Contains(e.Message, "PRIVATE KEY") {
			t.Fatal("an event carries the key")
		}
	}
}

func TestAFailingCABacksOff(t *testing.T) {
	// A CA that refuses every connection: the directory is never read.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + ln.Addr().String() + "/dir"
	ln.Close()
	h := &hosts{names: map[string]*contract.Certificate{"shop.hatch.test": nil}, challenges: map[string]string{}, alpn: map[string]*tls.Certificate{}}
	box, _ := seal.New(bytes.Repeat([]byte{9}, 32))
	ev := &events{}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	cfg := Config{DirectoryURL: url, Email: "ops@hatch.test", AccountKeyFile: filepath.Join(dir, "account.key"),
		StateFile: filepath.Join(dir, "state.json"),
		Box:       box, Certificates: h, Events: ev, Logger: zaptest.NewLogger(t), Now: func() time.Time { return now },
		MinBackoff: time.Minute, MaxBackoff: 10 * time.Minute}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	attempts := func() int { return len(ev.all) }
	m.CheckOnce(t.Context())
	m.CheckOnce(t.Context()) // within the back-off: no attempt
	if attempts() != 1 || ev.all[0].Type != store.EventCertificateFailed {
		t.Fatalf("events %+v, want one failure", ev.all)
	}
	for i, wait := range []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 10 * time.Minute, 10 * time.Minute} {
		now = now.Add(wait - time.Second)
		m.CheckOnce(t.Context())
		if attempts() != i+1 {
			t.Fatalf("an attempt %s into a back-off of %s", wait-time.Second, wait)
		}
		now = now.Add(time.Second)
		m.CheckOnce(t.Context())
		if attempts() != i+2 {
			t.Fatalf("no attempt after a back-off of %s", wait)
		}
	}
	st, _ := m.Statuses(t.Context())
	if len(st) != 1 || st[0].LastError == "" {
		t.Fatalf("statuses %+v, want the last error", st)
	}
	// A restarted server keeps the back-off: no attempt before it ends.
	restarted, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n := attempts()
	now = now.Add(9 * time.Minute)
	restarted.CheckOnce(t.Context())
	if attempts() != n {
		t.Fatal("a restarted server tried within the back-off")
	}
	now = now.Add(time.Minute)
	restarted.CheckOnce(t.Context())
	if attempts() != n+1 {
		t.Fatal("a restarted server did not try after the back-off")
	}
}

func TestObtainsFromPebbleOverTLSALPN01(t *testing.T) {
	h := &hosts{names: map[string]*contract.Certificate{"alpn.hatch.test": nil}, challenges: map[string]string{}, alpn: map[string]*tls.Certificate{}}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: h.getCertificate, NextProtos: []string{"acme-tls/1"}})
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
			go func() { _ = c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	ca := pebbletest.Start(t, pebbletest.Options{TLSPort: ln.Addr().(*net.TCPAddr).Port, ResolveTo: "127.0.0.1"})
	box, _ := seal.New(bytes.Repeat([]byte{9}, 32))
	m, err := New(Config{DirectoryURL: ca.DirectoryURL, Email: "ops@hatch.test", Challenge: ChallengeTLSALPN01,
		HTTPClient:     &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.ListenerRoots}}},
		AccountKeyFile: filepath.Join(t.TempDir(), "account.key"), Box: box, Certificates: h, Events: &events{},
		Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	m.CheckOnce(t.Context())
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.names["alpn.hatch.test"] == nil || h.answered == 0 {
		t.Fatalf("certificate %v, %d validations answered; want one obtained over TLS-ALPN-01\n%s", h.names["alpn.hatch.test"] != nil, h.answered, ca.Log())
	}
	if len(h.alpn) != 0 {
		t.Error("the challenge certificate was not withdrawn")
	}
}

// countingNames counts how often the manager looks at the names.
type countingNames struct {
	hosts
	mu    sync.Mutex
	looks int
}

func (c *countingNames) TLSNames(ctx context.Context) (map[string]*contract.Certificate, error) {
	c.mu.Lock()
	c.looks++
	c.mu.Unlock()
	return map[string]*contract.Certificate{}, nil
}

func (c *countingNames) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.looks
}

// A change recorded through any server (an apply through another one,
// whose Kick reaches only its own manager) makes the manager look at the
// names again soon, not at its next hourly check; a burst of changes makes
// one look.
func TestAChangeRecordedAnywhereWakesTheManager(t *testing.T) {
	names := &countingNames{}
	var mu sync.Mutex
	next := make(chan struct{})
	change := func() {
		mu.Lock()
		defer mu.Unlock()
		close(next)
		next = make(chan struct{})
	}
	box, _ := seal.New(bytes.Repeat([]byte{9}, 32))
	m, err := New(Config{DirectoryURL: "https://ca.invalid/dir", Email: "ops@hatch.test",
		AccountKeyFile: filepath.Join(t.TempDir(), "account.key"), Box: box, Certificates: names, Events: &events{},
		Logger: zaptest.NewLogger(t), CheckEvery: time.Hour, ChangeEvery: 200 * time.Millisecond,
		Changes: func() <-chan struct{} { mu.Lock(); defer mu.Unlock(); return next }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); names.count() < n; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d looks at the names, want %d", names.count(), n)
			}
		}
	}
	waitFor(1) // at once, at the start
	change()
	waitFor(2)
	for range 5 {
		change()
	}
	waitFor(3)
	time.Sleep(500 * time.Millisecond)
	if n := names.count(); n != 3 {
		t.Errorf("%d looks after a burst of 5 changes, want 3 (one for the burst)", n)
	}
}
