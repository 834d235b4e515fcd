package dataplane

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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/ingress"
)

// servedPlane is a data plane served by Serve in this test's process.
type servedPlane struct {
	done chan struct{} // closed when Serve returned, err set
	err  error
	stop context.CancelFunc
}

// serveDataPlane runs Serve for cfg as binary (takeOver: as a successor)
// and waits until it answers as that binary; it is stopped at the test's end.
func serveDataPlane(t *testing.T, cfg Config, binary string, takeOver bool) *servedPlane {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	r := &servedPlane{done: make(chan struct{}), stop: stop}
	go func() {
		defer close(r.done)
		r.err = Serve(ctx, cfg, binary, takeOver, zaptest.NewLogger(t).Named(binary))
	}()
	t.Cleanup(func() {
		stop()
		select {
		case <-r.done:
		case <-time.After(time.Minute):
			t.Error("the data plane did not stop within a minute")
		}
	})
	c := NewClient(cfg.DataDir, zaptest.NewLogger(t))
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := c.Version(t.Context())
		if err == nil && v.Binary == binary {
			return r
		}
		select {
		case <-r.done:
			t.Fatalf("the data plane %s ended at its start: %v", binary, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the data plane %s did not answer: %v", binary, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testConfig is a data plane on loopback ports the kernel picks, in a data
// dir of the test's.
func testConfig(t *testing.T) Config {
	return Config{DataDir: t.TempDir(), HostID: "h1", IngressAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0",
		PublishAddr: "127.0.0.1", MeshAddr: "127.0.0.1:0"}
}

// backend is an HTTP server answering its name.
func backend(t *testing.T, name string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, name) }))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func webTable(addr string) ingress.Table {
	return ingress.Table{Eggs: []ingress.Egg{{Name: "web", Routes: []ingress.Route{{Host: "web.localhost"}},
		Backends: []ingress.Backend{{ContainerID: "c1", Addr: addr, Healthy: true}}}}}
}

// get asks the ingress at addr for web.localhost on client, returning the
// answer's status and body.
func get(client *http.Client, addr string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = "web.localhost"
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func TestTheControlAPIFeedsTheIngressAndTheMesh(t *testing.T) {
	cfg := testConfig(t)
	serveDataPlane(t, cfg, "v1", false)
	c := NewClient(cfg.DataDir, zaptest.NewLogger(t))
	defer c.Close()

	v, err := c.Version(t.Context())
	if err != nil || v.Binary != "v1" || v.PID != os.Getpid() || !sameConfig(v.Config, cfg) {
		t.Fatalf("version: %+v, %v; want v1, this process and the config served", v, err)
	}
	if fi, err := os.Stat(SocketPath(cfg.DataDir)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("control socket: %v, %v; want mode 0600", fi, err)
	}
	st, err := c.Status(t.Context())
	if err != nil || st.HTTP == "" || st.Admin == "" || st.Mesh == "" || st.HTTPS != "" {
		t.Fatalf("status: %+v, %v; want the HTTP, admin and mesh addresses listened on, no HTTPS", st, err)
	}
	if err := c.Update(webTable(backend(t, "web-1"))); err != nil {
		t.Fatal(err)
	}
	if code, body, err := get(http.DefaultClient, st.HTTP); err != nil || code != 200 || body != "web-1" {
		t.Fatalf("through the ingress: %d %q %v; want web-1's answer", code, body, err)
	}
	bad := webTable("")
	bad.Eggs[0].Routes[0].Host = ""
	if err := c.Update(bad); err == nil || !strings.Contains(err.Error(), "no hostname") {
		t.Fatalf("a table the ingress refuses: %v; want its reason", err)
	}

	c.SetProblem("the control plane cannot be verified")
	resp, err := http.Get("http://" + st.Admin + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/healthz with a problem set: %d, want 503", resp.StatusCode)
	}
	c.SetProblem("")
	c.SetPeers([]contract.Peer{{HostID: "h2", Addresses: []string{"127.0.0.1:1"}}})
	if p := c.HTTPSProblem(); p != "" {
		t.Errorf("HTTPS problem with no HTTPS asked for: %q", p)
	}
	if ch := c.Challenges(); len(ch) != 0 {
		t.Errorf("challenges: %v, want none", ch)
	}
	if err := c.ReloadCerts(t.Context()); err == nil {
		t.Error("reload-certs with no host certificate in the data dir: no error")
	}

	// A drained container leaves the pool and stays out until it is gone.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := c.Drain(ctx, "c1"); err != nil {
		t.Fatalf("drain of an idle backend: %v", err)
	}
	if code, _, err := get(http.DefaultClient, st.HTTP); err != nil || code != http.StatusServiceUnavailable {
		t.Fatalf("after the drain of its only backend: %d %v, want 503", code, err)
	}
	c.Gone("c1")
	if err := c.Update(webTable(backend(t, "web-2"))); err != nil {
		t.Fatal(err)
	}
	if code, body, err := get(http.DefaultClient, st.HTTP); err != nil || code != 200 || body != "web-2" {
		t.Fatalf("after Gone and a new table: %d %q %v; want web-2", code, body, err)
	}
}

func TestASecondDataPlaneForTheSameDataDirIsRefused(t *testing.T) {
	cfg := testConfig(t)
	serveDataPlane(t, cfg, "v1", false)
	err := Serve(t.Context(), cfg, "v1", false, zaptest.NewLogger(t))
	if !errors.Is(err, ErrRunning) {
		t.Fatalf("a second data plane: %v, want ErrRunning", err)
	}
}

// The agent's process ends (its connections with it): the data plane keeps
// serving the last table, and a new client (the next agent) finds it.
func TestTheDataPlaneKeepsServingWhenItsAgentIsGone(t *testing.T) {
	cfg := testConfig(t)
	serveDataPlane(t, cfg, "v1", false)
	agentSide := NewClient(cfg.DataDir, zaptest.NewLogger(t))
	if err := agentSide.Update(webTable(backend(t, "web-1"))); err != nil {
		t.Fatal(err)
	}
	st, err := agentSide.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	agentSide.Close()
	for range 20 {
		if code, body, err := get(&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}, st.HTTP); err != nil || code != 200 || body != "web-1" {
			t.Fatalf("with no agent: %d %q %v; want the last table served", code, body, err)
		}
	}
	next := NewClient(cfg.DataDir, zaptest.NewLogger(t))
	defer next.Close()
	if v, err := next.Version(t.Context()); err != nil || v.Binary != "v1" {
		t.Fatalf("the next agent: %+v, %v", v, err)
	}
}

// An upgrade in place: the successor takes the listeners, the state and the
// lock; every request sent meanwhile, on new connections and on kept-alive
// ones, is answered, and the predecessor exits.
func TestAHandoverFailsNoRequest(t *testing.T) {
	cfg := testConfig(t)
	old := serveDataPlane(t, cfg, "v1", false)
	c := NewClient(cfg.DataDir, zaptest.NewLogger(t))
	defer c.Close()
	if err := c.Update(webTable(backend(t, "web-1"))); err != nil {
		t.Fatal(err)
	}
	c.SetProblem("kept across the handover")
	// A table the ingress refuses whole is not what the successor gets.
	bad := webTable("")
	bad.Eggs[0].Routes[0].Host = ""
	if err := c.Update(bad); err == nil {
		t.Fatal("a table with a route without a hostname was taken")
	}
	before, err := c.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	var sent, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 6 {
		// Half the clients open a connection per request (each one a
		// connection made while the sockets change hands), half keep theirs.
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: i%2 == 0}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				sent.Add(1)
				if code, body, err := get(client, before.HTTP); err != nil || code != 200 || body != "web-1" {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("%d %q %v", code, body, err))
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	serveDataPlane(t, cfg, "v2", true)
	select {
	case <-old.done:
		if old.err != nil {
			t.Errorf("the predecessor's close: %v", old.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the predecessor did not exit after the handover")
	}
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	if failed.Load() != 0 || sent.Load() < 50 {
		t.Fatalf("%d of %d requests failed across the handover (first: %v)", failed.Load(), sent.Load(), firstErr.Load())
	}
	after, err := c.Status(t.Context())
	if err != nil || after.HTTP != before.HTTP || after.Admin != before.Admin || after.Mesh != before.Mesh {
		t.Fatalf("after the handover: %+v, %v; want the same addresses as before, %+v", after, err, before)
	}
	resp, err := http.Get("http://" + after.Admin + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("the host problem was not handed on: /healthz %d", resp.StatusCode)
	}
	if !running(cfg.DataDir) {
		t.Error("the successor does not hold the data dir's lock")
	}
	t.Logf("%d requests across the handover, none failed", sent.Load())
}

// A successor that cannot start leaves the predecessor serving.
func TestAFailedTakeOverLeavesThePredecessorServing(t *testing.T) {
	cfg := testConfig(t)
	serveDataPlane(t, cfg, "v1", false)
	c := NewClient(cfg.DataDir, zaptest.NewLogger(t))
	defer c.Close()
	st, err := c.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Update(webTable(backend(t, "web-1"))); err != nil {
		t.Fatal(err)
	}
	bad := cfg
	bad.HTTPSAddr = "not an address"
	if err := Serve(t.Context(), bad, "v2", true, zaptest.NewLogger(t)); err == nil {
		t.Fatal("a successor with a broken config started")
	}
	if code, body, err := get(http.DefaultClient, st.HTTP); err != nil || code != 200 || body != "web-1" {
		t.Fatalf("after a failed take-over: %d %q %v; want the predecessor serving", code, body, err)
	}
	if v, err := c.Version(t.Context()); err != nil || v.Binary != "v1" {
		t.Fatalf("after a failed take-over: %+v, %v; want v1 answering", v, err)
	}
}

// A published port and a relay socket are handed over too: once the
// predecessor has exited, both still answer, and the socket's file is still
// there (the predecessor's close did not remove it).
func TestAHandoverKeepsPublishedPortsAndRelaySockets(t *testing.T) {
	cfg := testConfig(t)
	old := serveDataPlane(t, cfg, "v1", false)
	c := NewClient(cfg.DataDir, zaptest.NewLogger(t))
	defer c.Close()
	addr := backend(t, "web-1")
	_, backendPort, _ := net.SplitHostPort(addr)
	target, _ := strconv.Atoi(backendPort)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	published := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	socket := filepath.Join(cfg.DataDir, "relays", "r1", "relay.sock")
	table := webTable(addr)
	table.Eggs[0].Ports = []ingress.Port{{Published: published, Target: target}}
	table.Eggs[0].Sockets = []ingress.Socket{{Path: socket, Target: target}}
	if err := c.Update(table); err != nil {
		t.Fatal(err)
	}
	viaPort := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	viaSocket := &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}}}
	check := func(when string) {
		t.Helper()
		for name, try := range map[string]func() (int, string, error){
			"published port": func() (int, string, error) { return get(viaPort, fmt.Sprintf("127.0.0.1:%d", published)) },
			"relay socket":   func() (int, string, error) { return get(viaSocket, "relay") },
		} {
			if code, body, err := try(); err != nil || code != 200 || body != "web-1" {
				t.Errorf("%s, through the %s: %d %q %v; want web-1's answer", when, name, code, body, err)
			}
		}
	}
	check("before the handover")
	serveDataPlane(t, cfg, "v2", true)
	select {
	case <-old.done:
	case <-time.After(time.Minute):
		t.Fatal("the predecessor did not exit after the handover")
	}
	check("after the predecessor exited")
	if fi, err := os.Stat(socket); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("the relay socket after the handover: %v, %v", fi, err)
	}
}

// An agent restarted with the settings its data plane runs with writes
// nothing (its data dir may be full: issue 26 point 1's tmpfs); other
// settings are written for the data plane it starts.
func TestTheConfigIsWrittenOnlyWhenItChanged(t *testing.T) {
	dir := t.TempDir()
	inode := func() uint64 {
		t.Helper()
		fi, err := os.Stat(filepath.Join(dir, configFile))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	if err := keepConfig(dir, []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	first := inode()
	if err := keepConfig(dir, []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	if inode() != first {
		t.Error("the same config was written again")
	}
	if err := keepConfig(dir, []byte(`{"a":2}`)); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, configFile)); string(b) != `{"a":2}` {
		t.Errorf("config file %q after a change, want the new one", b)
	}
}
