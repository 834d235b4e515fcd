package ingress

import (
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

// syncPorts opens, re-points and closes listeners to match the table. Closing
// a listener leaves its open connections alone. The caller holds mu.
func (in *Ingress) syncPorts(t Table) error {
	want := make(map[int]*portTarget)
	for _, spec := range t.Eggs {
		for _, p := range spec.Ports {
			want[p.Published] = &portTarget{egg: in.eggs[spec.Name], port: p.Target}
		}
	}
	for port, pl := range in.ports {
		if want[port] == nil {
			pl.close()
			delete(in.ports, port)
			in.log.Info("published port closed", zap.Int("port", port))
		}
	}
	var errs []error
	errs = append(errs, in.syncSockets(t))
	for port, target := range want {
		if pl := in.ports[port]; pl != nil {
			pl.target.Store(target)
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(in.cfg.PublishAddr, strconv.Itoa(port)))
		if err != nil {
			errs = append(errs, fmt.Errorf("publish port %d for egg %q: %w", port, target.egg.name, err))
			continue
		}
		pl := &portListener{port: port, ln: ln}
		pl.target.Store(target)
		in.ports[port] = pl
		in.wg.Add(1)
		go in.acceptLoop(pl)
		in.log.Info("published port open", zap.Int("port", port), zap.String("egg", target.egg.name))
	}
	return errors.Join(errs...)
}

// syncSockets opens, re-points and closes the Unix sockets to match the
// table, as syncPorts does for ports. The caller holds mu.
func (in *Ingress) syncSockets(t Table) error {
	want := make(map[string]*portTarget)
	for _, spec := range t.Eggs {
		for _, so := range spec.Sockets {
			want[so.Path] = &portTarget{egg: in.eggs[spec.Name], port: so.Target}
		}
	}
	for path, pl := range in.sockets {
		if want[path] == nil {
			pl.close() // a Unix listener removes its socket file as it closes
			delete(in.sockets, path)
			in.log.Info("socket closed", zap.String("socket", path))
		}
	}
	var errs []error
	for path, target := range want {
		if pl := in.sockets[path]; pl != nil {
			pl.target.Store(target)
			continue
		}
		ln, err := listenUnix(path)
		if err != nil {
			errs = append(errs, fmt.Errorf("socket for egg %q: %w", target.egg.name, err))
			continue
		}
		pl := &portListener{path: path, ln: ln}
		pl.target.Store(target)
		in.sockets[path] = pl
		in.wg.Add(1)
		go in.acceptLoop(pl)
		in.log.Info("socket open", zap.String("socket", path), zap.String("egg", target.egg.name))
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

func (l *dirListener) Close() error {
	err := l.Listener.Close()
	_ = l.dir.Close() // a second Close says "already closed", as the listener's does
	return err
}

// acceptLoop hands each connection of a published port to its own goroutine
// until the listener is closed.
func (in *Ingress) acceptLoop(pl *portListener) {
	defer in.wg.Done()
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
			in.log.Warn("accept failed", pl.logField(), zap.Duration("retry_in", delay), zap.Error(err))
			select {
			case <-time.After(delay):
			case <-in.ctx.Done():
				return
			}
			continue
		}
		delay = 0
		in.wg.Add(1)
		go in.serveTCP(pl.target.Load(), c)
	}
}

// serveTCP forwards one connection to the least loaded backend, trying a
// second one if the first cannot be dialled (nothing was sent yet), and
// closes it when no backend can take it.
//
// A port without a target port (zero) uses local backends only: a stream to
// a peer must name the port.
func (in *Ingress) serveTCP(t *portTarget, client net.Conn) {
	defer in.wg.Done()
	var failed *backend
	for range 2 {
		b := t.egg.acquire(failed, in.now, t.port == 0)
		if b == nil {
			// A stateful egg between replicas: wait for the next one
			// (bounded by its hold window, or the ingress's Close).
			if b, _ = t.egg.await(in.ctx, failed, in.now, t.port == 0); b == nil {
				break
			}
		}
		up, err := in.dialTCP(b, t.port)
		if err != nil {
			failed = b
			b.release()
			continue
		}
		t.egg.m.tcpConns.Inc()
		in.pipe(b, client, up)
		b.release()
		return
	}
	t.egg.m.tcpRejected.Inc()
	_ = client.Close() // no backend: closing is the only answer TCP has
}

func (in *Ingress) dialTCP(b *backend, port int) (net.Conn, error) {
	if b.remote != nil {
		return in.dialRemote(in.ctx, b, port)
	}
	addr := b.addr
	if port != 0 {
		addr = net.JoinHostPort(b.ip, strconv.Itoa(port))
	}
	d := net.Dialer{Timeout: in.cfg.DialTimeout, KeepAlive: 30 * time.Second}
	c, err := d.DialContext(in.ctx, "tcp", addr)
	if err != nil && in.ctx.Err() == nil {
		in.eject(b, err)
	}
	return c, err
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
func (in *Ingress) pipe(b *backend, client, up net.Conn) {
	p := &tcpPipe{client: client, up: up}
	in.conns.add(p, b)
	defer in.conns.remove(p)
	defer p.Close()
	if b.isGone() || in.ctx.Err() != nil {
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
