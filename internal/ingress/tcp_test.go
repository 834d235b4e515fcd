package ingress

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// tcpEgg publishes port for an egg of line servers.
func tcpEgg(port int, drain time.Duration, servers ...*lineServer) Table {
	e := Egg{Name: "db", Ports: []Port{{Published: port}}, DrainTimeout: drain}
	for _, s := range servers {
		e.Backends = append(e.Backends, Backend{ContainerID: s.name, Addr: s.addr(), Healthy: true})
	}
	return Table{Eggs: []Egg{e}}
}

// dialPort connects to a published port and returns the connection and a
// reader on it.
func dialPort(t *testing.T, port int) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("dial published port: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// whoAnswers opens a connection, exchanges a line and returns the server's
// name, keeping the connection open.
func whoAnswers(t *testing.T, port int) (string, net.Conn, *bufio.Reader) {
	t.Helper()
	c, r := dialPort(t, port)
	reply, err := exchange(c, r, "hello")
	if err != nil {
		t.Fatalf("exchange: %v", err)
	}
	name, rest, _ := strings.Cut(reply, ": ")
	if rest != "hello" {
		t.Fatalf("reply %q", reply)
	}
	return name, c, r
}

func TestPublishedPortForwardsConnections(t *testing.T) {
	in := startIngress(t, nil)
	port := freePort(t)
	a := newLineServer(t, "a")
	mustUpdate(t, in, tcpEgg(port, 0, a))
	name, c, r := whoAnswers(t, port)
	if name != "a" {
		t.Fatalf("answered by %q", name)
	}
	// A half-close still gets the reply to what was sent before it.
	fmt.Fprintln(c, "last words")
	c.(*net.TCPConn).CloseWrite()
	rest, err := io.ReadAll(r)
	if err != nil || string(rest) != "a: last words\n" {
		t.Fatalf("after half-close: %q, %v", rest, err)
	}
}

func TestPublishedPortTargetPortOverridesTheAddrPort(t *testing.T) {
	in := startIngress(t, nil)
	port := freePort(t)
	a := newLineServer(t, "a")
	_, target, _ := net.SplitHostPort(a.addr())
	targetPort, _ := strconv.Atoi(target)
	mustUpdate(t, in, Table{Eggs: []Egg{{Name: "db", Ports: []Port{{Published: port, Target: targetPort}},
		// The HTTP address points elsewhere; the published port goes to Target.
		Backends: []Backend{{ContainerID: "a", Addr: deadAddr(t), Healthy: true}}}}})
	if name, _, _ := whoAnswers(t, port); name != "a" {
		t.Fatalf("answered by %q", name)
	}
}

func TestPublishedPortWithoutBackendClosesTheConnection(t *testing.T) {
	in := startIngress(t, nil)
	port := freePort(t)
	mustUpdate(t, in, Table{Eggs: []Egg{{Name: "db", Ports: []Port{{Published: port}}}}})
	c, r := dialPort(t, port)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadByte(); err != io.EOF {
		t.Fatalf("read = %v, want EOF: the connection should be closed", err)
	}
	if got := counterValue(t, in, "hatch_ingress_tcp_rejected_total", "db"); got != 1 {
		t.Errorf("rejected = %v, want 1", got)
	}
}

func TestPublishedPortSkipsABackendThatCannotBeDialled(t *testing.T) {
	in := startIngress(t, nil)
	port := freePort(t)
	b := newLineServer(t, "b")
	tab := tcpEgg(port, 0, b)
	tab.Eggs[0].Backends = append(tab.Eggs[0].Backends, Backend{ContainerID: "dead", Addr: deadAddr(t), Healthy: true})
	mustUpdate(t, in, tab)
	for range 6 {
		if name, c, _ := whoAnswers(t, port); name != "b" {
			t.Fatalf("answered by %q", name)
		} else {
			c.Close()
		}
	}
	if got := counterValue(t, in, "hatch_ingress_backend_dial_failures_total", "db"); got != 1 {
		t.Errorf("dial failures = %v, want 1", got)
	}
}

func TestPublishedPortDrainLetsOpenConnectionsFinish(t *testing.T) {
	in := startIngress(t, nil)
	port := freePort(t)
	a, b := newLineServer(t, "a"), newLineServer(t, "b")
	mustUpdate(t, in, tcpEgg(port, time.Minute, a, b))
	// Find a connection held by a.
	var held net.Conn
	var heldR *bufio.Reader
	for range 3 {
		name, c, r := whoAnswers(t, port)
		if name == "a" {
			held, heldR = c, r
			break
		}
	}
	if held == nil {
		t.Fatal("no connection reached a")
	}
	drained := make(chan error, 1)
	go func() { drained <- in.Drain(context.Background(), "a") }()
	eventually(t, "a draining", func() bool { return in.Status()[0].Draining == 1 })
	for range 5 {
		if name, c, _ := whoAnswers(t, port); name != "b" {
			t.Fatalf("a draining backend got a new connection")
		} else {
			c.Close()
		}
	}
	if reply, err := exchange(held, heldR, "still there?"); err != nil || reply != "a: still there?" {
		t.Fatalf("open connection during the drain: %q, %v", reply, err)
	}
	select {
	case err := <-drained:
		t.Fatalf("Drain returned (%v) with a connection open", err)
	case <-time.After(50 * time.Millisecond):
	}
	held.Close()
	select {
	case err := <-drained:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Drain did not return once the connection closed")
	}
}

// TestPublishedPortDrainTimeoutLeavesOpenConnectionsUntilGone: a
// connection still open at the drain timeout keeps working, so that the
// container's stop signal lets the application close it; Gone cuts it.
func TestPublishedPortDrainTimeoutLeavesOpenConnectionsUntilGone(t *testing.T) {
	in := startIngress(t, nil)
	port := freePort(t)
	a := newLineServer(t, "a")
	mustUpdate(t, in, tcpEgg(port, 100*time.Millisecond, a))
	_, c, r := whoAnswers(t, port)
	start := time.Now()
	if err := in.Drain(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Fatalf("Drain returned after %s, before the drain timeout", took)
	}
	if reply, err := exchange(c, r, "after the drain"); err != nil || reply != "a: after the drain" {
		t.Fatalf("the open connection after the drain timeout: %q, %v; want it left to the container's stop", reply, err)
	}
	in.Gone("a")
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadByte(); err != io.EOF {
		t.Fatalf("read after Gone = %v, want EOF", err)
	}
	eventually(t, "the backend side closed", func() bool { return a.open.Load() == 0 })
}

// TestPublishedPortKeepAliveHTTPLosesNothingAcrossARoll is what a roll does
// to HTTP clients that keep their connections through a published port: the
// connections never go idle, so the drain timeout passes with them open;
// then the container's stop signal makes its HTTP server close each after
// the response in flight (net/http's Shutdown), then the container is gone.
// No request may fail, and each must be served once: a connection cut with
// a request in flight would fail it, or have the client replay it.
func TestPublishedPortKeepAliveHTTPLosesNothingAcrossARoll(t *testing.T) {
	in := startIngress(t, nil)
	port := freePort(t)
	a, b := newTestBackend(t, "a"), newTestBackend(t, "b")
	table := func(backends ...*testBackend) Table {
		e := Egg{Name: "web", Ports: []Port{{Published: port}}, DrainTimeout: 100 * time.Millisecond}
		for _, be := range backends {
			e.Backends = append(e.Backends, Backend{ContainerID: be.name, Addr: be.addr(), Healthy: true})
		}
		return Table{Eggs: []Egg{e}}
	}
	mustUpdate(t, in, table(a, b))

	// Requests that take a while, so that one is in flight on a connection
	// at almost any moment.
	url := fmt.Sprintf("http://127.0.0.1:%d/?delay=2ms", port)
	var answered, failed atomic.Int64
	var firstFailure atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			c, _ := newClient(t)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := getOnce(c, url); err != nil {
					failed.Add(1)
					firstFailure.CompareAndSwap(nil, err.Error())
					continue
				}
				answered.Add(1)
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	eventually(t, "a serving", func() bool { return a.hits.Load() >= 20 })

	start := time.Now()
	if err := in.Drain(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 100*time.Millisecond {
		t.Fatal("Drain returned before the drain timeout: no keep-alive connection was open, the test proves nothing")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.srv.Config.Shutdown(ctx); err != nil { // the stop signal
		t.Fatal(err)
	}
	in.Gone("a")
	mustUpdate(t, in, table(b))
	served := b.hits.Load()
	eventually(t, "b serving every client", func() bool { return b.hits.Load() >= served+100 })
	close(stop)
	wg.Wait()
	stop = make(chan struct{}) // for the deferred close

	if failed.Load() != 0 {
		t.Fatalf("%d of %d requests failed; first: %v", failed.Load(), failed.Load()+answered.Load(), firstFailure.Load())
	}
	if hits := a.hits.Load() + b.hits.Load(); hits != answered.Load() {
		t.Fatalf("the backends served %d requests for %d answers: a request was cut after a backend read it, and replayed", hits, answered.Load())
	}
}

// getOnce GETs url and reads the whole answer, which must be a 200.
func getOnce(c *http.Client, url string) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET: %s", resp.Status)
	}
	return nil
}

func TestPublishedPortChangesKeepOpenConnections(t *testing.T) {
	in := startIngress(t, nil)
	port := freePort(t)
	a, b := newLineServer(t, "a"), newLineServer(t, "b")
	mustUpdate(t, in, tcpEgg(port, 0, a))
	_, held, heldR := whoAnswers(t, port)

	// The port moves to another egg: new connections go there, the open one stays.
	moved := tcpEgg(port, 0, b)
	moved.Eggs[0].Name = "db2"
	mustUpdate(t, in, moved)
	if name, _, _ := whoAnswers(t, port); name != "b" {
		t.Fatalf("after the move: answered by %q", name)
	}
	if reply, err := exchange(held, heldR, "x"); err != nil || reply != "a: x" {
		t.Fatalf("connection open across the move: %q, %v", reply, err)
	}

	// The port is unpublished: nothing new is accepted, the open one stays.
	mustUpdate(t, in, Table{})
	if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second); err == nil {
		c.Close()
		t.Fatal("an unpublished port still accepts connections")
	}
	if reply, err := exchange(held, heldR, "y"); err != nil || reply != "a: y" {
		t.Fatalf("connection open across the unpublish: %q, %v", reply, err)
	}
}

func TestPublishedPortAlreadyTakenIsReportedAndRetried(t *testing.T) {
	in := startIngress(t, nil)
	squatter, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, p, _ := net.SplitHostPort(squatter.Addr().String())
	port, _ := strconv.Atoi(p)
	a := newLineServer(t, "a")
	if err := in.Update(tcpEgg(port, 0, a)); err == nil || !strings.Contains(err.Error(), "publish port "+p) {
		t.Fatalf("Update = %v, want an error naming port %s", err, p)
	}
	squatter.Close()
	mustUpdate(t, in, tcpEgg(port, 0, a))
	if name, _, _ := whoAnswers(t, port); name != "a" {
		t.Fatalf("answered by %q", name)
	}
}

// TestNoFailedConnectionAcrossTCPRollsUnderLoad opens and closes connections
// continuously, each exchanging a line, while the egg is rolled in the
// adapter's order. Not one connection may fail.
func TestNoFailedConnectionAcrossTCPRollsUnderLoad(t *testing.T) {
	in := startIngress(t, func(c *Config) { c.DrainTimeout = 5 * time.Second })
	port := freePort(t)
	live := []*lineServer{newLineServer(t, "c0"), newLineServer(t, "c1"), newLineServer(t, "c2")}
	mustUpdate(t, in, tcpEgg(port, 0, live...))
	var conns, failures atomic.Int64
	var firstFailure atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5000 { // bounded; stop ends it sooner
				select {
				case <-stop:
					return
				default:
				}
				conns.Add(1)
				err := func() error {
					c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
					if err != nil {
						return err
					}
					defer c.Close()
					line := fmt.Sprintf("w%d-%d", w, i)
					reply, err := exchange(c, bufio.NewReader(c), line)
					if err != nil {
						return err
					}
					if !strings.HasSuffix(reply, ": "+line) {
						return fmt.Errorf("reply %q to %q", reply, line)
					}
					return nil
				}()
				if err != nil {
					failures.Add(1)
					firstFailure.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	for roll := range 4 {
		waitForLoad(t, &conns, 50)
		old := live[0]
		live = append(live, newLineServer(t, fmt.Sprintf("r%d", roll)))
		mustUpdate(t, in, tcpEgg(port, 0, live...))
		if err := in.Drain(context.Background(), old.name); err != nil {
			t.Fatal(err)
		}
		old.stop()
		in.Gone(old.name)
		live = live[1:]
		mustUpdate(t, in, tcpEgg(port, 0, live...))
	}
	waitForLoad(t, &conns, 50)
	close(stop)
	wg.Wait()
	t.Logf("%d connections, %d failed", conns.Load(), failures.Load())
	if failures.Load() != 0 {
		t.Fatalf("%d of %d connections failed; first: %v", failures.Load(), conns.Load(), firstFailure.Load())
	}
	if conns.Load() < 5*50 {
		t.Fatalf("only %d connections were made; the load proves nothing", conns.Load())
	}
}

// TestGonePassesOnWhatTheBackendSentBeforeIt: a backend answers a request
// with a reply larger than the client's receive buffer and closes its
// connection, and
// the container is reported gone before the client has read it. The client
// still gets every byte, then the end of the stream: most of the reply was
// waiting in the ingress, and cutting the connection would have lost it.
func TestGonePassesOnWhatTheBackendSentBeforeIt(t *testing.T) {
	in := startIngress(t, nil)
	port := freePort(t)
	reply := bytes.Repeat([]byte("0123456789abcdef"), 32<<10) // 512 KiB
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sent := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			sent <- err
			return
		}
		// The request: once it has come through, the ingress's pipe is up.
		if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
			sent <- err
			return
		}
		_, err = c.Write(reply)
		if cerr := c.Close(); err == nil {
			err = cerr
		}
		sent <- err
	}()
	mustUpdate(t, in, Table{Eggs: []Egg{{Name: "db", Ports: []Port{{Published: port}},
		Backends: []Backend{{ContainerID: "a", Addr: ln.Addr().String(), Healthy: true}}}}})

	// A client that reads nothing yet, with a small receive buffer: most of
	// the reply has to wait in the ingress.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) }); err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "send it all\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-sent:
		if err != nil {
			t.Fatalf("the backend could not send its reply: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the backend could not send its reply within 5s")
	}
	in.Gone("a")
	c.SetDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, reply) {
		t.Fatalf("the client read %d of the %d bytes the backend sent before it was gone (%v)", len(got), len(reply), err)
	}
}

func TestGoneClosesOpenConnections(t *testing.T) {
	in := startIngress(t, nil)
	port := freePort(t)
	a := newLineServer(t, "a")
	mustUpdate(t, in, tcpEgg(port, 0, a))
	_, c, r := whoAnswers(t, port)
	in.Gone("a")
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadByte(); err != io.EOF {
		t.Fatalf("read after Gone = %v, want EOF", err)
	}
}
