package ingress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
)

// testConfig is DefaultConfig with the test's logger and a registry of its
// own.
func testConfig(t testing.TB) Config {
	cfg := DefaultConfig()
	cfg.Logger = zaptest.NewLogger(t, zaptest.Level(zapcore.InfoLevel))
	cfg.Registry = prometheus.NewRegistry()
	cfg.Peers = noPeers{}
	return cfg
}

// noPeers is the mesh of a single host: every stream fails.
type noPeers struct{}

func (noPeers) DialStream(_ context.Context, hostID, workloadID string, _ int) (net.Conn, error) {
	return nil, fmt.Errorf("no peer %s for %s in this test", hostID, workloadID)
}

func (noPeers) Alive(string) bool { return false }

// startIngress starts an Ingress listening on 127.0.0.1 port 0 for HTTP and
// admin, and closes it when the test ends.
func startIngress(t testing.TB, tweak func(*Config)) *Ingress {
	t.Helper()
	cfg := testConfig(t)
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.AdminAddr = "127.0.0.1:0"
	cfg.PublishAddr = "127.0.0.1"
	if tweak != nil {
		tweak(&cfg)
	}
	in, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := in.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := in.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return in
}

func mustUpdate(t testing.TB, in *Ingress, tab Table) {
	t.Helper()
	if err := in.Update(tab); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

// testBackend is an HTTP backend that names itself in every answer.
//
//	/block   waits until release is closed (entered receives when it starts)
//	/headers echoes the request's Host and X-Forwarded-* headers
//	/sse     sends one event, waits for sseNext, sends a second
//	/ws      switches to protocol "echo" and echoes bytes
//	/reset   reads the request, then resets the connection without answering
//	POST     answers with the body's length
//	?delay=D sleeps D before anything else
type testBackend struct {
	name    string
	srv     *httptest.Server
	hits    atomic.Int64
	entered chan struct{}
	release chan struct{}
	sseNext chan struct{}
	// resetAll makes every request end in a reset connection, after the
	// request (and its body) was read.
	resetAll atomic.Bool
	// frozen makes every request wait for release before anything, as a
	// paused or SIGSTOPped container holds it.
	frozen atomic.Bool

	mu    sync.Mutex // guards conns
	conns map[net.Conn]http.ConnState
}

func newTestBackend(t testing.TB, name string) *testBackend {
	t.Helper()
	b := &testBackend{
		name:    name,
		entered: make(chan struct{}, 100),
		release: make(chan struct{}),
		sseNext: make(chan struct{}),
		conns:   make(map[net.Conn]http.ConnState),
	}
	b.srv = httptest.NewUnstartedServer(http.HandlerFunc(b.serve))
	b.srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.conns[c] = s
	}
	b.srv.Start()
	t.Cleanup(func() {
		b.unblock()
		b.srv.Close()
	})
	return b
}

func (b *testBackend) addr() string { return b.srv.Listener.Addr().String() }

func (b *testBackend) unblock() {
	select {
	case <-b.release:
	default:
		close(b.release)
	}
}

// openConns counts connections to the backend that are not closed.
func (b *testBackend) openConns() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, s := range b.conns {
		if s != http.StateClosed && s != http.StateHijacked {
			n++
		}
	}
	return n
}

func (b *testBackend) serve(w http.ResponseWriter, r *http.Request) {
	b.hits.Add(1)
	w.Header().Set("X-Backend", b.name)
	if b.frozen.Load() {
		<-b.release
	}
	if d, err := time.ParseDuration(r.URL.Query().Get("delay")); err == nil {
		time.Sleep(d) // a request that takes a while, so that some are in flight at any moment
	}
	switch {
	case b.resetAll.Load() || r.URL.Path == "/reset":
		_, _ = io.Copy(io.Discard, r.Body)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		_ = conn.(*net.TCPConn).SetLinger(0)
		_ = conn.Close()
	case r.Method == http.MethodPost:
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%s read %d", b.name, n)
	case r.URL.Path == "/block":
		b.entered <- struct{}{}
		<-b.release
		fmt.Fprint(w, b.name)
	case r.URL.Path == "/headers":
		for _, h := range []string{"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host"} {
			fmt.Fprintf(w, "%s=%s\n", h, strings.Join(r.Header.Values(h), ","))
		}
		fmt.Fprintf(w, "Host=%s\n", r.Host)
	case r.URL.Path == "/sse":
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-b.sseNext
		fmt.Fprint(w, "data: second\n\n")
	case r.URL.Path == "/ws":
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "echo")
		w.WriteHeader(http.StatusSwitchingProtocols)
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_ = rw.Flush()
		_, _ = io.Copy(conn, rw) // echo until the client closes
	default:
		fmt.Fprint(w, b.name)
	}
}

// newClient returns a client with its own connection pool, counting dials.
func newClient(t testing.TB) (*http.Client, *atomic.Int64) {
	t.Helper()
	var dials atomic.Int64
	d := &net.Dialer{}
	tr := &http.Transport{
		MaxIdleConnsPerHost: 64,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, network, addr)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}, &dials
}

// do sends a request for host through the ingress and returns the status,
// the X-Backend that answered and the body.
func do(t *testing.T, c *http.Client, in *Ingress, method, host, path string, body io.Reader) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+in.HTTPAddr().String()+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s%s: %v", method, host, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s%s: read body: %v", method, host, path, err)
	}
	return resp.StatusCode, resp.Header.Get("X-Backend"), string(b)
}

func get(t *testing.T, c *http.Client, in *Ingress, host, path string) (int, string, string) {
	t.Helper()
	return do(t, c, in, http.MethodGet, host, path, nil)
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// freePort returns a port that was free a moment ago, for published ports.
func freePort(t *testing.T) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(deadAddr(t))
	n, _ := strconv.Atoi(port)
	return n
}

// lineServer is a TCP backend that answers each line with "<name>: <line>".
type lineServer struct {
	name  string
	ln    net.Listener
	wg    sync.WaitGroup
	open  atomic.Int64
	mu    sync.Mutex // guards conns
	conns map[net.Conn]bool
}

func newLineServer(t *testing.T, name string) *lineServer {
	t.Helper()
	return newLineServerAt(t, name, "127.0.0.1:0")
}

// newLineServerAt is newLineServer on addr.
func newLineServerAt(t *testing.T, name, addr string) *lineServer {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &lineServer{name: name, ln: ln, conns: make(map[net.Conn]bool)}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns[c] = true
			s.mu.Unlock()
			s.open.Add(1)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer s.open.Add(-1)
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if _, err := fmt.Fprintf(c, "%s: %s\n", name, sc.Text()); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(s.stop)
	return s
}

func (s *lineServer) addr() string { return s.ln.Addr().String() }

// stop closes the listener and every connection, as a dying container would.
func (s *lineServer) stop() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// exchange sends a line on c and returns the reply.
func exchange(c net.Conn, r *bufio.Reader, line string) (string, error) {
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return "", err
	}
	if _, err := fmt.Fprintln(c, line); err != nil {
		return "", err
	}
	reply, err := r.ReadString('\n')
	return strings.TrimSuffix(reply, "\n"), err
}

// counterValue reads a counter or gauge with label egg from the ingress's registry.
func counterValue(t *testing.T, in *Ingress, name, egg string) float64 {
	t.Helper()
	families, err := in.cfg.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "egg" && l.GetValue() == egg {
					total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return total
}

// waitForLoad waits until counter has grown by n, so that a load test does
// each step under load however slow the machine is.
func waitForLoad(t *testing.T, counter *atomic.Int64, n int64) {
	t.Helper()
	target := counter.Load() + n
	eventually(t, fmt.Sprintf("%d more requests", n), func() bool { return counter.Load() >= target })
}
