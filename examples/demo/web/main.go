// Command web is the demo's front end: each answer says which replica served
// it, which version it runs, and how many visits kv has counted so far. Ask
// it a few times through the ingress and the replica changes while the count
// goes on; apply a new version and watch the answers roll over.
//
// Endpoints: GET / (the page, plain text), GET /version, GET /healthz.
//
// Settings come from the environment: PORT (default 8080), VERSION (shown
// as it is), KV_URL (the kv egg's base URL, http://host:port; without it the
// page says the counter is unavailable) and HOSTNAME (the replica's name;
// Docker sets it to the container's short ID).
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, os.Getenv, nil); err != nil {
		log.Printf("web: %v", err)
		os.Exit(1)
	}
}

// config is the app's settings, read from its environment.
type config struct {
	Port    int
	Version string
	KVURL   string
	Replica string
}

func configFromEnv(getenv func(string) string) (config, error) {
	cfg := config{Port: 8080, Version: getenv("VERSION"), KVURL: strings.TrimRight(getenv("KV_URL"), "/"), Replica: getenv("HOSTNAME")}
	if p := getenv("PORT"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 65535 {
			return config{}, fmt.Errorf("PORT=%q: want a port number", p)
		}
		cfg.Port = n
	}
	if cfg.Version == "" {
		cfg.Version = "unknown"
	}
	if cfg.Replica == "" {
		cfg.Replica, _ = os.Hostname()
	}
	return cfg, nil
}

// run serves until ctx ends, then lets requests in flight finish. ready, if
// set, is given the address it listens on.
func run(ctx context.Context, getenv func(string) string, ready func(net.Addr)) error {
	cfg, err := configFromEnv(getenv)
	if err != nil {
		return err
	}
	var counter Counter
	if cfg.KVURL != "" {
		counter = &kvCounter{base: cfg.KVURL, client: &http.Client{Timeout: 2 * time.Second}}
	}
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(cfg.Port))
	if err != nil {
		return err
	}
	log.Printf("web: version %s serving on %s (kv: %q)", cfg.Version, ln.Addr(), cfg.KVURL)
	if ready != nil {
		ready(ln.Addr())
	}
	srv := &http.Server{Handler: newHandler(cfg, counter), ReadHeaderTimeout: 10 * time.Second}
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
	log.Printf("web: stopped")
	return nil
}

// Counter counts visits. The page works without one: a missing or failing
// counter makes the count "unavailable", not the page an error, so that kv
// being rolled never takes the front end down.
type Counter interface {
	Incr(ctx context.Context, key string) (int64, error)
}

// newHandler returns the app's pages; counter may be nil.
func newHandler(cfg config, counter Counter) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		visits := "unavailable (no KV_URL)"
		if counter != nil {
			n, err := counter.Incr(r.Context(), "visits")
			if err != nil {
				log.Printf("web: count the visit: %v", err)
				visits = "unavailable (kv does not answer)"
			} else {
				visits = strconv.FormatInt(n, 10)
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "Hello from Hatchery!\nreplica: %s\nversion: %s\nvisits: %s\n", cfg.Replica, cfg.Version, visits)
	})
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, cfg.Version)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}

// kvCounter counts with the kv egg's POST /kv/{key}/incr.
type kvCounter struct {
	base   string
	client *http.Client
}

func (k *kvCounter) Incr(ctx context.Context, key string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, k.base+"/kv/"+key+"/incr", nil)
	if err != nil {
		return 0, err
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("kv: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if err != nil {
		return 0, fmt.Errorf("kv: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("kv: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(body)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("kv answered %q, not a count", body)
	}
	return n, nil
}
