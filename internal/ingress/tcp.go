package ingress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// published are the listeners of the table's published ports and relay
// sockets; each connection they accept goes to its target egg. The maps
// are guarded by Ingress.mu; wg counts the accept loops and the
// connections they serve, which Close waits for.
type published struct {
	cfg     Config          // its PublishAddr and Listeners
	life    context.Context // ended by Close: ends an accept loop's back-off
	log     *zap.Logger
	ports   map[int]*portListener
	sockets map[string]*portListener // by path
	wg      sync.WaitGroup
}

func newPublished(cfg Config, life context.Context, log *zap.Logger) *published {
	return &published{cfg: cfg, life: life, log: log,
		ports: make(map[int]*portListener), sockets: make(map[string]*portListener)}
}

// portListener serves one published port or socket. Its target can change
// under it (Update re-points the port) without closing the listener.
type portListener struct {
	port   int    // the published port; zero for a socket
	path   string // the socket's path; empty for a port
	ln     net.Listener
	target atomic.Pointer[portTarget]
}

// logField names the listener in logs.
func (pl *portListener) logField() zap.Field {
	if pl.path != "" {
		return zap.String("socket", pl.path)
	}
	return zap.Int("port", pl.port)
}

// portTarget is where a published port's connections go.
type portTarget struct {
	egg  *egg
	port int // the port inside the container; zero means the backend's Addr port
}

func (pl *portListener) close() {
	_ = pl.ln.Close() // ends the accept loop; its only error is "already closed"
}

// sync opens, re-points and closes listeners to match the table, whose
// eggs by name are eggs. Closing a listener leaves its open connections
// alone. The caller holds Ingress.mu.
func (p *published) sync(t Table, eggs map[string]*egg) error {
	return errors.Join(p.syncSockets(t, eggs), p.syncPorts(t, eggs))
}

// syncPorts is sync for the published ports.
func (p *published) syncPorts(t Table, eggs map[string]*egg) error {
	want := make(map[int]*portTarget)
	for _, spec := range t.Eggs {
		for _, pp := range spec.Ports {
			want[pp.Published] = &portTarget{egg: eggs[spec.Name], port: pp.Target}
		}
	}
	for port, pl := range p.ports {
		if want[port] == nil {
			pl.close()
			delete(p.ports, port)
			p.log.Info("published port closed", zap.Int("port", port))
		}
	}
	var errs []error
	for port, target := range want {
		if pl := p.ports[port]; pl != nil {
			pl.target.Store(target)
			continue
		}
		ln, err := p.cfg.listenTCP(net.JoinHostPort(p.cfg.PublishAddr, strconv.Itoa(port)))
		if err != nil {
			errs = append(errs, fmt.Errorf("publish port %d for egg %q: %w", port, target.egg.name, err))
			continue
		}
		pl := &portListener{port: port, ln: ln}
		pl.target.Store(target)
		p.ports[port] = pl
		p.wg.Add(1)
		go p.acceptLoop(pl)
		p.log.Info("published port open", zap.Int("port", port), zap.String("egg", target.egg.name))
	}
	return errors.Join(errs...)
}

// syncSockets is sync for the relay sockets.
func (p *published) syncSockets(t Table, eggs map[string]*egg) error {
	want := make(map[string]*portTarget)
	for _, spec := range t.Eggs {
		for _, so := range spec.Sockets {
			want[so.Path] = &portTarget{egg: eggs[spec.Name], port: so.Target}
		}
	}
	for path, pl := range p.sockets {
		if want[path] == nil {
			pl.close() // a Unix listener removes its socket file as it closes
			delete(p.sockets, path)
			p.log.Info("socket closed", zap.String("socket", path))
		}
	}
	var errs []error
	for path, target := range want {
		if pl := p.sockets[path]; pl != nil {
			pl.target.Store(target)
			continue
		}
		ln, err := p.cfg.listen("unix", path, func() (net.Listener, error) { return listenUnix(path) })
		if err != nil {
			errs = append(errs, fmt.Errorf("socket for egg %q: %w", target.egg.name, err))
			continue
		}
		pl := &portListener{path: path, ln: ln}
		pl.target.Store(target)
		p.sockets[path] = pl
		p.wg.Add(1)
		go p.acceptLoop(pl)
		p.log.Info("socket open", zap.String("socket", path), zap.String("egg", target.egg.name))
	}
	return errors.Join(errs...)
}

// maxSocketPath is the longest path a Unix socket can be bound at directly:
// sockaddr_un's sun_path holds 108 bytes, the final NUL included.
const maxSocketPath = 107

// listenUnix listens on a Unix socket at path, making its directory and
// replacing a socket left there by an earlier run (nothing else: a file
// that is not a socket is an error). A path longer than a socket address
// may be (a data directory deep in a project's tree) is bound through its
// directory's descriptor instead: see dirListener.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	if len(path) <= maxSocketPath {
		return net.Listen("unix", path)
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(path)))
	if err != nil {
		_ = dir.Close()
		return nil, fmt.Errorf("listen unix %s: %w", path, err)
	}
	return &dirListener{Listener: ln, dir: dir}, nil
}

// dirListener is a Unix listener bound as /proc/self/fd/<dir>/<name>, a
// short path that Linux resolves through the open directory to the socket's
// real place. The directory stays open while the listener lives, so that
// closing the listener removes the socket file by that same path, and only
// then is the directory closed (its descriptor number may be reused after).
type dirListener struct {
	net.Listener
	dir *os.File
}

// File and SetUnlinkOnClose are the Unix listener's, so that the data plane
// can hand the socket on (see Config.Listeners).
func (l *dirListener) File() (*os.File, error) { return l.Listener.(*net.UnixListener).File() }

func (l *dirListener) SetUnlinkOnClose(unlink bool) {
	l.Listener.(*net.UnixListener).SetUnlinkOnClose(unlink)
}

func (l *dirListener) Close() error {
	err := l.Listener.Close()
	_ = l.dir.Close() // a second Close says "already closed", as the listener's does
	return err
}

// acceptLoop hands each connection of a published port to its own goroutine
// until the listener is closed.
func (p *published) acceptLoop(pl *portListener) {
	defer p.wg.Done()
	var delay time.Duration
	for {
		c, err := pl.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: wait a little, as
			// net/http does, rather than spin.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			p.log.Warn("accept failed", pl.logField(), zap.Duration("retry_in", delay), zap.Error(err))
			select {
			case <-time.After(delay):
			case <-p.life.Done():
				return
			}
			continue
		}
		delay = 0
		target := pl.target.Load()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			target.serve(c)
		}()
	}
}

// close closes every listener; their open connections carry on. The caller
// holds Ingress.mu.
func (p *published) close() {
	for _, pl := range p.ports {
		pl.close()
	}
	for _, pl := range p.sockets {
		pl.close()
	}
	p.ports, p.sockets = nil, nil
}

// serve forwards one connection to the least loaded backend, trying a
// second one if the first cannot be dialled (nothing was sent yet), and
// closes it when no backend can take it.
//
// A port without a target port (zero) uses local backends only: a stream to
// a peer must name the port.
func (t *portTarget) serve(client net.Conn) {
	e := t.egg
	var failed *backend
	for range 2 {
		b := e.acquire(failed, unixNano, t.port == 0)
		if b == nil {
			// A stateful egg between replicas: wait for the next one
			// (bounded by its hold window, or the ingress's Close).
			if b, _ = e.await(e.up.life, failed, unixNano, t.port == 0); b == nil {
				break
			}
		}
		up, err := b.dialTCP(e.up.life, t.port)
		if err != nil {
			failed = b
			b.release()
			continue
		}
		e.m.tcpConns.Inc()
		pipe(b, client, up)
		b.release()
		return
	}
	e.m.tcpRejected.Inc()
	_ = client.Close() // no backend: closing is the only answer TCP has
}

// tcpPipe is a proxied connection pair; closing it closes both ends.
type tcpPipe struct {
	client, up net.Conn
	once       sync.Once
}

func (p *tcpPipe) Close() error {
	p.once.Do(func() {
		_ = p.client.Close() // both ends are being cut; errors say nothing new
		_ = p.up.Close()
	})
	return nil
}

// finish ends the pipe of a backend that is gone by the deadline, without
// losing what the backend sent before it went: bytes still on their way
// (in the kernel's buffers or the copy's) are passed on, and so is the end
// of the stream if the backend closed it, as when an HTTP server closes a
// keep-alive connection after its last response; whatever is still open at
// the deadline is cut. Closing at once would throw that response away and
// have the client fail the request, or replay it.
func (p *tcpPipe) finish(deadline time.Time) {
	_ = p.up.SetDeadline(deadline) // a closed conn refuses it: then the pipe has ended anyway
	_ = p.client.SetDeadline(deadline)
}

// pipe copies both ways until both directions end, passing half-closes on,
// so a client that shuts down its writing side still gets the reply.
func pipe(b *backend, client, up net.Conn) {
	p := &tcpPipe{client: client, up: up}
	conns := b.egg.up.conns
	conns.add(p, b)
	defer conns.remove(p)
	defer p.Close()
	if b.isGone() || b.egg.up.life.Err() != nil {
		return // Gone or Close ran while we dialled: they could not see this pipe
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyHalf(p, up, client)
	}()
	copyHalf(p, client, up)
	<-done
}

// copyHalf copies src to dst, then closes dst's writing side; on an error
// (a reset, a forced close) it closes the whole pipe so the other half ends
// too.
func copyHalf(p *tcpPipe, dst, src net.Conn) {
	if _, err := io.Copy(dst, src); err != nil {
		_ = p.Close()
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite() // the peer may already be gone; the pipe ends either way
		return
	}
	_ = p.Close()
}
