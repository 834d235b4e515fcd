package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
)

// ErrRunning is returned by a data plane started for a data directory that
// already has one.
var ErrRunning = errors.New("dataplane: another data plane serves this data directory")

// maxSocketPath is the longest path a Unix socket can be bound or dialled at
// directly (sockaddr_un's sun_path, its NUL included); a longer one goes
// through its directory's descriptor, as the ingress's relay sockets do.
const maxSocketPath = 107

// acquireLock takes the data directory's data-plane lock, held for the
// process's life (and handed on with the listeners).
func acquireLock(dataDir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dataDir, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data plane lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (%s)", ErrRunning, dataDir)
		}
		return nil, fmt.Errorf("data plane lock: %w", err)
	}
	return f, nil
}

// running reports whether a data plane holds dataDir's lock.
func running(dataDir string) bool {
	f, err := acquireLock(dataDir)
	if err != nil {
		return errors.Is(err, ErrRunning)
	}
	_ = f.Close() // releases the lock just taken
	return false
}

// listenSocket listens on the control socket, 0600, replacing one a
// killed data plane left (the caller holds the lock: no one serves it).
func listenSocket(dataDir string) (net.Listener, error) {
	path := SocketPath(dataDir)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	var ln net.Listener
	err := viaDir(path, func(p string) (err error) {
		ln, err = net.Listen("unix", p)
		return err
	})
	if err != nil {
		return nil, err
	}
	// Removed by the data plane that stops for good, not by one that
	// handed the socket on (nor through a /proc path gone by then).
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(path, 0o600); err != nil {
		_ = ln.Close()
		return nil, err
	}
	return ln, nil
}

// dialSocket connects to the control socket of dataDir.
func dialSocket(ctx context.Context, dataDir string) (*net.UnixConn, error) {
	var c net.Conn
	err := viaDir(SocketPath(dataDir), func(p string) (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, "unix", p)
		return err
	})
	if err != nil {
		return nil, err
	}
	return c.(*net.UnixConn), nil
}

// viaDir calls f with path, or with a short path through the descriptor of
// path's directory when path is too long for a socket address.
func viaDir(path string, f func(string) error) error {
	if len(path) <= maxSocketPath {
		return f(path)
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer dir.Close()
	return f(fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(path)))
}
