// Command kv is the demo's stateful egg: a small key-value store over HTTP
// that keeps its data in a directory, the egg's volume. Its data outlives
// every container, so the demo's visit counter survives a roll of kv and a
// restart of the whole demo.
//
// Endpoints:
//
//	GET  /kv/{key}       the value, or 404
//	PUT  /kv/{key}       set the value to the body (at most 1 MiB); 204
//	POST /kv/{key}/incr  add one to an integer value (missing = 0); the new value
//	GET  /healthz        200 once the data directory is usable
//
// Settings come from the environment: PORT (default 8081) and DATA_DIR
// (default /data).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// maxValue bounds a stored value: the demo keeps counters and short strings.
const maxValue = 1 << 20

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, os.Getenv, nil); err != nil {
		log.Printf("kv: %v", err)
		os.Exit(1)
	}
}

// run serves until ctx ends, then lets requests in flight finish. ready, if
// set, is given the address it listens on.
func run(ctx context.Context, getenv func(string) string, ready func(net.Addr)) error {
	port := getenv("PORT")
	if port == "" {
		port = "8081"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("PORT=%q: want a port number", port)
	}
	dir := getenv("DATA_DIR")
	if dir == "" {
		dir = "/data"
	}
	store, err := Open(dir)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", ":"+port)
	if err != nil {
		return err
	}
	log.Printf("kv: serving on %s, data in %s", ln.Addr(), dir)
	if ready != nil {
		ready(ln.Addr())
	}
	srv := &http.Server{Handler: newHandler(store), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Printf("kv: stopped")
	return nil
}

// newHandler returns the store's HTTP API.
func newHandler(store *Store) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /kv/{key}", func(w http.ResponseWriter, r *http.Request) {
		v, err := store.Get(r.PathValue("key"))
		if err != nil {
			fail(w, err)
			return
		}
		_, _ = io.WriteString(w, v)
	})
	mux.HandleFunc("PUT /kv/{key}", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxValue))
		if err != nil {
			http.Error(w, "value too large (at most 1 MiB)", http.StatusRequestEntityTooLarge)
			return
		}
		if err := store.Put(r.PathValue("key"), string(body)); err != nil {
			fail(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /kv/{key}/incr", func(w http.ResponseWriter, r *http.Request) {
		n, err := store.Incr(r.PathValue("key"))
		if err != nil {
			fail(w, err)
			return
		}
		fmt.Fprintf(w, "%d\n", n)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if _, err := os.Stat(store.dir); err != nil {
			http.Error(w, "data directory unusable", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}

// fail answers with the status an error deserves.
func fail(w http.ResponseWriter, err error) {
	var invalid *InvalidError
	switch {
	case errors.Is(err, ErrNotFound):
		http.Error(w, err.Error(), http.StatusNotFound)
	case errors.As(err, &invalid):
		http.Error(w, err.Error(), http.StatusBadRequest)
	default:
		log.Printf("kv: %v", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
	}
}
