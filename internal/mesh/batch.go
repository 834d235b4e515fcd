package mesh

import (
	"bufio"
	"crypto/tls"
	"net"
	"sync"
)

// rawBufferSize is how much the TCP connection under TLS reads at once, and
// the most one batched write holds before it goes out.
const rawBufferSize = 256 << 10

// batchedConn is the TCP connection under a mesh TLS connection. It reads
// through a buffer, so one system call brings several TLS records; and while
// a batch is open (one Write of the TLS connection above, see batchedTLS),
// it gathers the records that write makes and sends them in one system call
// instead of one each. A large HTTP/2 DATA frame is three or four TLS
// records: this roughly halves the system calls of a stream on loopback.
type batchedConn struct {
	net.Conn
	r *bufio.Reader

	mu       sync.Mutex // guards batching and buf; held across the write
	batching bool
	buf      []byte
}

func newBatchedConn(c net.Conn) *batchedConn {
	return &batchedConn{Conn: c, r: bufio.NewReaderSize(c, rawBufferSize)}
}

func (c *batchedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *batchedConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.batching && len(c.buf)+len(p) <= rawBufferSize {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	if err := c.flushLocked(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

func (c *batchedConn) begin() {
	c.mu.Lock()
	c.batching = true
	c.mu.Unlock()
}

// end closes the batch and sends what it gathered. Writes made after it go
// straight out: nothing TLS writes by itself (alerts, tickets) waits.
func (c *batchedConn) end() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batching = false
	return c.flushLocked()
}

func (c *batchedConn) flushLocked() error {
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.buf)
	c.buf = c.buf[:0]
	return err
}

// batchedTLS is a TLS connection over a batchedConn whose every Write is one
// batch.
type batchedTLS struct {
	*tls.Conn
	raw *batchedConn
}

func (c *batchedTLS) Write(p []byte) (int, error) {
	c.raw.begin()
	n, err := c.Conn.Write(p)
	if ferr := c.raw.end(); err == nil && ferr != nil {
		return 0, ferr
	}
	return n, err
}
