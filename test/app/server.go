package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// app serves the HTTP endpoints. Every endpoint exists so that a test on the
// real Docker Engine can observe, from inside the container, something the
// adapter was asked to set up: health, the spec's version, a volume, a secret
// file, an environment variable, the user.
type app struct {
	cfg     Config
	started time.Time
	now     func() time.Time
	getenv  func(string) string
	count   *counter // nil without APP_COUNT_FILE
}

func newApp(cfg Config, now func() time.Time, getenv func(string) string) *app {
	a := &app{cfg: cfg, started: now(), now: now, getenv: getenv}
	if cfg.CountFile != "" {
		a.count = newCounter(cfg.CountFile)
	}
	return a
}

func (a *app) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", a.healthz)
	mux.HandleFunc("GET /version", a.version)
	mux.HandleFunc("POST /hit", a.hit)
	mux.HandleFunc("GET /count", a.countValue)
	mux.HandleFunc("GET /env/{name}", a.env)
	mux.HandleFunc("GET /file", a.readFile)
	mux.HandleFunc("PUT /file", a.writeFile)
	mux.HandleFunc("GET /whoami", a.whoami)
	mux.HandleFunc("GET /dns/{name}", a.dns)
	return mux
}

// healthz answers 200 until APP_UNHEALTHY_AFTER has passed, then 503.
func (a *app) healthz(w http.ResponseWriter, _ *http.Request) {
	if a.cfg.UnhealthyAfter > 0 && a.now().Sub(a.started) >= a.cfg.UnhealthyAfter {
		http.Error(w, "unhealthy, as APP_UNHEALTHY_AFTER asked", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

func (a *app) version(w http.ResponseWriter, _ *http.Request) {
	fmt.Fprintln(w, a.cfg.Version)
}

// hit counts one request in the count file and answers the new count.
func (a *app) hit(w http.ResponseWriter, _ *http.Request) {
	if a.count == nil {
		http.Error(w, "no APP_COUNT_FILE set", http.StatusNotFound)
		return
	}
	n, err := a.count.Add()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	fmt.Fprintln(w, n)
}

func (a *app) countValue(w http.ResponseWriter, _ *http.Request) {
	if a.count == nil {
		http.Error(w, "no APP_COUNT_FILE set", http.StatusNotFound)
		return
	}
	n, err := a.count.Value()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	fmt.Fprintln(w, n)
}

// env answers one environment variable's value, 404 if it is not set.
func (a *app) env(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	v := a.getenv(name)
	if v == "" {
		http.Error(w, name+" is not set", http.StatusNotFound)
		return
	}
	fmt.Fprint(w, v)
}

// readFile answers the content of ?path=, so a test can read a mounted secret
// or volume file in an image that has no shell to exec into.
func (a *app) readFile(w http.ResponseWriter, r *http.Request) {
	b, err := os.ReadFile(r.URL.Query().Get("path"))
	if err != nil {
		http.Error(w, err.Error(), fileErrorStatus(err))
		return
	}
	w.Write(b)
}

// writeFile writes the body to ?path=, so a test can show that a read-only
// root or mount refuses writes.
func (a *app) writeFile(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := os.WriteFile(r.URL.Query().Get("path"), body, 0o644); err != nil {
		http.Error(w, err.Error(), fileErrorStatus(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func fileErrorStatus(err error) int {
	switch {
	case os.IsNotExist(err):
		return http.StatusNotFound
	case os.IsPermission(err):
		return http.StatusForbidden
	default:
		return http.StatusInternalServerError // a read-only file system lands here (EROFS)
	}
}

// whoami answers "uid:gid" of the process.
func (a *app) whoami(w http.ResponseWriter, _ *http.Request) {
	fmt.Fprintln(w, strconv.Itoa(os.Getuid())+":"+strconv.Itoa(os.Getgid()))
}

// dns answers the addresses a name resolves to inside the container, one per
// line, so a test can check the aliases a container has on its networks.
func (a *app) dns(w http.ResponseWriter, r *http.Request) {
	addrs, err := net.DefaultResolver.LookupHost(r.Context(), r.PathValue("name"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	sort.Strings(addrs)
	fmt.Fprintln(w, strings.Join(addrs, "\n"))
}
