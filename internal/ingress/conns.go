package ingress

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// tracker holds the connections that outlive a request (TCP pipes, upgraded
// HTTP connections) so that Gone or Close can close them, and Close can wait
// for them.
type tracker struct {
	mu    sync.Mutex // guards conns and empty
	conns map[io.Closer]*backend
	empty chan struct{} // closed while conns is empty
}

func newTracker() *tracker {
	t := &tracker{conns: make(map[io.Closer]*backend), empty: make(chan struct{})}
	close(t.empty)
	return t
}

func (t *tracker) add(c io.Closer, b *backend) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.conns) == 0 {
		t.empty = make(chan struct{})
	}
	t.conns[c] = b
}

func (t *tracker) remove(c io.Closer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.conns[c]; !ok {
		return
	}
	delete(t.conns, c)
	if len(t.conns) == 0 {
		close(t.empty)
	}
}

// finisher is a tracked connection that can end gracefully by a deadline
// (a TCP pipe) rather than at once.
type finisher interface {
	finish(deadline time.Time)
}

// finishFor ends the connections to b: those that can pass on what b sent
// before it went do so until deadline, the others are closed at once.
func (t *tracker) finishFor(b *backend, deadline time.Time) {
	t.mu.Lock()
	var victims []io.Closer
	for c, owner := range t.conns {
		if owner == b {
			victims = append(victims, c)
		}
	}
	t.mu.Unlock()
	for _, c := range victims {
		if f, ok := c.(finisher); ok {
			f.finish(deadline)
			continue
		}
		_ = c.Close() // the connection is being cut; its error says nothing new
	}
}

// closeFor closes the connections to b, or all of them when b is nil.
func (t *tracker) closeFor(b *backend) {
	t.mu.Lock()
	var victims []io.Closer
	for c, owner := range t.conns {
		if b == nil || owner == b {
			victims = append(victims, c)
		}
	}
	t.mu.Unlock()
	for _, c := range victims {
		_ = c.Close() // the connection is being cut; its error says nothing new
	}
}

// whenEmpty returns a channel closed once no connection is tracked.
func (t *tracker) whenEmpty() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.empty
}

// trackedBody releases the backend's slot when the proxy closes the response
// body, which it always does, at the end of the copy.
type trackedBody struct {
	io.ReadCloser
	b      *backend
	cancel context.CancelFunc // ends the attempt's context, once read
	closed atomic.Bool
}

func (t *trackedBody) Close() error {
	err := t.ReadCloser.Close()
	if t.closed.CompareAndSwap(false, true) {
		t.cancel()
		t.b.releaseHTTP()
	}
	return err
}

// upgradedBody is the body of a 101 response: the backend connection itself,
// which httputil.ReverseProxy needs writable. It lives in the tracker until
// closed.
type upgradedBody struct {
	trackedBody
	w       io.Writer
	tracker *tracker
}

func (u *upgradedBody) Write(p []byte) (int, error) { return u.w.Write(p) }

func (u *upgradedBody) Close() error {
	u.tracker.remove(u)
	return u.trackedBody.Close()
}
