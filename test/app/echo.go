package main

import (
	"bufio"
	"context"
	"errors"
	"log"
	"net"
	"sync"
)

// serveEcho writes every line it receives back to its sender, until ctx is
// done. It exists for the ingress's TCP tests, which need a backend that shows
// which bytes went through.
func serveEcho(ctx context.Context, ln net.Listener, logger *log.Logger) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			echoLines(ctx, conn, logger)
		}()
	}
}

func echoLines(ctx context.Context, conn net.Conn, logger *log.Logger) {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		if _, err := conn.Write(append(sc.Bytes(), '\n')); err != nil {
			return
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
		logger.Printf("echo %s: %v", conn.RemoteAddr(), err)
	}
}
