package ingress

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRoutesByHostAndPathPrefix(t *testing.T) {
	in := startIngress(t, nil)
	shop, api, v1 := newTestBackend(t, "shop"), newTestBackend(t, "api"), newTestBackend(t, "api-v1")
	mustUpdate(t, in, Table{Eggs: []Egg{
		{Name: "shop", Routes: []Route{{Host: "shop.localhost"}}, Backends: []Backend{{ContainerID: "s1", Addr: shop.addr(), Healthy: true}}},
		{Name: "api", Routes: []Route{{Host: "api.localhost"}}, Backends: []Backend{{ContainerID: "a1", Addr: api.addr(), Healthy: true}}},
		{Name: "api-v1", Routes: []Route{{Host: "API.localhost", PathPrefix: "/v1/"}}, Backends: []Backend{{ContainerID: "v1", Addr: v1.addr(), Healthy: true}}},
	}})
	c, _ := newClient(t)
	for _, tc := range []struct {
		name, host, path string
		wantCode         int
		wantBackend      string
	}{
		{"host alone", "shop.localhost", "/", 200, "shop"},
		{"host with port and capitals", "Shop.Localhost:8080", "/cart", 200, "shop"},
		{"prefix itself", "api.localhost", "/v1", 200, "api-v1"},
		{"under the prefix", "api.localhost", "/v1/users", 200, "api-v1"},
		{"prefix is matched by whole segments", "api.localhost", "/v10", 200, "api"},
		{"other paths fall back to the bare host", "api.localhost", "/v2/users", 200, "api"},
		{"unknown host", "nope.localhost", "/", 404, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, from, body := get(t, c, in, tc.host, tc.path)
			if code != tc.wantCode || from != tc.wantBackend {
				t.Fatalf("got %d from %q (%q), want %d from %q", code, from, body, tc.wantCode, tc.wantBackend)
			}
			if code == 404 && !strings.Contains(body, "nope.localhost") {
				t.Errorf("404 body %q does not name the host", body)
			}
		})
	}
}

func TestNoHealthyBackendAnswers503NamingTheEgg(t *testing.T) {
	in := startIngress(t, nil)
	sick := newTestBackend(t, "sick")
	mustUpdate(t, in, Table{Eggs: []Egg{
		{Name: "shop/web", Routes: []Route{{Host: "web.localhost"}}, Backends: []Backend{{ContainerID: "w1", Addr: sick.addr(), Healthy: false}}},
		{Name: "shop/empty", Routes: []Route{{Host: "empty.localhost"}}},
	}})
	c, _ := newClient(t)
	for host, egg := range map[string]string{"web.localhost": "shop/web", "empty.localhost": "shop/empty"} {
		code, _, body := get(t, c, in, host, "/")
		if code != http.StatusServiceUnavailable || !strings.Contains(body, `"`+egg+`"`) {
			t.Errorf("%s: got %d %q, want 503 naming %q", host, code, body, egg)
		}
	}
	if sick.hits.Load() != 0 {
		t.Errorf("the unhealthy backend got %d requests", sick.hits.Load())
	}
}

func TestReplicaJoinsOnlyOnceHealthy(t *testing.T) {
	in := startIngress(t, nil)
	a, b := newTestBackend(t, "a"), newTestBackend(t, "b")
	tab := func(bHealthy bool) Table {
		return Table{Eggs: []Egg{{Name: "web", Routes: []Route{{Host: "web.localhost"}}, Backends: []Backend{
			{ContainerID: "a", Addr: a.addr(), Healthy: true},
			{ContainerID: "b", Addr: b.addr(), Healthy: bHealthy},
		}}}}
	}
	mustUpdate(t, in, tab(false))
	c, _ := newClient(t)
	for range 10 {
		if code, from, _ := get(t, c, in, "web.localhost", "/"); code != 200 || from != "a" {
			t.Fatalf("got %d from %q while b is starting, want 200 from a", code, from)
		}
	}
	mustUpdate(t, in, tab(true))
	for range 10 {
		get(t, c, in, "web.localhost", "/")
	}
	if b.hits.Load() == 0 {
		t.Fatal("b got no request after it became healthy")
	}
}

func TestPicksTheBackendWithFewestInFlight(t *testing.T) {
	in := startIngress(t, nil)
	a, b := newTestBackend(t, "a"), newTestBackend(t, "b")
	mustUpdate(t, in, Table{Eggs: []Egg{{Name: "web", Routes: []Route{{Host: "web.localhost"}}, Backends: []Backend{
		{ContainerID: "a", Addr: a.addr(), Healthy: true},
		{ContainerID: "b", Addr: b.addr(), Healthy: true},
	}}}})
	c, _ := newClient(t)

	// Idle backends share the work: ties rotate.
	for range 10 {
		get(t, c, in, "web.localhost", "/")
	}
	if a.hits.Load() == 0 || b.hits.Load() == 0 {
		t.Fatalf("idle backends got %d and %d of 10 requests, want both some", a.hits.Load(), b.hits.Load())
	}

	// A backend busy with a slow request gets nothing new while the other is idle.
	done := make(chan struct{})
	go func() {
		defer close(done)
		get(t, c, in, "web.localhost", "/block")
	}()
	var busy, idle *testBackend
	select {
	case <-a.entered:
		busy, idle = a, b
	case <-b.entered:
		busy, idle = b, a
	case <-time.After(5 * time.Second):
		t.Fatal("the slow request reached no backend")
	}
	before := busy.hits.Load()
	for range 10 {
		if _, from, _ := get(t, c, in, "web.localhost", "/"); from != idle.name {
			t.Fatalf("request went to %q, which has one in flight, not to idle %q", from, idle.name)
		}
	}
	if busy.hits.Load() != before {
		t.Fatal("the busy backend got requests")
	}
	busy.unblock()
	<-done
}

func TestSetsForwardedHeadersAndKeepsHost(t *testing.T) {
	in := startIngress(t, nil)
	be := newTestBackend(t, "a")
	mustUpdate(t, in, Table{Eggs: []Egg{{Name: "web", Routes: []Route{{Host: "web.localhost"}},
		Backends: []Backend{{ContainerID: "a", Addr: be.addr(), Healthy: true}}}}})
	c, _ := newClient(t)
	req, _ := http.NewRequest(http.MethodGet, "http://"+in.HTTPAddr().String()+"/headers", nil)
	req.Host = "web.localhost:8080"
	req.Header.Set("X-Forwarded-For", "6.6.6.6") // a client's claim is not passed on
	req.Header.Set("X-Forwarded-Host", "evil.example")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	want := "X-Forwarded-For=127.0.0.1\nX-Forwarded-Proto=http\nX-Forwarded-Host=web.localhost:8080\nHost=web.localhost:8080\n"
	if string(body) != want {
		t.Fatalf("backend saw\n%s\nwant\n%s", body, want)
	}
}

func TestStreamsServerSentEventsAsTheyCome(t *testing.T) {
	in := startIngress(t, nil)
	be := newTestBackend(t, "a")
	mustUpdate(t, in, Table{Eggs: []Egg{{Name: "web", Routes: []Route{{Host: "web.localhost"}},
		Backends: []Backend{{ContainerID: "a", Addr: be.addr(), Healthy: true}}}}})
	c, _ := newClient(t)
	req, _ := http.NewRequest(http.MethodGet, "http://"+in.HTTPAddr().String()+"/sse", nil)
	req.Host = "web.localhost"
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	// The backend holds the second event until the first has arrived, so a
	// buffering proxy would hang here until the client's timeout.
	if line, err := r.ReadString('\n'); err != nil || line != "data: first\n" {
		t.Fatalf("first event: %q, %v", line, err)
	}
	close(be.sseNext)
	rest, err := io.ReadAll(r)
	if err != nil || string(rest) != "\ndata: second\n\n" {
		t.Fatalf("rest of the stream: %q, %v", rest, err)
	}
}

func TestWebSocketUpgradePassesThrough(t *testing.T) {
	in := startIngress(t, nil)
	be := newTestBackend(t, "a")
	mustUpdate(t, in, Table{Eggs: []Egg{{Name: "web", Routes: []Route{{Host: "web.localhost"}},
		Backends: []Backend{{ContainerID: "a", Addr: be.addr(), Healthy: true}}}}})
	c, _ := newClient(t)
	c.Timeout = 0 // a timeout wraps the body, which then is not writable
	req, _ := http.NewRequest(http.MethodGet, "http://"+in.HTTPAddr().String()+"/ws", nil)
	req.Host = "web.localhost"
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d, want 101", resp.StatusCode)
	}
	conn := resp.Body.(io.ReadWriteCloser)
	defer conn.Close()
	r := bufio.NewReader(conn)
	for _, msg := range []string{"hello\n", "again\n"} {
		if _, err := io.WriteString(conn, msg); err != nil {
			t.Fatal(err)
		}
		if got, err := r.ReadString('\n'); err != nil || got != msg {
			t.Fatalf("echo: %q, %v; want %q", got, err, msg)
		}
	}
	if st := in.Status(); st[0].InFlight != 1 {
		t.Errorf("an open WebSocket counts %d in flight, want 1", st[0].InFlight)
	}
}

func TestFailedDialEjectsBackendAndRetriesElsewhere(t *testing.T) {
	in := startIngress(t, nil)
	good := newTestBackend(t, "good")
	mustUpdate(t, in, Table{Eggs: []Egg{{Name: "web", Routes: []Route{{Host: "web.localhost"}}, Backends: []Backend{
		{ContainerID: "dead", Addr: deadAddr(t), Healthy: true}, // still reported healthy: Docker has not said yet
		{ContainerID: "good", Addr: good.addr(), Healthy: true},
	}}}})
	c, _ := newClient(t)
	for i := range 20 {
		method, body := http.MethodGet, io.Reader(nil)
		if i%2 == 1 { // nothing was sent to the dead backend, so even a POST with a body is safe to resend
			method, body = http.MethodPost, strings.NewReader("payload")
		}
		if code, from, got := do(t, c, in, method, "web.localhost", "/", body); code != 200 || from != "good" {
			t.Fatalf("request %d (%s): %d from %q: %q", i, method, code, from, got)
		}
	}
	if got := counterValue(t, in, "hatch_ingress_backend_dial_failures_total", "web"); got != 1 {
		t.Errorf("dial failures = %v, want 1: the first failure must take the backend out", got)
	}
	if st := in.Status(); st[0].Ejected != 1 || st[0].Ready != 1 {
		t.Errorf("status %+v, want one ejected and one ready", st[0])
	}
}

// A backend ejected by a failed dial takes requests again once EjectFor has
// passed, without any Update. A second, healthy backend is there so that the
// last resort (which tries an ejected backend when nothing else is left)
// cannot be what brings it back: only the ejection's end can.
func TestEjectedBackendComesBackAfterEjectFor(t *testing.T) {
	in := startIngress(t, func(c *Config) { c.EjectFor = 100 * time.Millisecond })
	good := newTestBackend(t, "good")
	addr := deadAddr(t)
	mustUpdate(t, in, Table{Eggs: []Egg{{Name: "web", Routes: []Route{{Host: "web.localhost"}}, Backends: []Backend{
		{ContainerID: "slow-starter", Addr: addr, Healthy: true},
		{ContainerID: "good", Addr: good.addr(), Healthy: true},
	}}}})
	c, _ := newClient(t)
	// Ties rotate, so within two requests one dials the slow starter, fails,
	// ejects it and is retried on good.
	for i := range 2 {
		if code, from, _ := get(t, c, in, "web.localhost", "/"); code != 200 || from != "good" {
			t.Fatalf("request %d: got %d from %q, want 200 from good", i, code, from)
		}
	}
	if st := in.Status(); st[0].Ejected != 1 || st[0].Ready != 1 {
		t.Fatalf("status %+v, want the slow starter ejected and good ready", st[0])
	}
	// The container starts listening and the agent still reports it healthy:
	// once EjectFor has passed it serves again without any Update.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "up") }))
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	time.Sleep(150 * time.Millisecond) // the ejection's own clock: EjectFor must pass
	if st := in.Status(); st[0].Ejected != 0 || st[0].Ready != 2 {
		t.Fatalf("status %+v after EjectFor, want both backends ready", st[0])
	}
	// Equally loaded, the two take turns: the one that came back serves
	// one of the next two requests.
	var bodies []string
	for range 2 {
		code, _, body := get(t, c, in, "web.localhost", "/")
		if code != 200 {
			t.Fatalf("after EjectFor: got %d %q, want 200", code, body)
		}
		bodies = append(bodies, body)
	}
	if !slices.Contains(bodies, "up") {
		t.Errorf("after EjectFor the bodies were %q; want one from the backend that came back", bodies)
	}
}

// An egg's only backend, ejected by one failed dial, is still tried while
// there is nothing else: a replica slow to accept once (a loaded machine)
// must not turn into EjectFor of failed requests. Other backends, even
// remote ones, go first while it is ejected.
func TestALoneEjectedBackendIsTriedRatherThanRefused(t *testing.T) {
	in := startIngress(t, func(c *Config) { c.EjectFor = time.Minute })
	addr := deadAddr(t)
	mustUpdate(t, in, Table{Eggs: []Egg{{Name: "web", Routes: []Route{{Host: "web.localhost"}},
		Backends: []Backend{{ContainerID: "slow", Addr: addr, Healthy: true}}}}})
	c, _ := newClient(t)
	if code, _, _ := get(t, c, in, "web.localhost", "/"); code != http.StatusBadGateway {
		t.Fatalf("a lone backend that cannot be dialled: got %d, want 502", code)
	}
	if st := in.Status(); st[0].Ejected != 1 {
		t.Fatalf("status %+v, want the backend ejected", st[0])
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "up") }))
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	for i := range 3 {
		if code, _, body := get(t, c, in, "web.localhost", "/"); code != 200 || body != "up" {
			t.Fatalf("request %d, the backend ejected but the only one: got %d %q, want 200 up", i, code, body)
		}
	}
}

func TestRetriesOnlyWhatIsSafeToSendAgain(t *testing.T) {
	in := startIngress(t, nil)
	bad, good := newTestBackend(t, "bad"), newTestBackend(t, "good")
	bad.resetAll.Store(true) // reads each request, then resets the connection
	mustUpdate(t, in, Table{Eggs: []Egg{{Name: "web", Routes: []Route{{Host: "web.localhost"}}, Backends: []Backend{
		{ContainerID: "bad", Addr: bad.addr(), Healthy: true},
		{ContainerID: "good", Addr: good.addr(), Healthy: true},
	}}}})
	c, _ := newClient(t)
	for _, tc := range []struct {
		name    string
		method  string
		body    string
		retried bool
	}{
		{"GET is retried", http.MethodGet, "", true},
		{"bodiless POST is retried", http.MethodPost, "", true},
		{"POST whose body was sent is not", http.MethodPost, "charge the card", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hitsBefore := bad.hits.Load()
			failed := 0
			for range 10 {
				code, from, body := do(t, c, in, tc.method, "web.localhost", "/", strings.NewReader(tc.body))
				switch {
				case code == 200 && from == "good":
				case code == http.StatusBadGateway && !tc.retried:
					failed++
				default:
					t.Fatalf("got %d from %q: %q", code, from, body)
				}
			}
			badHits := int(bad.hits.Load() - hitsBefore)
			if badHits == 0 {
				t.Fatal("no request tried the bad backend first; the test proves nothing")
			}
			if !tc.retried && failed != badHits {
				t.Errorf("%d requests failed, want the %d that the bad backend took", failed, badHits)
			}
		})
	}
}

func TestRouteChangeKeepsOpenConnections(t *testing.T) {
	in := startIngress(t, nil)
	old, repl := newTestBackend(t, "old"), newTestBackend(t, "new")
	mustUpdate(t, in, Table{Eggs: []Egg{{Name: "web", Routes: []Route{{Host: "web.localhost"}},
		Backends: []Backend{{ContainerID: "old", Addr: old.addr(), Healthy: true}}}}})
	c, dials := newClient(t)
	if code, _, _ := get(t, c, in, "web.localhost", "/"); code != 200 {
		t.Fatal("warm-up request failed")
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var slowCode int
	var slowFrom string
	go func() {
		defer wg.Done()
		slowCode, slowFrom, _ = get(t, c, in, "web.localhost", "/block")
	}()
	<-old.entered
	// The route moves to another egg while a request is in flight on the old one.
	mustUpdate(t, in, Table{Eggs: []Egg{{Name: "web2", Routes: []Route{{Host: "web.localhost"}},
		Backends: []Backend{{ContainerID: "new", Addr: repl.addr(), Healthy: true}}}}})
	if code, from, _ := get(t, c, in, "web.localhost", "/"); code != 200 || from != "new" {
		t.Fatalf("after the change: %d from %q, want 200 from new", code, from)
	}
	old.unblock()
	wg.Wait()
	if slowCode != 200 || slowFrom != "old" {
		t.Fatalf("the request in flight during the change got %d from %q", slowCode, slowFrom)
	}
	// Two client connections at most (one held by the slow request): none
	// was dropped and redialled.
	if n := dials.Load(); n > 2 {
		t.Errorf("client dialled %d times, want at most 2", n)
	}
}

// An agent listens before its first converge gives the ingress a table: a
// request then must not get a 404 (the host serves the route a moment later;
// 3 to 10 such 404s followed every agent start), but a 503 with Retry-After.
// Once a table, even an empty one, is in, what is not served is a 404.
func TestBeforeItsFirstTableTheIngressAsksToRetry(t *testing.T) {
	in := startIngress(t, nil)
	c, _ := newClient(t)
	resp, err := c.Get("http://" + in.HTTPAddr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("before any table: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	mustUpdate(t, in, Table{})
	if code, _, _ := get(t, c, in, "nope.localhost", "/"); code != http.StatusNotFound {
		t.Fatalf("after an empty table: %d, want 404", code)
	}
}
