package ingress

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A frozen replica (paused, or SIGSTOPped while Docker says running) holds
// no request past its route's upstream timeout: the first request that
// times out ejects it, a request without a body goes to another replica,
// and the requests after it never reach the frozen one.
func TestAFrozenBackendIsEjectedAtItsFirstUpstreamTimeout(t *testing.T) {
	in := startIngress(t, nil)
	frozen, ok := newTestBackend(t, "frozen"), newTestBackend(t, "ok")
	frozen.frozen.Store(true)
	const timeout = 300 * time.Millisecond
	mustUpdate(t, in, Table{Eggs: []Egg{{Name: "shop/web", Routes: []Route{{Host: "web.localhost", UpstreamTimeout: timeout}},
		Backends: []Backend{{ContainerID: "frozen", Addr: frozen.addr(), Healthy: true}, {ContainerID: "ok", Addr: ok.addr(), Healthy: true}}}}})
	c, _ := newClient(t)

	for i := range 10 {
		began := time.Now()
		code, by, _ := get(t, c, in, "web.localhost", "/")
		if took := time.Since(began); code != http.StatusOK || by != "ok" || took > timeout+time.Second {
			t.Fatalf("GET %d: %d from %q after %s, want 200 from ok within the timeout", i, code, by, took)
		}
	}
	if n := frozen.hits.Load(); n > 1 {
		t.Errorf("the frozen backend got %d requests: it was not ejected at the first timeout", n)
	}
	if got := counterValue(t, in, "hatch_ingress_http_retries_total", "shop/web"); frozen.hits.Load() == 1 && got < 1 {
		t.Errorf("retries %v: the timed-out GET was not sent elsewhere", got)
	}
}

// A request with a body cannot be replayed: past the timeout it gets 504
// (not a wait as long as the container stays frozen), and its backend is out.
func TestARequestWithABodyPastTheUpstreamTimeoutGets504(t *testing.T) {
	in := startIngress(t, nil)
	frozen := newTestBackend(t, "frozen")
	frozen.frozen.Store(true)
	const timeout = 200 * time.Millisecond
	mustUpdate(t, in, Table{Eggs: []Egg{{Name: "shop/api", Routes: []Route{{Host: "api.localhost", UpstreamTimeout: timeout}},
		Backends: []Backend{{ContainerID: "frozen", Addr: frozen.addr(), Healthy: true}}}}})
	c, _ := newClient(t)
	began := time.Now()
	code, _, body := do(t, c, in, http.MethodPost, "api.localhost", "/", strings.NewReader("payload"))
	if took := time.Since(began); code != http.StatusGatewayTimeout || took > timeout+time.Second {
		t.Fatalf("POST to a frozen backend: %d %q after %s, want 504 within the timeout", code, body, took)
	}
	if !strings.Contains(body, "upstream timeout") {
		t.Errorf("body %q does not say why", body)
	}
	code, _, _ = get(t, c, in, "api.localhost", "/")
	if code != http.StatusServiceUnavailable {
		t.Errorf("GET after the timeout: %d, want 503 (the only backend is ejected)", code)
	}
}

// The timeout bounds the wait for response headers only: an event stream
// that goes on longer is not cut.
func TestTheUpstreamTimeoutDoesNotCutAStreamAfterItsHeaders(t *testing.T) {
	in := startIngress(t, nil)
	be := newTestBackend(t, "a")
	const timeout = 100 * time.Millisecond
	mustUpdate(t, in, Table{Eggs: []Egg{{Name: "shop/events", Routes: []Route{{Host: "events.localhost", UpstreamTimeout: timeout}},
		Backends: []Backend{{ContainerID: "a", Addr: be.addr(), Healthy: true}}}}})
	c, _ := newClient(t)
	req, _ := http.NewRequest(http.MethodGet, "http://"+in.HTTPAddr().String()+"/sse", nil)
	req.Host = "events.localhost"
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || line != "data: first\n" {
		t.Fatalf("first event: %q %v", line, err)
	}
	time.Sleep(3 * timeout)
	be.sseNext <- struct{}{}
	_, _ = r.ReadString('\n') // the blank line after the first event
	if line, err := r.ReadString('\n'); err != nil || line != "data: second\n" {
		t.Fatalf("second event after %s: %q %v", 3*timeout, line, err)
	}
}

func TestANegativeUpstreamTimeoutIsRefused(t *testing.T) {
	in := startIngress(t, nil)
	err := in.Update(Table{Eggs: []Egg{{Name: "shop/web", Routes: []Route{{Host: "web.localhost", UpstreamTimeout: -time.Second}}}}})
	if err == nil || !strings.Contains(err.Error(), "negative upstream timeout") {
		t.Fatalf("Update: %v", err)
	}
}

// A request crossing the mesh carries its route's upstream timeout: the
// peer, which does not know the route, ejects its own frozen replica at it
// and sends the request to another of its replicas. The header never
// reaches a container.
func TestAPeerAppliesTheUpstreamTimeoutOfTheRequestsItIsSent(t *testing.T) {
	m := newFakeMesh()
	a, b := m.host(t, "A"), m.host(t, "B")
	frozen, ok := newTestBackend(t, "b-frozen"), newTestBackend(t, "b-ok")
	frozen.frozen.Store(true)
	mustUpdate(t, b, Table{Eggs: []Egg{webEgg(nil, frozen, ok)}})
	const timeout = 300 * time.Millisecond
	egg := webEgg([]string{"B"})
	egg.Routes[0].UpstreamTimeout = timeout
	mustUpdate(t, a, Table{Eggs: []Egg{egg}})
	c, _ := newClient(t)
	for i := range 6 {
		began := time.Now()
		code, by, _ := get(t, c, a, "shop.localhost", "/headers")
		if took := time.Since(began); code != http.StatusOK || by != "b-ok" || took > timeout+time.Second {
			t.Fatalf("GET %d through the mesh: %d from %q after %s, want 200 from b-ok within the timeout", i, code, by, took)
		}
	}
	if n := frozen.hits.Load(); n > 1 {
		t.Errorf("the peer's frozen replica got %d requests: not ejected at the timeout it was sent", n)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+a.HTTPAddr().String()+"/headers", nil)
	req.Host = "shop.localhost"
	req.Header.Set(upstreamTimeoutHeader, "1ms") // a client's, not the ingress's
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a client sending the header itself: %d, want 200 (its header is not the ingress's)", resp.StatusCode)
	}
}
