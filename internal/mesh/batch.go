package mesh

import (
	"bufio"
	"net"
)

// rawReadBuffer is how much the TCP connection under TLS reads at once.
const rawReadBuffer = 256 << 10

// bufferedConn is the TCP connection under a mesh TLS connection. It reads
// through a buffer, so that one system call brings several TLS records
// (crypto/tls reads about one record per call otherwise): a large HTTP/2
// DATA frame is several records.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func newBufferedConn(c net.Conn) *bufferedConn {
	return &bufferedConn{Conn: c, r: bufio.NewReaderSize(c, rawReadBuffer)}
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
