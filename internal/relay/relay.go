// Package relay is the small process that stands for an egg on a consuming
// host's Docker network. It carries the egg's name (and aliases) as its Docker
// DNS alias, listens on the egg's port, and hands every connection it accepts
// to the host's agent through a Unix socket bind-mounted into its container.
// The agent then picks a healthy, undrained replica: on this host first, else
// on a peer through the mesh.
//
// Only the relay carries the egg's name: Docker's DNS answers with every
// container holding an alias, so a replica carrying it too would be reached
// directly part of the time, booting or draining, bypassing the agent's choice.
//
// The relay keeps no state and decides nothing: a connection it cannot pass
// on is closed, which is what a consumer would see of a refused connection.
package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Config is what one relay needs.
type Config struct {
	// Listen is the TCP address consumers connect to (":<egg port>").
	Listen string
	// Socket is the agent's Unix socket for this egg, inside the container.
	Socket string
	// DialTimeout bounds the wait for the agent to accept a connection.
	DialTimeout time.Duration
	Logger      *zap.Logger
}

// DefaultConfig returns a Config with the timeouts set; Listen, Socket and
// Logger are the caller's.
func DefaultConfig() Config {
	return Config{DialTimeout: 2 * time.Second}
}

// Validate reports every missing or bad setting.
func (c Config) Validate() error {
	var errs []error
	if c.Listen == "" {
		errs = append(errs, errors.New("relay: no listen address (--listen)"))
	}
	if c.Socket == "" {
		errs = append(errs, errors.New("relay: no agent socket (--socket)"))
	}
	if c.DialTimeout <= 0 {
		errs = append(errs, errors.New("relay: dial timeout must be positive"))
	}
	if c.Logger == nil {
		errs = append(errs, errors.New("relay: no logger"))
	}
	return errors.Join(errs...)
}

// Run listens on cfg.Listen and relays until ctx ends; connections still open
// then are closed.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	cfg.Logger.Info("relay listening", zap.String("addr", ln.Addr().String()), zap.String("socket", cfg.Socket))
	return Serve(ctx, ln, func(ctx context.Context) (net.Conn, error) {
		d := net.Dialer{Timeout: cfg.DialTimeout}
		return d.DialContext(ctx, "unix", cfg.Socket)
	}, cfg.Logger)
}

// Serve accepts connections on ln and pipes each to a connection from dial,
// until ctx ends. It closes ln, and every open pipe, before it returns.
func Serve(ctx context.Context, ln net.Listener, dial func(context.Context) (net.Conn, error), log *zap.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	go func() {
		<-ctx.Done()
		_ = ln.Close() // ends Accept; its only error is "already closed"
	}()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Out of file descriptors and the like: wait a little, as
			// net/http does, rather than spin.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			log.Warn("accept failed", zap.Duration("retry_in", delay), zap.Error(err))
			select {
			case <-time.After(delay):
			case <-ctx.Done():
			}
			continue
		}
		delay = 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			relayConn(ctx, c, dial, log)
		}()
	}
}

// relayConn passes one consumer connection to the agent, or closes it.
func relayConn(ctx context.Context, c net.Conn, dial func(context.Context) (net.Conn, error), log *zap.Logger) {
	up, err := dial(ctx)
	if err != nil {
		log.Warn("agent unreachable", zap.Error(err))
		_ = c.Close() // a refused connection is all TCP can say
		return
	}
	stop := context.AfterFunc(ctx, func() {
		_ = c.Close() // shutting down: cut both ends
		_ = up.Close()
	})
	defer stop()
	Pipe(c, up)
}

// Pipe copies a and b both ways until both directions end, passing
// half-closes on (a client that shuts down its writing side still gets its
// reply), then closes both. An error in one direction (a reset) ends both.
func Pipe(a, b net.Conn) {
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			_ = a.Close() // both ends are being cut; errors say nothing new
			_ = b.Close()
		})
	}
	defer closeBoth()
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyHalf(b, a, closeBoth)
	}()
	copyHalf(a, b, closeBoth)
	<-done
}

// copyHalf copies src to dst, then closes dst's writing side; on an error it
// ends the whole pipe.
func copyHalf(dst, src net.Conn, closeBoth func()) {
	if _, err := io.Copy(dst, src); err != nil {
		closeBoth()
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite() // the peer may be gone already; the pipe ends either way
		return
	}
	closeBoth()
}
