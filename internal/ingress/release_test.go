package ingress

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"
)

// Release (the data plane's handover) stops accepting at once, lets a
// kept-alive connection carry one more request, answered with Connection:
// close, and returns once that connection has closed: nothing is cut.
func TestReleaseStopsAcceptingAndEndsKeptAliveConnectionsAfterTheirNextResponse(t *testing.T) {
	in := startIngress(t, nil)
	b := newTestBackend(t, "b1")
	mustUpdate(t, in, Table{Eggs: []Egg{{Name: "web", Routes: []Route{{Host: "web.localhost"}},
		Backends: []Backend{{ContainerID: "c1", Addr: b.addr(), Healthy: true}}}}})
	c, dials := newClient(t)
	if code, _, _ := get(t, c, in, "web.localhost", "/"); code != http.StatusOK {
		t.Fatalf("before Release: %d", code)
	}

	released := make(chan struct{})
	go func() {
		defer close(released)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		in.Release(ctx)
	}()
	eventually(t, "the listener closed", func() bool {
		conn, err := net.Dial("tcp", in.HTTPAddr().String())
		if err == nil {
			conn.Close()
		}
		return err != nil
	})
	select {
	case <-released:
		t.Fatal("Release returned while a kept-alive connection was open")
	default:
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+in.HTTPAddr().String()+"/", nil)
	req.Host = "web.localhost"
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("the kept-alive connection's next request: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !resp.Close || dials.Load() != 1 {
		t.Fatalf("next request: %d, close %v, %d dials; want 200 on the same connection, then closed", resp.StatusCode, resp.Close, dials.Load())
	}
	select {
	case <-released:
	case <-time.After(5 * time.Second):
		t.Fatal("Release did not return once the connection closed")
	}
}
