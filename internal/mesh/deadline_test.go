package mesh

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// stalled is a workload that accepts a stream and never reads it, so a
// writer towards it blocks once the stream's windows and buffers are full.
func stalled(t *testing.T) func(net.Conn) {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	return func(c net.Conn) {
		defer c.Close()
		<-done
	}
}

// writeUntilError writes into conn until a write fails, and returns that
// error; it fails the test if the writes still block after 10 s (a
// deadline ignored).
func writeUntilError(t *testing.T, conn net.Conn) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		buf := make([]byte, 64<<10)
		for {
			if _, err := conn.Write(buf); err != nil {
				errc <- err
				return
			}
		}
	}()
	select {
	case err := <-errc:
		return err
	case <-time.After(10 * time.Second):
		conn.Close() // ends the blocked write
		t.Fatal("a write towards a workload that never reads still blocks 10 s later: the deadline was ignored")
		return nil
	}
}

// A write blocked by a peer that does not read ends at its deadline with
// os.ErrDeadlineExceeded, as on any net.Conn, whether the deadline was set
// for writes alone or for both ways.
func TestABlockedWriteEndsAtItsDeadline(t *testing.T) {
	for name, set := range map[string]func(net.Conn, time.Time) error{
		"SetWriteDeadline": net.Conn.SetWriteDeadline,
		"SetDeadline":      net.Conn.SetDeadline,
	} {
		t.Run(name, func(t *testing.T) {
			p := newPair(t, shopWeb)
			p.dialer.add(t, shopWeb, stalled(t))
			conn, err := p.dial(t, shopWeb)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if err := set(conn, time.Now().Add(50*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			if err := writeUntilError(t, conn); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("blocked write: %v, want os.ErrDeadlineExceeded", err)
			}
			// A deadline already past refuses the next write at once.
			if _, err := conn.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("write past the deadline: %v, want os.ErrDeadlineExceeded", err)
			}
		})
	}
}
