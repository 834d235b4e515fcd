package mesh

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/ingress"
	"github.com/hatchery/hatchery/internal/testutil/listentest"
)

// lineEcho serves TCP on loopback, answering each line with name and the
// line: a replica's port.
func lineEcho(t *testing.T, name string) (addr string, port int) {
	t.Helper()
	ln := listentest.Serve(t, "tcp", "127.0.0.1:0", func(c net.Conn) {
		defer c.Close()
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			if _, err := fmt.Fprintf(c, "%s: %s\n", name, sc.Text()); err != nil {
				return
			}
		}
	})
	return ln.Addr().String(), ln.Addr().(*net.TCPAddr).Port
}

// A host acting beyond what was placed on it, with its own real host
// certificate, on the real mesh between two agents' ingresses (issue 24,
// findings 4 and 7): it reaches an egg only on the ports its own state
// streams to (the mesh refuses others with the current peer list, and B's
// ingress does too with a peer list from a control plane that knew no
// ports), its HTTP stream only on the egg's routes, and a stream it holds
// is reset once its workload leaves its reach.
func TestARogueHostReachesOnlyWhatItsStateStreamsTo(t *testing.T) {
	hosts := newCluster(t)
	rogue, b := startNodeHost(t, hosts, "h-rogue"), startNodeHost(t, hosts, "h-b")
	const kv, web = "other/data/kv", "default/shop/web"
	kvAddr, kvPort := lineEcho(t, "kv1")
	_, adminPort := lineEcho(t, "kv1-admin") // another port of the replica: neither routed nor published
	replica := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "web1") }))
	t.Cleanup(replica.Close)
	if err := b.in.Update(ingress.Table{Eggs: []ingress.Egg{
		{Name: kv, Port: kvPort, Backends: []ingress.Backend{{ContainerID: "kv1", Addr: kvAddr, Healthy: true}}},
		{Name: web, Routes: []ingress.Route{{Host: "shop.localhost", PathPrefix: "/shop"}},
			Backends: []ingress.Backend{{ContainerID: "web1", Addr: replica.Listener.Addr().String(), Healthy: true}}},
	}}); err != nil {
		t.Fatal(err)
	}
	// The rogue's state relays kv (its port) and routes web (HTTP).
	peers := []contract.Peer{
		{HostID: "h-b", Addresses: b.advertise},
		{HostID: "h-rogue", Addresses: rogue.advertise, Reaches: []string{web, kv},
			Streams: []contract.Reach{{Workload: web, Ports: []int{0}}, {Workload: kv, Ports: []int{kvPort}}}},
	}
	b.node.SetPeers(peers)
	rogue.node.SetPeers(peers)
	dial := func(id string, port int) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return rogue.node.DialStream(ctx, "h-b", id, port)
	}

	for _, bad := range []struct {
		id   string
		port int
	}{{kv, adminPort}, {kv, 0}, {web, replica.Listener.Addr().(*net.TCPAddr).Port}} {
		if c, err := dial(bad.id, bad.port); !errors.Is(err, ErrForbidden) {
			if c != nil {
				c.Close()
			}
			t.Errorf("%s port %d: %v, want refused by the mesh", bad.id, bad.port, err)
		}
	}
	// A peer list from before ports (workloads only): B's ingress still
	// refuses a port the egg does not serve.
	legacy := []contract.Peer{peers[0], {HostID: "h-rogue", Addresses: rogue.advertise, Reaches: []string{web, kv}}}
	b.node.SetPeers(legacy)
	if c, err := dial(kv, adminPort); err == nil {
		c.Close()
		t.Error("with a peer list from before ports, the admin port was reached")
	}
	b.node.SetPeers(peers)

	// The HTTP stream to web carries only what web's routes serve.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
		return dial(web, 0)
	}}}
	t.Cleanup(hc.CloseIdleConnections)
	for path, want := range map[string]int{"/shop/cart": 200, "/admin": 403} {
		resp, err := hc.Get("http://shop.localhost" + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s on web's stream: %d, want %d", path, resp.StatusCode, want)
		}
	}

	// kv's own port is reached; once kv leaves the rogue's reach, the
	// stream is reset at once.
	c, err := dial(kv, kvPort)
	if err != nil {
		t.Fatalf("kv's own port: %v", err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintln(c, "hi"); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "kv1: hi\n" {
		t.Fatalf("kv answered %q, %v", line, err)
	}
	withoutKV := []contract.Peer{peers[0], {HostID: "h-rogue", Addresses: rogue.advertise, Reaches: []string{web},
		Streams: []contract.Reach{{Workload: web, Ports: []int{0}}}}}
	b.node.SetPeers(withoutKV)
	if line, err := r.ReadString('\n'); err == nil || errors.Is(err, io.EOF) || isNetTimeout(err) {
		t.Fatalf("after kv left the rogue's reach its stream read %q, %v: want it reset", line, err)
	}
	if c, err := dial(kv, kvPort); !errors.Is(err, ErrForbidden) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("a new stream to kv: %v, want refused", err)
	}
}

func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
