package ingress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// twoBackends routes web.localhost to a and b.
func twoBackends(t *testing.T, in *Ingress, drain time.Duration) (a, b *testBackend) {
	t.Helper()
	a, b = newTestBackend(t, "a"), newTestBackend(t, "b")
	mustUpdate(t, in, Table{Eggs: []Egg{{Name: "web", Routes: []Route{{Host: "web.localhost"}}, DrainTimeout: drain, Backends: []Backend{
		{ContainerID: "a", Addr: a.addr(), Healthy: true},
		{ContainerID: "b", Addr: b.addr(), Healthy: true},
	}}}})
	return a, b
}

// blockOn sends /block requests until one is held by want (each one that
// lands on other stays there, which makes want the least loaded), and returns
// a channel that yields its status once it completes.
func blockOn(t *testing.T, c *http.Client, in *Ingress, want, other *testBackend) <-chan int {
	t.Helper()
	for range 3 {
		done := make(chan int, 1)
		go func() {
			code, _, _ := get(t, c, in, "web.localhost", "/block")
			done <- code
		}()
		select {
		case <-want.entered:
			return done
		case <-other.entered:
		case <-time.After(5 * time.Second):
			t.Fatal("blocking request reached no backend")
		}
	}
	t.Fatalf("no blocking request reached %s", want.name)
	return nil
}

func TestDrainWaitsForInFlightRequests(t *testing.T) {
	in := startIngress(t, nil)
	a, b := twoBackends(t, in, time.Minute)
	c, _ := newClient(t)
	slow := blockOn(t, c, in, a, b)

	drained := make(chan error, 1)
	go func() { drained <- in.Drain(context.Background(), "a") }()
	// Out of the pool at once: every new request goes to b.
	aBefore := a.hits.Load()
	for range 10 {
		if code, from, _ := get(t, c, in, "web.localhost", "/"); code != 200 || from != "b" {
			t.Fatalf("during the drain: %d from %q, want 200 from b", code, from)
		}
	}
	if a.hits.Load() != aBefore {
		t.Fatal("the draining backend got new requests")
	}
	select {
	case err := <-drained:
		t.Fatalf("Drain returned (%v) with a request still in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	a.unblock()
	if code := <-slow; code != 200 {
		t.Fatalf("the request in flight during the drain got %d", code)
	}
	select {
	case err := <-drained:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Drain did not return after the last request finished")
	}
	b.unblock()
}

func TestDrainStopsWaitingAtTheDrainTimeout(t *testing.T) {
	in := startIngress(t, nil)
	a, b := twoBackends(t, in, 150*time.Millisecond)
	c, _ := newClient(t)
	slow := blockOn(t, c, in, a, b)
	start := time.Now()
	if err := in.Drain(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 150*time.Millisecond || took > 2*time.Second {
		t.Fatalf("Drain took %s with a stuck request, want the 150ms drain timeout", took)
	}
	a.unblock()
	<-slow
}

func TestDrainReturnsTheContextError(t *testing.T) {
	in := startIngress(t, nil)
	a, b := twoBackends(t, in, time.Minute)
	c, _ := newClient(t)
	slow := blockOn(t, c, in, a, b)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := in.Drain(ctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Drain = %v, want the context's deadline", err)
	}
	a.unblock()
	<-slow
}

func TestDrainClosesKeepAliveConnectionsAfterTheirRequest(t *testing.T) {
	in := startIngress(t, nil)
	a := newTestBackend(t, "a")
	mustUpdate(t, in, Table{Eggs: []Egg{{Name: "web", Routes: []Route{{Host: "web.localhost"}},
		Backends: []Backend{{ContainerID: "a", Addr: a.addr(), Healthy: true}}}}})
	c, _ := newClient(t)
	slow := make(chan int, 1)
	go func() {
		code, _, _ := get(t, c, in, "web.localhost", "/block")
		slow <- code
	}()
	<-a.entered
	// A second request needs a second connection, which then stays idle.
	if code, _, _ := get(t, c, in, "web.localhost", "/"); code != 200 {
		t.Fatal("second request failed")
	}
	if n := a.openConns(); n != 2 {
		t.Fatalf("a has %d connections from the ingress, want a busy one and an idle one", n)
	}
	drained := make(chan error, 1)
	go func() { drained <- in.Drain(context.Background(), "a") }()
	// The idle connection goes at once; the busy one stays for its request.
	eventually(t, "a's idle connection closed", func() bool { return a.openConns() == 1 })
	a.unblock()
	if code := <-slow; code != 200 {
		t.Fatalf("request in flight: %d", code)
	}
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	eventually(t, "a's last connection closed after its request", func() bool { return a.openConns() == 0 })
}

func TestDrainedContainerStaysOutUntilGone(t *testing.T) {
	in := startIngress(t, nil)
	a, b := newTestBackend(t, "a"), newTestBackend(t, "b")
	tab := Table{Eggs: []Egg{{Name: "web", Routes: []Route{{Host: "web.localhost"}}, Backends: []Backend{
		{ContainerID: "a", Addr: a.addr(), Healthy: true},
		{ContainerID: "b", Addr: b.addr(), Healthy: true},
	}}}}
	// The adapter may drain a container the ingress has not been told of yet.
	if err := in.Drain(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	// A table computed before the stop still lists it as healthy.
	mustUpdate(t, in, tab)
	c, _ := newClient(t)
	for range 10 {
		if _, from, _ := get(t, c, in, "web.localhost", "/"); from != "b" {
			t.Fatalf("a drained container served a request")
		}
	}
	// Docker reports it died; it is restarted and reported healthy again.
	in.Gone("a")
	mustUpdate(t, in, tab)
	for range 10 {
		get(t, c, in, "web.localhost", "/")
	}
	if a.hits.Load() == 0 {
		t.Fatal("the container did not rejoin after Gone and a healthy report")
	}
}

func TestGoneLeavesThePoolAndEndsADrain(t *testing.T) {
	in := startIngress(t, nil)
	a, b := twoBackends(t, in, time.Minute)
	c, _ := newClient(t)
	slow := blockOn(t, c, in, a, b)
	drained := make(chan error, 1)
	go func() { drained <- in.Drain(context.Background(), "a") }()
	eventually(t, "a draining", func() bool { return in.Status()[0].Draining == 1 })
	in.Gone("a")
	select {
	case err := <-drained:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Drain kept waiting for a container that is gone")
	}
	if st := in.Status()[0]; st.Ready != 1 || st.Draining != 0 {
		t.Fatalf("after Gone: %+v, want only b, ready", st)
	}
	a.unblock()
	<-slow
}

// TestNoFailedRequestAcrossRollsUnderLoad rolls an egg of three backends four
// times under steady load from 8 clients (GETs and POSTs with bodies) in the
// order the adapter uses: start the new one, report it healthy, drain the old
// one, stop it, report it gone. Not one request may fail.
func TestNoFailedRequestAcrossRollsUnderLoad(t *testing.T) {
	in := startIngress(t, func(c *Config) { c.DrainTimeout = 5 * time.Second })
	type replica struct {
		id string
		be *testBackend
	}
	var live []replica
	for i := range 3 {
		live = append(live, replica{fmt.Sprintf("c%d", i), newTestBackend(t, fmt.Sprintf("c%d", i))})
	}
	table := func() Table {
		e := Egg{Name: "web", Routes: []Route{{Host: "web.localhost"}}}
		for _, r := range live {
			e.Backends = append(e.Backends, Backend{ContainerID: r.id, Addr: r.be.addr(), Healthy: true})
		}
		return Table{Eggs: []Egg{e}}
	}
	mustUpdate(t, in, table())

	var requests, failures atomic.Int64
	var firstFailure atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, _ := newClient(t)
			url := "http://" + in.HTTPAddr().String() + "/?delay=3ms"
			for i := 0; i < 20000; i++ { // bounded; stop ends it sooner
				select {
				case <-stop:
					return
				default:
				}
				var req *http.Request
				if (w+i)%2 == 0 {
					req, _ = http.NewRequest(http.MethodGet, url, nil)
				} else {
					req, _ = http.NewRequest(http.MethodPost, url, strings.NewReader("order 42"))
				}
				req.Host = "web.localhost"
				requests.Add(1)
				resp, err := c.Do(req)
				if err == nil {
					body, rerr := io.ReadAll(resp.Body)
					resp.Body.Close()
					if rerr == nil && resp.StatusCode == 200 && (req.Method == http.MethodGet || strings.HasSuffix(string(body), "read 8")) {
						continue
					}
					err = fmt.Errorf("%s: %d %q %v", req.Method, resp.StatusCode, body, rerr)
				}
				failures.Add(1)
				firstFailure.CompareAndSwap(nil, err.Error())
			}
		}()
	}

	for roll := range 4 {
		waitForLoad(t, &requests, 50)
		old := live[0]
		id := fmt.Sprintf("r%d", roll)
		live = append(live, replica{id, newTestBackend(t, id)})
		mustUpdate(t, in, table()) // the new one, healthy, joins first
		if err := in.Drain(context.Background(), old.id); err != nil {
			t.Fatal(err)
		}
		// The container stops: anything still open to it is cut.
		old.be.srv.Listener.Close()
		old.be.srv.CloseClientConnections()
		in.Gone(old.id)
		live = live[1:]
		mustUpdate(t, in, table())
	}
	waitForLoad(t, &requests, 50)
	close(stop)
	wg.Wait()
	t.Logf("%d requests, %d failed", requests.Load(), failures.Load())
	if failures.Load() != 0 {
		t.Fatalf("%d of %d requests failed; first: %v", failures.Load(), requests.Load(), firstFailure.Load())
	}
	if requests.Load() < 5*50 {
		t.Fatalf("only %d requests were sent; the load proves nothing", requests.Load())
	}
}

// TestNoFailedIdempotentRequestWhenABackendIsKilled kills a backend without
// a drain (docker kill): the GETs it was serving, or that were about to
// reach it, go to the others.
func TestNoFailedIdempotentRequestWhenABackendIsKilled(t *testing.T) {
	in := startIngress(t, nil)
	var bes []*testBackend
	e := Egg{Name: "web", Routes: []Route{{Host: "web.localhost"}}}
	for i := range 3 {
		be := newTestBackend(t, fmt.Sprintf("c%d", i))
		bes = append(bes, be)
		e.Backends = append(e.Backends, Backend{ContainerID: be.name, Addr: be.addr(), Healthy: true})
	}
	mustUpdate(t, in, Table{Eggs: []Egg{e}})
	var requests, failures atomic.Int64
	var firstFailure atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, _ := newClient(t)
			url := "http://" + in.HTTPAddr().String() + "/"
			for range 20000 {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				req.Host = "web.localhost"
				requests.Add(1)
				resp, err := c.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != 200 {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					failures.Add(1)
					firstFailure.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	waitForLoad(t, &requests, 100)
	victim := bes[1]
	victim.srv.Listener.Close()         // nothing accepts any more
	victim.srv.CloseClientConnections() // open connections reset
	time.Sleep(50 * time.Millisecond)   // Docker's die event takes a moment
	in.Gone(victim.name)
	waitForLoad(t, &requests, 100)
	close(stop)
	wg.Wait()
	dialFailures := counterValue(t, in, "hatch_ingress_backend_dial_failures_total", "web")
	t.Logf("%d GETs, %d failed, %v retried, %v failed dials", requests.Load(), failures.Load(),
		counterValue(t, in, "hatch_ingress_http_retries_total", "web"), dialFailures)
	if dialFailures == 0 {
		t.Fatal("no request tried the killed backend before Gone; the test proves nothing")
	}
	if failures.Load() != 0 {
		t.Fatalf("%d of %d GETs failed; first: %v", failures.Load(), requests.Load(), firstFailure.Load())
	}
}

// TestDrainTimeoutLeavesUpgradedConnectionsUntilGone: an upgraded
// connection (a WebSocket) still open at the drain timeout keeps working,
// so the application can close it as it stops; Gone cuts it.
func TestDrainTimeoutLeavesUpgradedConnectionsUntilGone(t *testing.T) {
	in := startIngress(t, nil)
	be := newTestBackend(t, "a")
	mustUpdate(t, in, Table{Eggs: []Egg{{Name: "web", Routes: []Route{{Host: "web.localhost"}}, DrainTimeout: 100 * time.Millisecond,
		Backends: []Backend{{ContainerID: "a", Addr: be.addr(), Healthy: true}}}}})
	c, _ := newClient(t)
	c.Timeout = 0 // a timeout wraps the body, which then is not writable
	req, _ := http.NewRequest(http.MethodGet, "http://"+in.HTTPAddr().String()+"/ws", nil)
	req.Host = "web.localhost"
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	conn := resp.Body.(io.ReadWriteCloser)
	defer conn.Close()
	if err := in.Drain(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("x")); err != nil {
		t.Fatalf("write after the drain timeout: %v; want the connection left to the container's stop", err)
	}
	echoed := make([]byte, 1)
	if _, err := io.ReadFull(conn, echoed); err != nil || echoed[0] != 'x' {
		t.Fatalf("echo after the drain timeout: %q, %v", echoed, err)
	}
	in.Gone("a")
	done := make(chan error, 1)
	go func() {
		_, err := conn.Read(make([]byte, 1))
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("read a byte from a connection that should be cut")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the upgraded connection outlived Gone")
	}
	if st := in.Status()[0]; st.InFlight != 0 {
		t.Fatalf("%d still in flight after the cut", st.InFlight)
	}
}
