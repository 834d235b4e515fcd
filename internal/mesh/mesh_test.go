package mesh

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/pki/authority"
)

const shopWeb = "default/shop/web"

func TestStreamCarriesBytesBothWaysAndHalfCloses(t *testing.T) {
	p := newPair(t, shopWeb)
	p.dialer.add(t, shopWeb, echo)
	conn, err := p.dial(t, shopWeb)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A round trip on an open stream.
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q, %v", buf, err)
	}
	// Half-close: the workload reads EOF and still answers.
	if _, err := conn.Write([]byte("last")); err != nil {
		t.Fatal(err)
	}
	if err := conn.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(conn)
	if err != nil || string(rest) != "last" {
		t.Fatalf("after half-close read %q, %v", rest, err)
	}
	if conn.RemoteAddr().String() != p.ln.Addr().String() {
		t.Errorf("remote address %v, want the peer's %v", conn.RemoteAddr(), p.ln.Addr())
	}
}

// A stream names what it carries: an HTTP stream (port zero) or a TCP
// stream to a port, which the peer's Dialer gets as Workload.Port.
func TestStreamCarriesItsPortToTheDialer(t *testing.T) {
	p := newPair(t, shopWeb)
	p.dialer.add(t, shopWeb, echo)
	for _, port := range []int{0, testTCPPort} {
		conn, err := p.client.DialStream(context.Background(), "h-srv", shopWeb, port)
		if err != nil {
			t.Fatalf("port %d: %v", port, err)
		}
		conn.Close()
	}
	p.dialer.mu.Lock()
	asked := slices.Clone(p.dialer.asked)
	p.dialer.mu.Unlock()
	if len(asked) != 2 || asked[0].Port != 0 || asked[1].Port != testTCPPort || asked[1].ID() != shopWeb {
		t.Fatalf("the dialer was asked %+v, want %s for HTTP then port 5432", asked, shopWeb)
	}
	for _, bad := range []struct {
		id   string
		port int
	}{{"default/shop", 0}, {shopWeb, 70000}, {shopWeb, -1}} {
		if _, err := p.client.DialStream(context.Background(), "h-srv", bad.id, bad.port); err == nil {
			t.Errorf("DialStream(%q, %d) succeeded", bad.id, bad.port)
		}
	}
}

// A caller without a valid host certificate gets nothing: no HTTP answer,
// not even an error page. Only the handshake fails.
func TestCallersWithoutAValidHostCertificateGetNothing(t *testing.T) {
	p := newPair(t, shopWeb)
	p.dialer.add(t, shopWeb, echo)
	addr := p.ln.Addr().String()

	other := newCluster(t) // another host CA
	servingCA, err := authority.LoadOrCreate(t.TempDir(), []string{"localhost", "127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	serving := servingCA.TLSConfig().Certificates[0]
	cases := map[string][]tls.Certificate{
		"no certificate":                    nil,
		"a host certificate of another CA":  {*hostCert(t, other.ca, "h-cli")},
		"the control plane's serving cert":  {serving},
		"a valid certificate, unknown host": {*hostCert(t, p.cluster.ca, "h-stranger")},
	}
	for name, certs := range cases {
		t.Run(name, func(t *testing.T) {
			raw, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			tc := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, Certificates: certs, NextProtos: []string{"h2"}})
			_ = tc.SetDeadline(time.Now().Add(3 * time.Second))
			err = tc.Handshake()
			if err == nil {
				// TLS 1.3: the client's handshake ends before the server
				// has checked its certificate; the refusal comes on read.
				_, _ = tc.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
				var got []byte
				got, err = io.ReadAll(tc)
				if len(got) > 0 {
					t.Fatalf("the server answered %d bytes (%q)", len(got), got)
				}
			}
			if err == nil {
				t.Fatal("the connection ended cleanly; want a refused handshake")
			}
		})
	}
	// Plain text gets no HTTP answer either.
	raw, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(3 * time.Second))
	fmt.Fprintf(raw, "POST /v1/stream/default/shop/web HTTP/1.1\r\nHost: x\r\n\r\n")
	got, _ := io.ReadAll(raw)
	if bytes.Contains(got, []byte("HTTP/")) {
		t.Fatalf("plain HTTP got an answer: %q", got)
	}
	if n := p.dialer.dials.Load(); n != 0 {
		t.Fatalf("the workload was dialled %d times for unauthenticated callers", n)
	}
	// And the valid client still works.
	conn, err := p.dial(t, shopWeb)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
}

// The client checks the server too: a host certificate of another host, or
// of another CA, at the peer's address is refused.
func TestTheClientRefusesAPeerThatIsNotTheOneDialled(t *testing.T) {
	p := newPair(t, shopWeb)
	p.dialer.add(t, shopWeb, echo)
	// Another valid host answers at h-srv's address: the client asked for h-srv.
	impostor, err := NewServer(testConfig(t), p.cluster.creds(t, "h-other"), p.dialer)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := impostor.Serve(ln); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { impostor.Close(context.Background()) })
	peers := append(p.peers[:0:0], p.peers...)
	peers[0].Addresses = []string{ln.Addr().String()}
	peers = append(peers, contract.Peer{HostID: "h-other", Addresses: []string{ln.Addr().String()}})
	impostor.SetPeers(peers)
	p.client.SetPeers(peers)
	_, err = p.dial(t, shopWeb)
	if !errors.Is(err, ErrPeerUnreachable) || !strings.Contains(err.Error(), "answered as host h-other") {
		t.Fatalf("err %v, want the impostor refused", err)
	}
}

func TestStreamToAnotherProjectsEggIsRefused(t *testing.T) {
	p := newPair(t, shopWeb)
	p.dialer.add(t, shopWeb, echo)
	p.dialer.add(t, "default/other/web", echo)
	p.dialer.add(t, "team/shop/web", echo)
	for _, id := range []string{"default/other/web", "team/shop/web", "default/shop/db"} {
		if _, err := p.dial(t, id); !errors.Is(err, ErrForbidden) {
			t.Errorf("%s: err %v, want ErrForbidden", id, err)
		}
	}
	if n := p.dialer.dials.Load(); n != 0 {
		t.Fatalf("a refused stream dialled the workload (%d dials)", n)
	}
	if conn, err := p.dial(t, shopWeb); err != nil {
		t.Fatalf("the allowed workload: %v", err)
	} else {
		conn.Close()
	}
}

// A peer reaches a workload only on the ports its own desired state streams
// to (issue 24, finding 4: a host reached port 38241, neither routed nor
// published, of another project's replica): any other port is refused
// before the workload is dialled, and so is HTTP where it was given TCP.
func TestStreamToAPortOutsideThePeersReachIsRefused(t *testing.T) {
	p := newPair(t) // reaches nothing yet
	p.dialer.add(t, shopWeb, echo)
	p.dialer.add(t, "default/shop/db", echo)
	peers := slices.Clone(p.peers)
	peers[1].Reaches = []string{"default/shop/db", shopWeb}
	peers[1].Streams = []contract.Reach{{Workload: "default/shop/db", Ports: []int{5432}}, {Workload: shopWeb, Ports: []int{0}}}
	p.server.SetPeers(peers)
	p.client.SetPeers(peers)
	for _, bad := range []struct {
		id   string
		port int
	}{{shopWeb, 38241}, {shopWeb, 8080}, {"default/shop/db", 38241}, {"default/shop/db", 0}} {
		if _, err := p.client.DialStream(context.Background(), "h-srv", bad.id, bad.port); !errors.Is(err, ErrForbidden) {
			t.Errorf("%s port %d: err %v, want ErrForbidden", bad.id, bad.port, err)
		}
	}
	if n := p.dialer.dials.Load(); n != 0 {
		t.Fatalf("a refused stream dialled the workload (%d dials)", n)
	}
	for _, good := range []struct {
		id   string
		port int
	}{{shopWeb, 0}, {"default/shop/db", 5432}} {
		conn, err := p.client.DialStream(context.Background(), "h-srv", good.id, good.port)
		if err != nil {
			t.Fatalf("%s port %d: %v", good.id, good.port, err)
		}
		conn.Close()
	}
}

// A stream whose workload or port leaves the peer's reach ends at once, the
// peer staying valid and its other streams open (issue 24, finding 7: a
// mesh stream stayed open after its workload left the peer's reach).
func TestAStreamEndsWhenItsWorkloadOrPortLeavesThePeersReach(t *testing.T) {
	p := newPair(t, shopWeb, "default/shop/db")
	p.dialer.add(t, shopWeb, echo)
	p.dialer.add(t, "default/shop/db", echo)
	open := func(id string, port int) net.Conn {
		t.Helper()
		conn, err := p.client.DialStream(context.Background(), "h-srv", id, port)
		if err != nil {
			t.Fatalf("%s port %d: %v", id, port, err)
		}
		t.Cleanup(func() { conn.Close() })
		roundTrip(t, conn)
		return conn
	}
	web, dbTCP, dbHTTP := open(shopWeb, testTCPPort), open("default/shop/db", testTCPPort), open("default/shop/db", 0)

	// web leaves the reach; db keeps HTTP but loses its TCP port.
	peers := slices.Clone(p.peers)
	peers[1].Reaches = []string{"default/shop/db"}
	peers[1].Streams = []contract.Reach{{Workload: "default/shop/db", Ports: []int{0}}}
	start := time.Now()
	p.server.SetPeers(peers)
	for name, conn := range map[string]net.Conn{"web's stream": web, "db's TCP stream": dbTCP} {
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Read(make([]byte, 1)); err == nil || isTimeout(err) || errors.Is(err, io.EOF) {
			t.Errorf("%s, read after it left the reach: %v, want the stream reset", name, err)
		}
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the streams ended %v after the change", took)
	}
	roundTrip(t, dbHTTP) // still in reach: untouched
	if _, err := p.client.DialStream(context.Background(), "h-srv", shopWeb, testTCPPort); !errors.Is(err, ErrForbidden) {
		t.Fatalf("a new stream to web: %v, want ErrForbidden", err)
	}
}

// roundTrip sends a byte on an echo stream and reads it back.
func roundTrip(t *testing.T, conn net.Conn) {
	t.Helper()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	defer conn.SetDeadline(time.Time{})
	if _, err := conn.Write([]byte("x")); err != nil {
		t.Fatalf("write: %v", err)
	}
	if _, err := io.ReadFull(conn, make([]byte, 1)); err != nil {
		t.Fatalf("read: %v", err)
	}
}

func TestNoHealthyReplicaIsUnavailable(t *testing.T) {
	p := newPair(t, shopWeb) // the dialer knows no replica
	if _, err := p.dial(t, shopWeb); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err %v, want ErrUnavailable", err)
	}
}

// A host removed from the valid set loses its open streams at once, and
// cannot open new ones.
func TestRemovedHostIsCutOffAtOnce(t *testing.T) {
	p := newPair(t, shopWeb)
	p.dialer.add(t, shopWeb, echo)
	conn, err := p.dial(t, shopWeb)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(conn, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	p.server.SetPeers(p.peers[:1]) // h-cli removed, on the server's side only
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("read after removal: %v, want the stream cut", err)
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("the stream ended %v after the removal", took)
	}
	if _, err := p.dial(t, shopWeb); err == nil {
		t.Fatal("a removed host opened a new stream")
	}
}

// The client's side too: a peer removed from its set is disconnected.
func TestClientDropsRemovedPeers(t *testing.T) {
	p := newPair(t, shopWeb)
	p.dialer.add(t, shopWeb, echo)
	conn, err := p.dial(t, shopWeb)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if !p.client.Alive("h-srv") {
		t.Fatal("no live connection after a stream")
	}
	p.client.SetPeers(p.peers[1:])
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("read after removal succeeded")
	}
	if p.client.Alive("h-srv") {
		t.Fatal("still alive after removal")
	}
	if _, err := p.dial(t, shopWeb); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("err %v, want ErrUnknownPeer", err)
	}
}

// freezer forwards TCP to target until frozen: then it keeps the sockets
// open and silently drops everything, as a host that died without a word.
type freezer struct {
	ln     net.Listener
	target string
	mu     sync.Mutex // guards frozen
	frozen bool
}

func newFreezer(t *testing.T, target string) *freezer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, target: target}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			t.Cleanup(func() { c.Close(); up.Close() })
			go f.pipe(up, c)
			go f.pipe(c, up)
		}
	}()
	return f
}

func (f *freezer) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		f.mu.Lock()
		frozen := f.frozen
		f.mu.Unlock()
		if !frozen {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
	}
}

func (f *freezer) freeze() { f.mu.Lock(); f.frozen = true; f.mu.Unlock() }

// A peer that stops answering (no FIN, no RST) is found dead by the
// keep-alive pings, KeepAlive + KeepAliveTimeout after its last frame
// (about two seconds with the defaults), and its streams end. The client
// pings at a quarter of the defaults, so the bound keeps a wide margin
// for a loaded machine and still fails long before the read's deadline.
func TestDeadPeerIsFoundByTheKeepAlivePings(t *testing.T) {
	p := newPair(t, shopWeb)
	p.dialer.add(t, shopWeb, echo)
	cfg := testConfig(t)
	cfg.KeepAlive, cfg.KeepAliveTimeout = DefaultConfig().KeepAlive/4, DefaultConfig().KeepAliveTimeout/4
	cli, err := NewClient(cfg, p.cluster.creds(t, "h-cli"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	p.client = cli
	f := newFreezer(t, p.ln.Addr().String())
	peers := append(p.peers[:0:0], p.peers...)
	peers[0].Addresses = []string{f.ln.Addr().String()}
	p.client.SetPeers(peers)

	conn, err := p.dial(t, shopWeb)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(conn, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	f.freeze()
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	took := time.Since(start)
	if err == nil || isTimeout(err) {
		t.Fatalf("read: %v, want the stream ended by the lost ping", err)
	}
	if nominal := cfg.KeepAlive + cfg.KeepAliveTimeout; took > 4*nominal {
		t.Errorf("dead peer found after %v, want about %v", took, nominal)
	}
	t.Logf("dead peer found after %v", took)
	// The stream ends before the connection is forgotten: wait for that.
	deadline := time.Now().Add(5 * time.Second)
	for p.client.Alive("h-srv") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if p.client.Alive("h-srv") {
		t.Fatal("the dead peer still counts as alive 5 s after its stream ended")
	}
}

func TestManyConcurrentStreamsShareOneConnection(t *testing.T) {
	p := newPair(t, shopWeb)
	p.dialer.add(t, shopWeb, echo)
	const streams = 200
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := p.dial(t, shopWeb)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			msg := fmt.Sprintf("stream %d says hello", i)
			if _, err := conn.Write([]byte(msg)); err != nil {
				errs <- err
				return
			}
			conn.(interface{ CloseWrite() error }).CloseWrite()
			got, err := io.ReadAll(conn)
			if err != nil || string(got) != msg {
				errs <- fmt.Errorf("stream %d: got %q, %v", i, got, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := p.ln.n.Load(); n != 1 {
		t.Errorf("%d connections for %d streams, want 1", n, streams)
	}
}

// A connection at the server's stream limit makes a new stream wait for a
// slot: it neither fails nor opens a second connection.
func TestAFullConnectionMakesTheCallerWait(t *testing.T) {
	p := newPair(t, shopWeb)
	p.dialer.add(t, shopWeb, echo)
	cfg := testConfig(t)
	cfg.MaxConcurrentStreams = 2
	srv, err := NewServer(cfg, p.cluster.creds(t, "h-srv"), p.dialer)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &countingListener{Listener: raw}
	if err := srv.Serve(ln); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) })
	peers := append(p.peers[:0:0], p.peers...)
	peers[0].Addresses = []string{ln.Addr().String()}
	srv.SetPeers(peers)
	p.client.SetPeers(peers)

	var open []net.Conn
	for range 2 {
		conn, err := p.dial(t, shopWeb)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		open = append(open, conn)
	}
	third := make(chan error, 1)
	go func() {
		conn, err := p.dial(t, shopWeb)
		if err == nil {
			conn.Close()
		}
		third <- err
	}()
	select {
	case err := <-third:
		t.Fatalf("a third stream on a connection of two: %v, want it to wait", err)
	case <-time.After(300 * time.Millisecond):
	}
	if !p.client.Alive("h-srv") {
		t.Fatal("a full connection counts as dead")
	}
	open[0].Close()
	select {
	case err := <-third:
		if err != nil {
			t.Fatalf("the waiting stream: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting stream did not get the freed slot")
	}
	if n := ln.n.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

func TestLargeTransferArrivesIntact(t *testing.T) {
	p := newPair(t, shopWeb)
	p.dialer.add(t, shopWeb, echo)
	conn, err := p.dial(t, shopWeb)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const size = 32 << 20
	want := sha256.New()
	got := sha256.New()
	done := make(chan error, 1)
	go func() {
		n, err := io.Copy(got, conn)
		if err == nil && n != size {
			err = fmt.Errorf("read %d bytes, want %d", n, size)
		}
		done <- err
	}()
	if _, err := io.Copy(conn, io.TeeReader(io.LimitReader(rand.Reader, size), want)); err != nil {
		t.Fatal(err)
	}
	conn.(interface{ CloseWrite() error }).CloseWrite()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Fatal("the bytes that came back differ from those sent")
	}
}

// Peers' addresses are tried in order: one that refuses is passed over.
func TestAddressesAreTriedInOrder(t *testing.T) {
	p := newPair(t, shopWeb)
	p.dialer.add(t, shopWeb, echo)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	peers := append(p.peers[:0:0], p.peers...)
	peers[0].Addresses = []string{deadAddr, p.ln.Addr().String()}
	p.client.SetPeers(peers)
	conn, err := p.dial(t, shopWeb)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()

	peers[0].Addresses = []string{deadAddr}
	p.client.SetPeers(peers)
	p.client.Close() // forget the live connection
	cli, err := NewClient(testConfig(t), p.cluster.creds(t, "h-cli"))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	cli.SetPeers(peers)
	start := time.Now()
	_, err = cli.DialWorkload(context.Background(), "h-srv", Workload{Namespace: "default", Project: "shop", Egg: "web"})
	if !errors.Is(err, ErrPeerUnreachable) {
		t.Fatalf("err %v, want ErrPeerUnreachable", err)
	}
	if time.Since(start) > time.Second {
		t.Errorf("a refused dial took %v", time.Since(start))
	}
}

func TestReadDeadline(t *testing.T) {
	p := newPair(t, shopWeb)
	p.dialer.add(t, shopWeb, echo)
	conn, err := p.dial(t, shopWeb)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := conn.Read(make([]byte, 1)); !isTimeout(err) {
		t.Fatalf("read past the deadline: %v", err)
	}
	// The stream is still good once the deadline is lifted.
	_ = conn.SetReadDeadline(time.Time{})
	if _, err := conn.Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "ok" {
		t.Fatalf("after the deadline: %q %v", buf, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestConfigValidate(t *testing.T) {
	defaults := func() Config {
		c := DefaultConfig()
		c.Logger = zaptest.NewLogger(t)
		return c
	}
	if err := defaults().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for name, edit := range map[string]func(*Config){
		"no address":           func(c *Config) { c.Addr = "" },
		"advertised no port":   func(c *Config) { c.Advertise = []string{"10.0.0.1"} },
		"advertised port 0":    func(c *Config) { c.Advertise = []string{"10.0.0.1:0"} },
		"slow keep-alive":      func(c *Config) { c.KeepAlive = 5 * time.Second },
		"no keep-alive":        func(c *Config) { c.KeepAlive = 0 },
		"long ping timeout":    func(c *Config) { c.KeepAliveTimeout = 3 * time.Second },
		"no dial timeout":      func(c *Config) { c.DialTimeout = 0 },
		"no handshake timeout": func(c *Config) { c.HandshakeTimeout = 0 },
		"no streams":           func(c *Config) { c.MaxConcurrentStreams = 0 },
		"no logger":            func(c *Config) { c.Logger = nil },
	} {
		c := defaults()
		edit(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	both := defaults()
	both.Addr, both.DialTimeout = "", 0
	if err := both.Validate(); err == nil || !strings.Contains(err.Error(), "address") || !strings.Contains(err.Error(), "dial timeout") {
		t.Errorf("Validate does not join its errors: %v", err)
	}
	if addrs, err := DefaultAdvertise(DefaultPort); err != nil {
		t.Fatal(err)
	} else {
		for _, a := range addrs {
			host, port, _ := net.SplitHostPort(a)
			if ip := net.ParseIP(host); ip == nil || ip.IsLoopback() || port != "7702" {
				t.Errorf("advertised %s", a)
			}
		}
	}
}
