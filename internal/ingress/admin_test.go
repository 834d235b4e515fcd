package ingress

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestAdminServesHealthAndMetrics(t *testing.T) {
	in := startIngress(t, nil)
	be := newTestBackend(t, "a")
	mustUpdate(t, in, Table{Eggs: []Egg{{Name: "shop/web", Routes: []Route{{Host: "web.localhost"}},
		Backends: []Backend{{ContainerID: "a", Addr: be.addr(), Healthy: true}, {ContainerID: "b", Addr: be.addr(), Healthy: false}}}}})
	c, _ := newClient(t)
	for range 3 {
		get(t, c, in, "web.localhost", "/")
	}
	get(t, c, in, "nowhere.localhost", "/")

	admin := "http://" + in.AdminAddr().String()
	resp, err := c.Get(admin + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "ok\n" {
		t.Fatalf("/healthz: %d %q", resp.StatusCode, body)
	}

	resp, err = c.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`hatch_ingress_http_requests_total{code="2xx",egg="shop/web"} 3`,
		`hatch_ingress_http_request_duration_seconds_count{egg="shop/web"} 3`,
		`hatch_ingress_unrouted_requests_total 1`,
		`hatch_ingress_backends{egg="shop/web",state="ready"} 1`,
		`hatch_ingress_backends{egg="shop/web",state="unhealthy"} 1`,
		`hatch_ingress_in_flight{egg="shop/web"} 0`,
	} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// A removed egg's series go with it.
	mustUpdate(t, in, Table{})
	if got := counterValue(t, in, "hatch_ingress_http_requests_total", "shop/web"); got != 0 {
		t.Errorf("a removed egg still has %v requests counted", got)
	}
}

func TestHealthzFailsOnceClosing(t *testing.T) {
	in := startIngress(t, nil)
	h := in.AdminHandler()
	if err := in.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("/healthz after Close: %d, want 503", rec.Code)
	}
	if err := in.Update(Table{}); err != ErrClosed {
		t.Fatalf("Update after Close = %v, want ErrClosed", err)
	}
}

func TestCloseLetsOpenRequestsFinishThenCutsWhatIsLeft(t *testing.T) {
	in := startIngress(t, nil)
	be := newTestBackend(t, "a")
	port := freePort(t)
	lines := newLineServer(t, "db")
	mustUpdate(t, in, Table{Eggs: []Egg{
		{Name: "web", Routes: []Route{{Host: "web.localhost"}}, Backends: []Backend{{ContainerID: "a", Addr: be.addr(), Healthy: true}}},
		{Name: "db", Ports: []Port{{Published: port}}, Backends: []Backend{{ContainerID: "db", Addr: lines.addr(), Healthy: true}}},
	}})
	c, _ := newClient(t)
	slow := make(chan int, 1)
	go func() {
		code, _, _ := get(t, c, in, "web.localhost", "/block")
		slow <- code
	}()
	<-be.entered
	_, tcpConn, tcpR := whoAnswers(t, port)

	closed := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	go func() { closed <- in.Close(ctx) }()
	time.Sleep(50 * time.Millisecond)
	be.unblock() // the HTTP request finishes within the grace period
	if code := <-slow; code != 200 {
		t.Fatalf("request open during Close got %d", code)
	}
	// The TCP connection outlives the grace period and is cut.
	err := <-closed
	if err == nil || !strings.Contains(err.Error(), "open connections cut") {
		t.Fatalf("Close = %v, want it to report cut connections", err)
	}
	tcpConn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := tcpR.ReadByte(); err != io.EOF {
		t.Fatalf("TCP connection after Close: %v, want EOF", err)
	}
}

// The agent sets a problem an operator must fix (a control plane it cannot
// verify): /healthz says so with 503 until it is cleared.
func TestHealthzAnswers503WithTheProblemSet(t *testing.T) {
	in := startIngress(t, nil)
	c, _ := newClient(t)
	health := func() (int, string) {
		t.Helper()
		resp, err := c.Get("http://" + in.AdminAddr().String() + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	const why = "the control plane's certificate does not match the CA this host joined with"
	in.SetProblem(why)
	if code, body := health(); code != http.StatusServiceUnavailable || !strings.Contains(body, why) {
		t.Fatalf("/healthz with a problem: %d %q", code, body)
	}
	in.SetProblem("")
	if code, body := health(); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz once cleared: %d %q", code, body)
	}
}
