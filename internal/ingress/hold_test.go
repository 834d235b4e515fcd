package ingress

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// kvEgg is the stateful egg "p/s/kv" routed at kv.localhost with the given
// local backends and other hosts.
func kvEgg(remote []string, backends ...*testBackend) Egg {
	e := Egg{Name: "p/s/kv", Routes: []Route{{Host: "kv.localhost"}}, Stateful: true, Remote: remote}
	for _, b := range backends {
		e.Backends = append(e.Backends, Backend{ContainerID: b.name, Addr: b.addr(), Healthy: true})
	}
	return e
}

// held returns the number of requests the egg's hold window holds.
func held(in *Ingress, egg string) int64 {
	for _, s := range in.Status() {
		if s.Egg == egg {
			return s.Held
		}
	}
	return 0
}

type answer struct {
	code      int
	who, body string
	took      time.Duration
}

// sendAsync sends a request for host through in on a goroutine of its own
// and yields its answer; a transport error is a code of zero.
func sendAsync(c *http.Client, in *Ingress, method, host, path, body string) <-chan answer {
	out := make(chan answer, 1)
	go func() {
		start := time.Now()
		req, err := http.NewRequest(method, "http://"+in.HTTPAddr().String()+path, strings.NewReader(body))
		if err != nil {
			out <- answer{body: err.Error()}
			return
		}
		req.Host = host
		resp, err := c.Do(req)
		if err != nil {
			out <- answer{body: err.Error(), took: time.Since(start)}
			return
		}
		defer resp.Body.Close()
		var sb strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&sb)
		out <- answer{code: resp.StatusCode, who: resp.Header.Get("X-Backend"), body: sb.String(), took: time.Since(start)}
	}()
	return out
}

// noGoroutineAwaits fails the test if a goroutine still waits in a hold
// window.
func noGoroutineAwaits(t *testing.T) {
	t.Helper()
	eventually(t, "no goroutine left waiting in a hold window", func() bool {
		buf := make([]byte, 1<<20)
		return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "(*egg).await")
	})
}

// A stateful egg's roll: the old replica drained, no backend until the new
// one is healthy. Requests that come in the gap (with and without a body,
// on kept-alive connections) wait, and are answered by the new replica.
func TestStatefulEggHoldsRequestsUntilTheNewReplicaJoins(t *testing.T) {
	in := startIngress(t, nil)
	old, next := newTestBackend(t, "old"), newTestBackend(t, "new")
	mustUpdate(t, in, Table{Eggs: []Egg{kvEgg(nil, old)}})
	c, _ := newClient(t)
	if code, who, _ := get(t, c, in, "kv.localhost", "/"); code != 200 || who != "old" {
		t.Fatalf("before the roll: %d from %q", code, who)
	}
	if err := in.Drain(context.Background(), "old"); err != nil {
		t.Fatal(err)
	}
	const n = 6
	var answers []<-chan answer
	for i := range n {
		if i%2 == 0 {
			answers = append(answers, sendAsync(c, in, http.MethodGet, "kv.localhost", "/", ""))
		} else {
			answers = append(answers, sendAsync(c, in, http.MethodPost, "kv.localhost", "/", "incr"))
		}
	}
	eventually(t, fmt.Sprintf("%d requests held", n), func() bool { return held(in, "p/s/kv") == n })
	if v := counterValue(t, in, "hatch_ingress_held", "p/s/kv"); v != n {
		t.Errorf("hatch_ingress_held is %v, want %d", v, n)
	}
	// The old container stops and the new one starts unhealthy: still held.
	in.Gone("old")
	mustUpdate(t, in, Table{Eggs: []Egg{{Name: "p/s/kv", Routes: []Route{{Host: "kv.localhost"}}, Stateful: true,
		Backends: []Backend{{ContainerID: "new", Addr: next.addr(), Healthy: false}}}}})
	if h := held(in, "p/s/kv"); h != n {
		t.Fatalf("%d requests held once the new replica started unhealthy, want %d", h, n)
	}
	mustUpdate(t, in, Table{Eggs: []Egg{kvEgg(nil, next)}})
	for i, ch := range answers {
		a := <-ch
		if a.code != 200 || a.who != "new" {
			t.Errorf("held request %d: %d from %q (%s), want 200 from the new replica", i, a.code, a.who, a.body)
		}
	}
	if h := held(in, "p/s/kv"); h != 0 {
		t.Errorf("%d requests still held after the release", h)
	}
	if code, who, _ := get(t, c, in, "kv.localhost", "/"); code != 200 || who != "new" {
		t.Errorf("after the roll: %d from %q", code, who)
	}
	noGoroutineAwaits(t)
}

// A gap that lasts past the hold timeout fails what it held with a 503
// that says why, and holds nothing after; a client that leaves while held
// leaves nothing behind.
func TestHoldEndsWith503AfterTheHoldTimeout(t *testing.T) {
	const bound = 300 * time.Millisecond
	in := startIngress(t, func(c *Config) { c.HoldTimeout = bound })
	old := newTestBackend(t, "old")
	mustUpdate(t, in, Table{Eggs: []Egg{kvEgg(nil, old)}})
	c, _ := newClient(t)
	if code, _, _ := get(t, c, in, "kv.localhost", "/"); code != 200 {
		t.Fatalf("before the gap: %d", code)
	}
	in.Gone("old") // it died, and nothing comes back in time
	// One client gives up while held.
	ctx, cancel := context.WithCancel(context.Background())
	leaver := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+in.HTTPAddr().String()+"/", nil)
		req.Host = "kv.localhost"
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		leaver <- err
	}()
	first := sendAsync(c, in, http.MethodGet, "kv.localhost", "/", "")
	eventually(t, "two requests held", func() bool { return held(in, "p/s/kv") == 2 })
	cancel()
	if err := <-leaver; err == nil {
		t.Fatal("the request whose client left got an answer")
	}
	eventually(t, "the leaver no longer held", func() bool { return held(in, "p/s/kv") == 1 })

	a := <-first
	if a.code != http.StatusServiceUnavailable || !strings.Contains(a.body, "held") || !strings.Contains(a.body, "no replica came back") {
		t.Fatalf("held past the bound: %d %q, want 503 saying it was held and no replica came back", a.code, a.body)
	}
	if a.took < bound-50*time.Millisecond || a.took > bound+2*time.Second {
		t.Errorf("held for %s, want about %s", a.took, bound)
	}
	// The window is over: the next request is not held again.
	start := time.Now()
	if code, _, body := get(t, c, in, "kv.localhost", "/"); code != http.StatusServiceUnavailable || !strings.Contains(body, "no healthy backend") {
		t.Errorf("after the window: %d %q, want 503 no healthy backend", code, body)
	}
	if took := time.Since(start); took > bound/2 {
		t.Errorf("a request after the window took %s: held again", took)
	}
	if h := held(in, "p/s/kv"); h != 0 {
		t.Errorf("%d requests still held", h)
	}
	noGoroutineAwaits(t)
}

// Only stateful eggs hold: a stateless egg with no backend answers at once.
func TestStatelessEggIsNotHeld(t *testing.T) {
	in := startIngress(t, nil)
	a := newTestBackend(t, "a")
	mustUpdate(t, in, Table{Eggs: []Egg{webEgg(nil, a)}})
	c, _ := newClient(t)
	if err := in.Drain(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if code, _, _ := get(t, c, in, "shop.localhost", "/"); code != http.StatusServiceUnavailable {
		t.Fatalf("drained stateless egg: %d, want 503", code)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("a stateless egg's request waited %s", took)
	}
}

// A request that reaches the egg through another host's ingress is held on
// the stateful egg's host (its stream is accepted, its request waits), not
// failed on the way.
func TestStatefulEggHoldsRequestsFromPeers(t *testing.T) {
	m := newFakeMesh()
	a, b := m.host(t, "A"), m.host(t, "B")
	old, next := newTestBackend(t, "old"), newTestBackend(t, "new")
	mustUpdate(t, b, Table{Eggs: []Egg{kvEgg(nil, old)}})
	remoteOnly := Egg{Name: "p/s/kv", Routes: []Route{{Host: "kv.localhost"}}, Remote: []string{"B"}}
	mustUpdate(t, a, Table{Eggs: []Egg{remoteOnly}})
	c, _ := newClient(t)
	if code, who, _ := get(t, c, a, "kv.localhost", "/"); code != 200 || who != "old" {
		t.Fatalf("before the roll: %d from %q", code, who)
	}
	if err := b.Drain(context.Background(), "old"); err != nil {
		t.Fatal(err)
	}
	// One request on the stream kept alive, one on a new stream.
	kept := sendAsync(c, a, http.MethodGet, "kv.localhost", "/", "")
	c2, _ := newClient(t)
	fresh := sendAsync(c2, a, http.MethodPost, "kv.localhost", "/", "incr")
	eventually(t, "both held on B", func() bool { return held(b, "p/s/kv") == 2 })
	b.Gone("old")
	mustUpdate(t, b, Table{Eggs: []Egg{kvEgg(nil, next)}})
	for name, ch := range map[string]<-chan answer{"kept-alive stream": kept, "new stream": fresh} {
		if r := <-ch; r.code != 200 || r.who != "new" {
			t.Errorf("%s: %d from %q (%s), want 200 from the new replica", name, r.code, r.who, r.body)
		}
	}
	noGoroutineAwaits(t)
}

// A connection to a stateful egg's published port in the gap waits for the
// new replica instead of being closed.
func TestStatefulEggHoldsPublishedPortConnections(t *testing.T) {
	in := startIngress(t, nil)
	old, next := newLineServer(t, "old"), newLineServer(t, "new")
	port := freePort(t)
	egg := func(id string, s *lineServer) Egg {
		return Egg{Name: "p/s/db", Stateful: true, Ports: []Port{{Published: port}},
			Backends: []Backend{{ContainerID: id, Addr: s.addr(), Healthy: true}}}
	}
	mustUpdate(t, in, Table{Eggs: []Egg{egg("old", old)}})
	if err := in.Drain(context.Background(), "old"); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	eventually(t, "the connection held", func() bool { return held(in, "p/s/db") == 1 })
	in.Gone("old")
	old.stop()
	mustUpdate(t, in, Table{Eggs: []Egg{egg("new", next)}})
	reply, err := exchange(conn, bufio.NewReader(conn), "hello")
	if err != nil || reply != "new: hello" {
		t.Fatalf("held connection: %q, %v; want the new replica's answer", reply, err)
	}
	noGoroutineAwaits(t)
}

// Restarts of a stateful replica are held like a roll: a crash (Gone, then
// the same container back healthy) and a restart for failed checks (the
// table calls it unhealthy, the restart drains it, it is gone, then back).
func TestStatefulEggHoldsThroughRestarts(t *testing.T) {
	in := startIngress(t, nil)
	kv := newTestBackend(t, "kv")
	up := Table{Eggs: []Egg{kvEgg(nil, kv)}}
	down := Table{Eggs: []Egg{{Name: "p/s/kv", Routes: []Route{{Host: "kv.localhost"}}, Stateful: true,
		Backends: []Backend{{ContainerID: "kv", Addr: kv.addr(), Healthy: false}}}}}
	mustUpdate(t, in, up)
	c, _ := newClient(t)
	for _, tc := range []struct {
		name string
		gap  func()
	}{
		{"crashed", func() { in.Gone("kv") }},
		{"failing its checks", func() {
			mustUpdate(t, in, down)
			if err := in.Drain(context.Background(), "kv"); err != nil {
				t.Fatal(err)
			}
			in.Gone("kv")
		}},
	} {
		if code, _, _ := get(t, c, in, "kv.localhost", "/"); code != 200 {
			t.Fatalf("%s: before the restart: %d", tc.name, code)
		}
		tc.gap()
		ch := sendAsync(c, in, http.MethodPost, "kv.localhost", "/", "incr")
		eventually(t, tc.name+": the request held", func() bool { return held(in, "p/s/kv") == 1 })
		mustUpdate(t, in, up) // restarted: the same container, healthy again
		if a := <-ch; a.code != 200 || a.who != "kv" {
			t.Errorf("%s: held request: %d from %q (%s), want 200 from the restarted replica", tc.name, a.code, a.who, a.body)
		}
	}
	noGoroutineAwaits(t)
}

// A replica that never turns healthy after its window ended (a crash loop)
// opens no new window: its requests are answered at once, not held again
// and again.
func TestACrashLoopIsHeldOnce(t *testing.T) {
	const bound = 200 * time.Millisecond
	in := startIngress(t, func(c *Config) { c.HoldTimeout = bound })
	kv := newTestBackend(t, "kv")
	mustUpdate(t, in, Table{Eggs: []Egg{kvEgg(nil, kv)}})
	c, _ := newClient(t)
	in.Gone("kv")
	if code, _, body := get(t, c, in, "kv.localhost", "/"); code != http.StatusServiceUnavailable || !strings.Contains(body, "held") {
		t.Fatalf("held past the bound: %d %q, want 503 saying it was held", code, body)
	}
	// It comes back unhealthy and dies, again and again.
	for range 3 {
		mustUpdate(t, in, Table{Eggs: []Egg{{Name: "p/s/kv", Routes: []Route{{Host: "kv.localhost"}}, Stateful: true,
			Backends: []Backend{{ContainerID: "kv", Addr: kv.addr(), Healthy: false}}}}})
		in.Gone("kv")
		start := time.Now()
		if code, _, _ := get(t, c, in, "kv.localhost", "/"); code != http.StatusServiceUnavailable {
			t.Fatalf("crash loop: %d, want 503", code)
		}
		if took := time.Since(start); took >= bound {
			t.Fatalf("a request to a crash-looping replica waited %s: held again", took)
		}
	}
}

// Closing the ingress answers what it holds at once rather than waiting
// for the hold to end.
func TestCloseReleasesHeldRequests(t *testing.T) {
	in := startIngress(t, func(c *Config) { c.HoldTimeout = time.Minute })
	kv := newTestBackend(t, "kv")
	mustUpdate(t, in, Table{Eggs: []Egg{kvEgg(nil, kv)}})
	c, _ := newClient(t)
	in.Gone("kv")
	ch := sendAsync(c, in, http.MethodGet, "kv.localhost", "/", "")
	eventually(t, "the request held", func() bool { return held(in, "p/s/kv") == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := in.Close(ctx); err != nil {
		t.Fatalf("Close with a request held: %v", err)
	}
	if a := <-ch; a.code != http.StatusServiceUnavailable {
		t.Errorf("held request at Close: %d %q, want 503", a.code, a.body)
	}
	noGoroutineAwaits(t)
}
