package ingress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeMesh links the ingresses of a test's hosts: a stream to a host is its
// ingress's local-only entry (DialLocal), as the mesh server calls it. A
// host marked dead refuses streams, and Alive says false for it, as a mesh
// connection whose keep-alives went unanswered does.
type fakeMesh struct {
	mu      sync.Mutex // guards the maps
	hosts   map[string]*Ingress
	dead    map[string]bool
	dialled map[string]bool // a stream to the host succeeded once: a connection is open
	dials   map[string]int  // streams asked for, by host
}

func newFakeMesh() *fakeMesh {
	return &fakeMesh{hosts: map[string]*Ingress{}, dead: map[string]bool{}, dialled: map[string]bool{}, dials: map[string]int{}}
}

func (m *fakeMesh) DialStream(ctx context.Context, hostID, workloadID string, port int) (net.Conn, error) {
	m.mu.Lock()
	m.dials[hostID]++
	in, dead := m.hosts[hostID], m.dead[hostID]
	m.mu.Unlock()
	if in == nil || dead {
		return nil, fmt.Errorf("host %s cannot be reached", hostID)
	}
	c, err := in.DialLocal(ctx, workloadID, port)
	if err != nil {
		return nil, fmt.Errorf("host %s answered 503: %w", hostID, err)
	}
	m.mu.Lock()
	m.dialled[hostID] = true
	m.mu.Unlock()
	return c, nil
}

func (m *fakeMesh) Alive(hostID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dialled[hostID] && !m.dead[hostID]
}

func (m *fakeMesh) kill(hostID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dead[hostID] = true
}

func (m *fakeMesh) dialsTo(hostID string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dials[hostID]
}

// host starts the ingress of host id on the mesh.
func (m *fakeMesh) host(t *testing.T, id string) *Ingress {
	t.Helper()
	in := startIngress(t, func(c *Config) { c.Peers = m })
	m.mu.Lock()
	m.hosts[id] = in
	m.mu.Unlock()
	return in
}

// webEgg is the egg "p/s/web" routed at shop.localhost with the given local
// backends and other hosts.
func webEgg(remote []string, backends ...*testBackend) Egg {
	e := Egg{Name: "p/s/web", Routes: []Route{{Host: "shop.localhost"}}, Remote: remote}
	for _, b := range backends {
		e.Backends = append(e.Backends, Backend{ContainerID: b.name, Addr: b.addr(), Healthy: true})
	}
	return e
}

func TestRemoteBackendIsUsedOnlyWhenNoLocalOneIsAvailable(t *testing.T) {
	m := newFakeMesh()
	a, b := m.host(t, "A"), m.host(t, "B")
	local, far := newTestBackend(t, "a1"), newTestBackend(t, "b1")
	mustUpdate(t, b, Table{Eggs: []Egg{webEgg(nil, far)}})
	mustUpdate(t, a, Table{Eggs: []Egg{webEgg([]string{"B"}, local)}})
	c, _ := newClient(t)
	for range 10 {
		if code, who, _ := get(t, c, a, "shop.localhost", "/"); code != 200 || who != "a1" {
			t.Fatalf("with a local backend: %d from %q, want 200 from a1", code, who)
		}
	}
	if n := m.dialsTo("B"); n != 0 {
		t.Fatalf("%d streams to B while a local backend was available", n)
	}

	// The local replica drains (a roll): the next requests cross the mesh.
	if err := a.Drain(context.Background(), "a1"); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if code, who, _ := get(t, c, a, "shop.localhost", "/"); code != 200 || who != "b1" {
			t.Fatalf("local backend drained: %d from %q, want 200 from b1", code, who)
		}
	}
	// Kept alive: ten requests, one stream.
	if n := m.dialsTo("B"); n != 1 {
		t.Errorf("%d streams to B for 10 sequential requests, want 1 kept alive", n)
	}
	// The peer's ingress passes on what the edge saw, not its own view.
	_, _, body := get(t, c, a, "shop.localhost", "/headers")
	for _, want := range []string{"X-Forwarded-For=127.0.0.1\n", "X-Forwarded-Host=shop.localhost\n", "Host=shop.localhost\n"} {
		if !strings.Contains(body, want) {
			t.Errorf("the remote replica saw\n%s\nwant a line %q", body, want)
		}
	}
}

// A replica draining on the peer gets no new request, even on the stream
// the calling ingress keeps alive; when the peer has no replica left, the
// request goes to another host instead of failing.
func TestRemoteDrainingReplicaGetsNoNewRequest(t *testing.T) {
	m := newFakeMesh()
	a, b, c3 := m.host(t, "A"), m.host(t, "B"), m.host(t, "C")
	b1, b2, c1 := newTestBackend(t, "b1"), newTestBackend(t, "b2"), newTestBackend(t, "c1")
	mustUpdate(t, b, Table{Eggs: []Egg{webEgg(nil, b1, b2)}})
	mustUpdate(t, c3, Table{Eggs: []Egg{webEgg(nil, c1)}})
	mustUpdate(t, a, Table{Eggs: []Egg{webEgg([]string{"B"})}})
	cl, _ := newClient(t)
	for range 6 {
		if code, _, _ := get(t, cl, a, "shop.localhost", "/"); code != 200 {
			t.Fatalf("status %d through the mesh", code)
		}
	}
	if b1.hits.Load() == 0 || b2.hits.Load() == 0 {
		t.Fatalf("the peer did not spread requests: b1 %d, b2 %d", b1.hits.Load(), b2.hits.Load())
	}
	if err := b.Drain(context.Background(), "b1"); err != nil {
		t.Fatal(err)
	}
	before := b1.hits.Load()
	for range 10 {
		if code, who, _ := get(t, cl, a, "shop.localhost", "/"); code != 200 || who != "b2" {
			t.Fatalf("after b1's drain: %d from %q, want 200 from b2", code, who)
		}
	}
	if got := b1.hits.Load(); got != before {
		t.Fatalf("draining b1 got %d new requests", got-before)
	}
	streams := m.dialsTo("B")

	// B's last replica drains; C serves.
	mustUpdate(t, a, Table{Eggs: []Egg{webEgg([]string{"B", "C"})}})
	if err := b.Drain(context.Background(), "b2"); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if code, who, body := get(t, cl, a, "shop.localhost", "/"); code != 200 || who != "c1" {
			t.Fatalf("request %d after B drained: %d from %q (%s), want 200 from c1", i, code, who, body)
		}
	}
	// B answered "no replica" once, on the kept-alive stream, and was left
	// alone for EjectFor: no new stream to it.
	if n := m.dialsTo("B") - streams; n > 1 {
		t.Errorf("%d new streams to B after it had no replica, want at most one within EjectFor", n)
	}
}

func TestRemoteDeadPeerIsEjected(t *testing.T) {
	m := newFakeMesh()
	a, b, c := m.host(t, "A"), m.host(t, "B"), m.host(t, "C")
	b1, c1 := newTestBackend(t, "b1"), newTestBackend(t, "c1")
	mustUpdate(t, b, Table{Eggs: []Egg{webEgg(nil, b1)}})
	mustUpdate(t, c, Table{Eggs: []Egg{webEgg(nil, c1)}})
	mustUpdate(t, a, Table{Eggs: []Egg{webEgg([]string{"B", "C"})}})
	cl, _ := newClient(t)
	for range 10 {
		if code, _, _ := get(t, cl, a, "shop.localhost", "/"); code != 200 {
			t.Fatalf("status %d", code)
		}
	}
	if b1.hits.Load() == 0 || c1.hits.Load() == 0 {
		t.Fatalf("remote hosts not both used: b1 %d, c1 %d", b1.hits.Load(), c1.hits.Load())
	}
	// B's keep-alives go unanswered: its connection is dead. No request
	// waits on it, not even on a stream kept alive before.
	m.kill("B")
	dials, hits := m.dialsTo("B"), b1.hits.Load()
	for range 10 {
		if code, who, _ := get(t, cl, a, "shop.localhost", "/"); code != 200 || who != "c1" {
			t.Fatalf("after B died: %d from %q, want 200 from c1", code, who)
		}
	}
	if n, h := m.dialsTo("B")-dials, b1.hits.Load()-hits; n != 0 || h != 0 {
		t.Errorf("dead B got %d dials and %d requests", n, h)
	}
	if st := a.Status(); len(st) != 1 || st[0].RemoteEjected != 1 || st[0].RemoteReady != 1 {
		t.Errorf("status %+v, want one remote ejected and one ready", st)
	}
}

// A peer that was never reached fails its first dial: the request goes to
// another host (nothing was sent), and the peer stays out for EjectFor.
func TestRemoteFailedDialEjectsThePeer(t *testing.T) {
	m := newFakeMesh()
	a, c := m.host(t, "A"), m.host(t, "C")
	m.host(t, "B")
	m.kill("B")
	c1 := newTestBackend(t, "c1")
	mustUpdate(t, c, Table{Eggs: []Egg{webEgg(nil, c1)}})
	mustUpdate(t, a, Table{Eggs: []Egg{webEgg([]string{"B", "C"})}})
	cl, _ := newClient(t)
	for range 10 {
		if code, who, _ := get(t, cl, a, "shop.localhost", "/"); code != 200 || who != "c1" {
			t.Fatalf("%d from %q, want 200 from c1", code, who)
		}
	}
	if n := m.dialsTo("B"); n > 1 {
		t.Errorf("%d dials to unreachable B, want at most 1 within EjectFor", n)
	}
}

func TestRemoteNoBackendAnywhereIs503(t *testing.T) {
	m := newFakeMesh()
	a, b := m.host(t, "A"), m.host(t, "B")
	mustUpdate(t, b, Table{Eggs: []Egg{webEgg(nil)}})
	mustUpdate(t, a, Table{Eggs: []Egg{webEgg([]string{"B"})}})
	cl, _ := newClient(t)
	code, _, body := get(t, cl, a, "shop.localhost", "/")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "no healthy backend") {
		t.Fatalf("%d %q, want 503 naming no healthy backend", code, body)
	}
}

// Streams from peers use local backends only: a host never forwards them
// to a third host, so two ingresses cannot send a request round in circles.
func TestStreamsFromPeersNeverTravelOn(t *testing.T) {
	m := newFakeMesh()
	b, c := m.host(t, "B"), m.host(t, "C")
	c1 := newTestBackend(t, "c1")
	mustUpdate(t, c, Table{Eggs: []Egg{webEgg(nil, c1)}})
	onB := webEgg([]string{"C"})
	onB.Port = 5432
	mustUpdate(t, b, Table{Eggs: []Egg{onB}})
	for _, port := range []int{0, 5432} {
		if _, err := b.DialLocal(context.Background(), "p/s/web", port); !IsNoBackend(err) {
			t.Errorf("port %d: DialLocal on a host without replicas: %v, want no healthy backend", port, err)
		}
	}
	if _, err := b.DialLocal(context.Background(), "p/s/other", 0); !IsNoBackend(err) {
		t.Errorf("an egg not in the table: %v, want no healthy backend", err)
	}
	if n := m.dialsTo("C"); n != 0 {
		t.Fatalf("B forwarded a peer's stream to C (%d streams)", n)
	}
}

func TestRemotePublishedPortConnection(t *testing.T) {
	m := newFakeMesh()
	a, b := m.host(t, "A"), m.host(t, "B")
	db := newLineServer(t, "db1")
	_, target, _ := net.SplitHostPort(db.addr())
	port := freePort(t)
	var tp int
	fmt.Sscan(target, &tp)
	mustUpdate(t, b, Table{Eggs: []Egg{{Name: "p/s/db", Port: tp, Backends: []Backend{{ContainerID: "db1", Addr: db.addr(), Healthy: true}}}}})
	mustUpdate(t, a, Table{Eggs: []Egg{{Name: "p/s/db", Ports: []Port{{Published: port, Target: tp}}, Remote: []string{"B"}}}})

	name, conn, r := whoAnswers(t, port)
	if name != "db1" {
		t.Fatalf("answered by %q, want db1 on B", name)
	}
	// The connection on B is tracked: the replica dying there cuts it.
	b.Gone("db1")
	db.stop()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("the connection outlived its remote replica")
	} else if errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("the connection was not cut: %v", err)
	}
}

// shortDir is a temporary directory with a path short enough for Unix
// sockets (108 bytes), which t.TempDir's may not be.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "hi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// A relay's socket is served like a published port: local replicas first,
// else another host's through the mesh; a stale socket left by an earlier
// run is replaced, and the socket goes when the table drops it.
func TestSocketIsServedLikeAPublishedPort(t *testing.T) {
	m := newFakeMesh()
	a, b := m.host(t, "A"), m.host(t, "B")
	// Replicas of one egg listen on one port, each at its own IP.
	local := newLineServer(t, "a1")
	_, target, _ := net.SplitHostPort(local.addr())
	far := newLineServerAt(t, "b1", "127.0.0.2:"+target)
	var tp int
	fmt.Sscan(target, &tp)
	path := filepath.Join(shortDir(t), "kv", "relay.sock")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	stale, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close() // as an agent killed before it could remove it

	mustUpdate(t, b, Table{Eggs: []Egg{{Name: "p/s/kv", Port: tp, Backends: []Backend{{ContainerID: "b1", Addr: far.addr(), Healthy: true}}}}})
	egg := Egg{Name: "p/s/kv", Sockets: []Socket{{Path: path, Target: tp}}, Remote: []string{"B"},
		Backends: []Backend{{ContainerID: "a1", Addr: local.addr(), Healthy: true}}}
	mustUpdate(t, a, Table{Eggs: []Egg{egg}})
	who := func() string {
		t.Helper()
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatalf("dial the socket: %v", err)
		}
		defer c.Close()
		reply, err := exchange(c, bufio.NewReader(c), "hi")
		if err != nil {
			t.Fatalf("exchange through the socket: %v", err)
		}
		name, _, _ := strings.Cut(reply, ": ")
		return name
	}
	if got := who(); got != "a1" {
		t.Fatalf("answered by %q, want the local a1", got)
	}
	if err := a.Drain(context.Background(), "a1"); err != nil {
		t.Fatal(err)
	}
	if got := who(); got != "b1" {
		t.Fatalf("local drained: answered by %q, want b1 on B", got)
	}
	egg.Sockets = nil
	mustUpdate(t, a, Table{Eggs: []Egg{egg}})
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket is still there after the table dropped it: %v", err)
	}
}

func TestSocketValidation(t *testing.T) {
	for name, tab := range map[string]Table{
		"relative path":  {Eggs: []Egg{{Name: "a", Sockets: []Socket{{Path: "relay.sock", Target: 80}}}}},
		"no target port": {Eggs: []Egg{{Name: "a", Sockets: []Socket{{Path: "/x/relay.sock"}}}}},
		"held twice": {Eggs: []Egg{{Name: "a", Sockets: []Socket{{Path: "/x/relay.sock", Target: 80}}},
			{Name: "b", Sockets: []Socket{{Path: "/x/relay.sock", Target: 80}}}}},
		"remote host twice": {Eggs: []Egg{{Name: "a", Remote: []string{"h", "h"}}}},
		"remote host empty": {Eggs: []Egg{{Name: "a", Remote: []string{""}}}},
	} {
		if _, err := validate(tab); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// Concurrent requests through the mesh: every one answered, by the peer's
// replicas, over streams the calling ingress keeps alive and reuses.
func TestRemoteConcurrentRequests(t *testing.T) {
	m := newFakeMesh()
	a, b := m.host(t, "A"), m.host(t, "B")
	b1, b2 := newTestBackend(t, "b1"), newTestBackend(t, "b2")
	mustUpdate(t, b, Table{Eggs: []Egg{webEgg(nil, b1, b2)}})
	mustUpdate(t, a, Table{Eggs: []Egg{webEgg([]string{"B"})}})
	cl, _ := newClient(t)
	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				req, _ := http.NewRequest(http.MethodPost, "http://"+a.HTTPAddr().String()+"/", strings.NewReader(strings.Repeat("x", w*100+i)))
				req.Host = "shop.localhost"
				resp, err := cl.Do(req)
				if err != nil {
					errs <- err
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if want := fmt.Sprintf("read %d", w*100+i); resp.StatusCode != 200 || !strings.HasSuffix(string(body), want) {
					errs <- fmt.Errorf("status %d %q, want 200 ending %q", resp.StatusCode, body, want)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := m.dialsTo("B"); n > 40 {
		t.Errorf("%d streams for 400 requests of 8 clients, want them kept alive and reused", n)
	}
}

// A published port's connection whose first peer cannot be reached goes to
// the next: nothing was sent yet.
func TestRemotePublishedPortSkipsADeadPeer(t *testing.T) {
	m := newFakeMesh()
	a, c := m.host(t, "A"), m.host(t, "C")
	m.host(t, "B")
	m.kill("B")
	db := newLineServer(t, "c1")
	_, target, _ := net.SplitHostPort(db.addr())
	var tp int
	fmt.Sscan(target, &tp)
	port := freePort(t)
	mustUpdate(t, c, Table{Eggs: []Egg{{Name: "p/s/db", Port: tp, Backends: []Backend{{ContainerID: "c1", Addr: db.addr(), Healthy: true}}}}})
	mustUpdate(t, a, Table{Eggs: []Egg{{Name: "p/s/db", Ports: []Port{{Published: port, Target: tp}}, Remote: []string{"B", "C"}}}})
	for range 4 {
		if name, conn, _ := whoAnswers(t, port); name != "c1" {
			t.Fatalf("answered by %q, want c1 on C", name)
		} else {
			conn.Close()
		}
	}
	if n := m.dialsTo("B"); n > 1 {
		t.Errorf("%d dials to unreachable B, want at most 1 within EjectFor", n)
	}
}

// An upgraded connection (a WebSocket) crosses the mesh, and the replica
// dying on the peer cuts it there.
func TestRemoteUpgradedConnection(t *testing.T) {
	m := newFakeMesh()
	a, b := m.host(t, "A"), m.host(t, "B")
	b1 := newTestBackend(t, "b1")
	mustUpdate(t, b, Table{Eggs: []Egg{webEgg(nil, b1)}})
	mustUpdate(t, a, Table{Eggs: []Egg{webEgg([]string{"B"})}})
	c, _ := newClient(t)
	c.Timeout = 0 // a timeout wraps the body, which then is not writable
	req, _ := http.NewRequest(http.MethodGet, "http://"+a.HTTPAddr().String()+"/ws", nil)
	req.Host = "shop.localhost"
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
	if _, err := io.WriteString(conn, "hello\n"); err != nil {
		t.Fatal(err)
	}
	if got, err := r.ReadString('\n'); err != nil || got != "hello\n" {
		t.Fatalf("echo through the mesh: %q, %v", got, err)
	}
	b.Gone("b1")
	done := make(chan error, 1)
	go func() { _, err := r.ReadString('\n'); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("read a line after the replica was gone")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the upgraded connection outlived its replica on the peer")
	}
}

// A socket whose path is longer than a Unix socket address may be (a data
// directory deep in a project's tree) is served all the same, and removed
// when the table drops it.
func TestSocketAtAPathLongerThanASocketAddressIsServed(t *testing.T) {
	m := newFakeMesh()
	a := m.host(t, "A")
	local := newLineServer(t, "a1")
	_, target, _ := net.SplitHostPort(local.addr())
	var tp int
	fmt.Sscan(target, &tp)
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", maxSocketPath))
	path := filepath.Join(dir, "relay.sock")
	egg := Egg{Name: "p/s/kv", Sockets: []Socket{{Path: path, Target: tp}},
		Backends: []Backend{{ContainerID: "a1", Addr: local.addr(), Healthy: true}}}
	mustUpdate(t, a, Table{Eggs: []Egg{egg}})
	// A relay dials it by a short path (its mount); here, by the directory's.
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c, err := net.Dial("unix", fmt.Sprintf("/proc/self/fd/%d/relay.sock", d.Fd()))
	if err != nil {
		t.Fatalf("dial the socket: %v", err)
	}
	reply, err := exchange(c, bufio.NewReader(c), "hi")
	c.Close()
	if name, _, _ := strings.Cut(reply, ": "); err != nil || name != "a1" {
		t.Fatalf("through the socket: %q, %v; want a1's answer", reply, err)
	}
	egg.Sockets = nil
	mustUpdate(t, a, Table{Eggs: []Egg{egg}})
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket is still there after the table dropped it: %v", err)
	}
}

// A peer that answered "no replica" is ejected on a guess: while nothing
// else can take a request and its mesh connection lives, the last resort
// tries it again rather than answering 503 for all of EjectFor (5 s), so a
// replica back on its host (a stateful one restarted, say) serves at once.
func TestAPeerThatHadNoReplicaIsTheLastResort(t *testing.T) {
	m := newFakeMesh()
	a, b := m.host(t, "A"), m.host(t, "B")
	b0, b1 := newTestBackend(t, "b0"), newTestBackend(t, "b1")
	mustUpdate(t, b, Table{Eggs: []Egg{webEgg(nil, b0)}})
	mustUpdate(t, a, Table{Eggs: []Egg{webEgg([]string{"B"})}})
	cl, _ := newClient(t)
	if code, who, _ := get(t, cl, a, "shop.localhost", "/"); code != 200 || who != "b0" {
		t.Fatalf("%d from %q, want 200 from b0", code, who)
	}
	// b0 goes; B answers "no replica" on the stream kept alive.
	mustUpdate(t, b, Table{Eggs: []Egg{webEgg(nil)}})
	if code, _, body := get(t, cl, a, "shop.localhost", "/"); code != http.StatusServiceUnavailable {
		t.Fatalf("B without a replica: %d %q, want 503", code, body)
	}
	if st := a.Status(); len(st) != 1 || st[0].RemoteEjected != 1 {
		t.Fatalf("status %+v, want B ejected", st)
	}
	mustUpdate(t, b, Table{Eggs: []Egg{webEgg(nil, b1)}})
	for i := range 5 {
		if code, who, body := get(t, cl, a, "shop.localhost", "/"); code != 200 || who != "b1" {
			t.Fatalf("request %d with b1 back on B: %d from %q (%s), want 200 from b1", i, code, who, body)
		}
	}
	// A dead peer is no last resort: it would only fail again.
	m.kill("B")
	dials := m.dialsTo("B")
	if code, _, _ := get(t, cl, a, "shop.localhost", "/"); code != http.StatusServiceUnavailable {
		t.Fatalf("dead B: %d, want 503", code)
	}
	if n := m.dialsTo("B") - dials; n != 0 {
		t.Errorf("%d dials to dead B, want none", n)
	}
}

// A peer's TCP stream reaches only the egg's own port and its published and
// relayed targets: a replica's other ports (an admin or debug port, neither
// routed nor published) are refused, whatever the mesh let through (issue
// 24, finding 4). An HTTP stream needs an egg with routes.
func TestAPeersStreamReachesOnlyThePortsTheEggServes(t *testing.T) {
	m := newFakeMesh()
	b := m.host(t, "B")
	kv := newLineServer(t, "kv1")
	admin := newLineServer(t, "admin") // another port of the same replica (same IP)
	port := func(addr string) int {
		_, p, _ := net.SplitHostPort(addr)
		var n int
		fmt.Sscan(p, &n)
		return n
	}
	kvPort, adminPort := port(kv.addr()), port(admin.addr())
	mustUpdate(t, b, Table{Eggs: []Egg{{Name: "p/s/kv", Port: kvPort,
		Backends: []Backend{{ContainerID: "kv1", Addr: kv.addr(), Healthy: true}}}}})

	for _, p := range []int{adminPort, 0} {
		c, err := b.DialLocal(context.Background(), "p/s/kv", p)
		if err == nil {
			reply, _ := exchange(c, bufio.NewReader(c), "hi")
			c.Close()
			t.Fatalf("port %d of the replica was reached from a peer (it answered %q)", p, reply)
		}
		if !errors.Is(err, ErrNotServedToPeers) {
			t.Errorf("port %d: %v, want ErrNotServedToPeers", p, err)
		}
	}
	if n := admin.open.Load(); n != 0 {
		t.Fatalf("the admin port got %d connections", n)
	}
	c, err := b.DialLocal(context.Background(), "p/s/kv", kvPort)
	if err != nil {
		t.Fatalf("the egg's own port: %v", err)
	}
	defer c.Close()
	if reply, err := exchange(c, bufio.NewReader(c), "hi"); err != nil || reply != "kv1: hi" {
		t.Fatalf("the egg's own port answered %q, %v", reply, err)
	}
}

// The requests of a peer's HTTP stream are held to the routes that send to
// its egg on this host: a path outside the route's prefix, another host
// name, or a route of another egg are refused 403 and reach no replica
// (issue 24, finding 4).
func TestAPeersHTTPStreamIsHeldToTheEggsRoutes(t *testing.T) {
	m := newFakeMesh()
	b := m.host(t, "B")
	web, api := newTestBackend(t, "web1"), newTestBackend(t, "api1")
	mustUpdate(t, b, Table{Eggs: []Egg{
		{Name: "p/s/web", Routes: []Route{{Host: "shop.localhost", PathPrefix: "/shop"}},
			Backends: []Backend{{ContainerID: "web1", Addr: web.addr(), Healthy: true}}},
		{Name: "p/s/api", Routes: []Route{{Host: "shop.localhost", PathPrefix: "/shop/api"}},
			Backends: []Backend{{ContainerID: "api1", Addr: api.addr(), Healthy: true}}},
	}})
	conn, err := b.DialLocal(context.Background(), "p/s/web", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	ask := func(host, path string) int {
		t.Helper()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		req, _ := http.NewRequest("GET", "http://"+host+path, nil)
		if err := req.Write(conn); err != nil {
			t.Fatalf("%s%s: %v", host, path, err)
		}
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			t.Fatalf("%s%s: %v", host, path, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		host, path string
		want       int
	}{
		{"shop.localhost", "/shop/cart", 200},
		{"Shop.localhost:8080", "/shop", 200},
		{"shop.localhost", "/admin", 403},      // outside the route's prefix
		{"shop.localhost", "/shopping", 403},   // a prefix matches whole segments
		{"other.localhost", "/shop", 403},      // another host name
		{"shop.localhost", "/shop/api/x", 403}, // api's route, not web's
	} {
		if got := ask(tc.host, tc.path); got != tc.want {
			t.Errorf("%s%s on web's stream: %d, want %d", tc.host, tc.path, got, tc.want)
		}
	}
	if n := api.hits.Load(); n != 0 {
		t.Errorf("api's replica got %d requests through web's stream", n)
	}
	if n := web.hits.Load(); n != 2 {
		t.Errorf("web's replica got %d requests, want the 2 its routes serve", n)
	}
	// An egg without routes takes no HTTP stream.
	mustUpdate(t, b, Table{Eggs: []Egg{{Name: "p/s/web", Port: 8080,
		Backends: []Backend{{ContainerID: "web1", Addr: web.addr(), Healthy: true}}}}})
	if _, err := b.DialLocal(context.Background(), "p/s/web", 0); !errors.Is(err, ErrNotServedToPeers) {
		t.Fatalf("an HTTP stream to an egg without routes: %v, want ErrNotServedToPeers", err)
	}
}
