package mesh

import (
	"context"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// streamConn is one stream as a net.Conn: writes go into the request body,
// reads come from the response body.
//
// Reads honour deadlines fully (a reader goroutine hands over what the
// stream brings). A write deadline that passes while a write is blocked
// ends the stream's write side, since a write into the stream cannot be
// taken back; net/http's own proxies never set one.
type streamConn struct {
	pw     *io.PipeWriter
	body   io.ReadCloser
	cancel context.CancelFunc
	local  net.Addr
	remote net.Addr

	chunks  chan chunk  // from the reader goroutine
	free    chan []byte // buffers back to it
	rmu     sync.Mutex  // serializes Reads; guards left, held, readErr
	left    []byte      // what the last chunk had beyond the caller's buffer
	held    []byte      // the buffer left points into, to give back
	readErr error

	rdl, wdl  deadline
	closeOnce sync.Once
	done      chan struct{} // closed by Close: stops the reader goroutine
}

type chunk struct {
	buf []byte
	n   int
	err error
}

func newStreamConn(pw *io.PipeWriter, body io.ReadCloser, cancel context.CancelFunc, local, remote net.Addr) *streamConn {
	c := &streamConn{pw: pw, body: body, cancel: cancel, local: local, remote: remote,
		chunks: make(chan chunk), free: make(chan []byte, 2), rdl: makeDeadline(), wdl: makeDeadline(),
		done: make(chan struct{})}
	c.free <- make([]byte, copyBuffer)
	c.free <- make([]byte, copyBuffer)
	go c.readLoop()
	return c
}

func (c *streamConn) readLoop() {
	for {
		var buf []byte
		select {
		case buf = <-c.free:
		case <-c.done:
			return
		}
		n, err := c.body.Read(buf)
		select {
		case c.chunks <- chunk{buf: buf, n: n, err: err}:
		case <-c.done:
			return
		}
		if err != nil {
			return
		}
	}
}

func (c *streamConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for {
		if len(c.left) > 0 {
			n := copy(p, c.left)
			c.left = c.left[n:]
			if len(c.left) == 0 {
				c.free <- c.held
				c.held = nil
			}
			return n, nil
		}
		if c.readErr != nil {
			return 0, c.readErr
		}
		select {
		case <-c.done:
			return 0, net.ErrClosed
		case <-c.rdl.wait():
			return 0, os.ErrDeadlineExceeded
		case ch := <-c.chunks:
			if ch.err != nil {
				c.readErr = ch.err
			}
			if ch.n == 0 {
				c.free <- ch.buf
				continue
			}
			c.left, c.held = ch.buf[:ch.n], ch.buf
		}
	}
}

func (c *streamConn) Write(p []byte) (int, error) {
	select {
	case <-c.done:
		return 0, net.ErrClosed
	default:
	}
	dl := c.wdl.wait()
	if dl == nil { // no deadline: the plain write
		return c.pw.Write(p)
	}
	select {
	case <-dl:
		return 0, os.ErrDeadlineExceeded
	default:
	}
	type result struct {
		n   int
		err error
	}
	res := make(chan result, 1)
	go func() {
		n, err := c.pw.Write(p)
		res <- result{n, err}
	}()
	select {
	case r := <-res:
		return r.n, r.err
	case <-dl:
		_ = c.pw.CloseWithError(os.ErrDeadlineExceeded)
		r := <-res
		return r.n, os.ErrDeadlineExceeded
	}
}

// CloseWrite ends the stream's write side: the workload reads EOF, and can
// still answer.
func (c *streamConn) CloseWrite() error { return c.pw.Close() }

// Close ends the stream both ways.
func (c *streamConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.done)
		_ = c.pw.CloseWithError(net.ErrClosed)
		c.cancel() // resets the stream if it is still open
		_ = c.body.Close()
	})
	return nil
}

func (c *streamConn) LocalAddr() net.Addr  { return c.local }
func (c *streamConn) RemoteAddr() net.Addr { return c.remote }

func (c *streamConn) SetDeadline(t time.Time) error {
	c.rdl.set(t)
	c.wdl.set(t)
	return nil
}
func (c *streamConn) SetReadDeadline(t time.Time) error  { c.rdl.set(t); return nil }
func (c *streamConn) SetWriteDeadline(t time.Time) error { c.wdl.set(t); return nil }

// deadline is a settable deadline whose channel is closed when it passes,
// as net.Pipe keeps its own.
type deadline struct {
	mu     sync.Mutex // guards timer, cancel and set
	timer  *time.Timer
	cancel chan struct{} // closed when the deadline passes
	isSet  bool
}

func makeDeadline() deadline { return deadline{cancel: make(chan struct{})} }

func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.cancel // the timer fired: wait for it to have closed cancel
	}
	d.timer = nil
	closed := isClosed(d.cancel)
	d.isSet = !t.IsZero()
	if !d.isSet {
		if closed {
			d.cancel = make(chan struct{})
		}
		return
	}
	if dur := time.Until(t); dur > 0 {
		if closed {
			d.cancel = make(chan struct{})
		}
		cancel := d.cancel
		d.timer = time.AfterFunc(dur, func() { close(cancel) })
		return
	}
	if !closed {
		close(d.cancel)
	}
}

// wait returns the channel closed at the deadline, nil when none is set.
func (d *deadline) wait() chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.isSet {
		return nil
	}
	return d.cancel
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
