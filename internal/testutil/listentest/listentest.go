// Package listentest holds what tests of network code share: a listener that
// serves each connection it accepts, closed when the test ends.
package listentest

import (
	"net"
	"testing"
)

// Serve listens on network and address ("tcp", "127.0.0.1:0"; "unix", a
// path) and hands each connection it accepts to handle, on a goroutine of
// its own, until the test ends and the listener is closed.
func Serve(t testing.TB, network, address string, handle func(net.Conn)) net.Listener {
	t.Helper()
	ln, err := net.Listen(network, address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by the cleanup
			}
			go handle(c)
		}
	}()
	return ln
}

// FreeAddr returns a loopback address with a port nothing listens on: for
// a component that must be told its address before it listens (and that a
// test then checks is free again after the component closed).
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
