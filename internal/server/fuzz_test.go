package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/store/sqlite"
)

// The fuzz targets send arbitrary bodies, path segments and queries to a
// real server (SQLite in a temporary directory, the real token checks),
// through its ServeHTTP, one target per family of routes. Any 5xx or panic
// fails them: the API answers what a caller got wrong with a 4xx naming it.
// One server serves all of a target's inputs (a fresh one per input runs a
// hundred times fewer), so after each input the target checks that the
// input left the server the next one meets as it found it: the admin's and
// the host's tokens still authenticate and the host is still joined
// (unchanged). Seeds are in testdata/fuzz/<target>; `make fuzz-ci` runs
// each for 10s, `make fuzz` for long.

// fuzzServer is a started server and the tokens of each audience.
type fuzzServer struct {
	h                     http.Handler
	admin, join, host, id string
}

func newFuzzServer(f *testing.F) *fuzzServer {
	f.Helper()
	fs, _, _ := startFuzzServer(f)
	var jt api.JoinToken
	fs.setup(f, fs.admin, "POST", "/api/v1/join-tokens", `{"uses":1000,"ttl":"24h"}`, &jt)
	fs.join = jt.Token
	var joined api.JoinResponse
	fs.setup(f, fs.join, "POST", "/api/v1/join", `{"name":"fuzz-host"}`, &joined)
	fs.host, fs.id = joined.Token, joined.HostID
	return fs
}

// startFuzzServer starts a server on a new SQLite store with real token
// authentication, answering long-polls at once and never rate limiting:
// the fuzz targets' server, with its wiring and store.
func startFuzzServer(f *testing.F) (*fuzzServer, Built, *sqlite.Store) {
	f.Helper()
	ts := newTokenStore(f, zap.NewNop(), time.Now())
	cfg := DefaultConfig()
	cfg.MaxWait, cfg.AuthFailureBurst = 10*time.Millisecond, 1<<30
	b := BuildTestServer(f, cfg, TestWiring{Dir: ts.dir, Store: ts.st, Auth: NewTokenAuth(ts.hash, ts.st, time.Now)})
	if err := b.Server.Start(f.Context()); err != nil {
		f.Fatal(err)
	}
	return &fuzzServer{h: b.Server.Handler(), admin: ts.admin}, b, ts.st
}

// setup sends a request the fuzz target needs to have been made, and decodes its answer.
func (fs *fuzzServer) setup(f *testing.F, token, method, path, body string, v any) {
	f.Helper()
	rec := fs.serve(token, method, path, []byte(body))
	if rec.Code/100 != 2 {
		f.Fatalf("%s %s: %d %s", method, path, rec.Code, rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
		f.Fatal(err)
	}
}

func (fs *fuzzServer) serve(token, method, path string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, "http://hatch.test/", bytes.NewReader(body))
	// The path is set after parsing, so that any string is tried, not only
	// those httptest.NewRequest could parse.
	u, err := url.Parse("http://hatch.test" + path)
	if err != nil {
		u = &url.URL{Path: path}
	}
	req.URL, req.RequestURI = u, ""
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	fs.h.ServeHTTP(rec, req)
	return rec
}

// unchanged fails t if the input just served changed what every input
// starts from, so that a failure found never depends on inputs before it.
func (fs *fuzzServer) unchanged(t *testing.T) {
	t.Helper()
	host := "/api/v1/hosts/" + url.PathEscape(fs.id)
	for _, r := range []struct{ who, token, path string }{
		{"the admin", fs.admin, host},
		{"the host", fs.host, host + "/desired-state?wait=1ms"},
	} {
		if rec := fs.serve(r.token, "GET", r.path, nil); rec.Code/100 != 2 {
			t.Fatalf("after this input, GET %s as %s answers %d %s: the input changed the server the next inputs meet",
				r.path, r.who, rec.Code, rec.Body)
		}
	}
}

// check fails t on a server error.
func check(t *testing.T, rec *httptest.ResponseRecorder, method, path string, body []byte) {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("%s %s with body %q: %d %s", method, path, body, rec.Code, rec.Body)
	}
	// Drained, as a client would: a stream must end on its own.
	_, _ = io.Copy(io.Discard, rec.Body)
}

// pick chooses one of n routes from a fuzzed byte.
func pick(b byte, n int) int { return int(b) % n }

// FuzzProjectsAPI: plan, destroy, apply, restart and rollback, with any body
// and any project or egg name in the path.
func FuzzProjectsAPI(f *testing.F) {
	fs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, route byte, name string, body []byte) {
		p := api.ProjectPath("default", name, "")
		paths := []string{p + "/plan", p + "/destroy", p + "/apply", p + "/eggs/" + url.PathEscape(name) + "/restart", p + "/rollback"}
		path := paths[pick(route, len(paths))]
		check(t, fs.serve(fs.admin, "POST", path, body), "POST", path, body)
		fs.unchanged(t)
	})
}

// FuzzRunsAPI: starting, listing, waiting on and stopping runs, and
// firing, pausing and resuming schedules, with any body and any egg name or
// run ID in the path (the body is the wait's state too).
func FuzzRunsAPI(f *testing.F) {
	fs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, route byte, name string, body []byte) {
		p := api.ProjectPath("default", "shop", "")
		n := url.PathEscape(name)
		routes := []struct{ method, path string }{
			{"POST", p + "/eggs/" + n + "/runs"},
			{"GET", p + "/runs?egg=" + url.QueryEscape(name)},
			{"GET", p + "/runs/" + n + "?wait=1ms&state=" + url.QueryEscape(string(body))},
			{"POST", p + "/runs/" + n + "/stop"},
			{"GET", p + "/schedules"},
			{"POST", p + "/schedules/" + n + "/run"},
			{"POST", p + "/schedules/" + n + "/pause"},
			{"POST", p + "/schedules/" + n + "/resume"},
		}
		r := routes[pick(route, len(routes))]
		check(t, fs.serve(fs.admin, r.method, r.path, body), r.method, r.path, body)
		fs.unchanged(t)
	})
}

// FuzzHostsAPI: a host's status report and certificate renewal (with its
// own token), and the admin's reads and removal, with any body and host ID.
func FuzzHostsAPI(f *testing.F) {
	fs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, route byte, id string, body []byte) {
		if id == "" {
			id = fs.id
		}
		h := "/api/v1/hosts/" + url.PathEscape(id)
		routes := []struct{ token, method, path string }{
			{fs.host, "POST", h + "/status"},
			{fs.host, "POST", h + "/certificate"},
			{fs.admin, "POST", h + "/status"},
			{fs.admin, "GET", h},
			{fs.host, "GET", h + "/desired-state?wait=1ms&version=" + url.QueryEscape(string(body))},
		}
		r := routes[pick(route, len(routes))]
		check(t, fs.serve(r.token, r.method, r.path, body), r.method, r.path, body)
		fs.unchanged(t)
	})
}

// FuzzTokensAPI: joining with a join token, and making and revoking join
// tokens, with any body and token ID.
func FuzzTokensAPI(f *testing.F) {
	fs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, route byte, id string, body []byte) {
		routes := []struct{ token, method, path string }{
			{fs.join, "POST", "/api/v1/join"},
			{fs.admin, "POST", "/api/v1/join-tokens"},
			{fs.admin, "DELETE", "/api/v1/join-tokens/" + url.PathEscape(id)},
			{fs.admin, "GET", "/api/v1/join-tokens"},
		}
		r := routes[pick(route, len(routes))]
		check(t, fs.serve(r.token, r.method, r.path, body), r.method, r.path, body)
		fs.unchanged(t)
	})
}

// FuzzBlobsAPI: uploads under any digest (their own, or one they do not
// match), and reads of any digest.
func FuzzBlobsAPI(f *testing.F) {
	fs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, route byte, digest string, body []byte) {
		if digest == "" {
			digest = digestOf(body)
		}
		path := "/api/v1/blobs/" + url.PathEscape(digest)
		method := []string{"PUT", "HEAD", "GET"}[pick(route, 3)]
		check(t, fs.serve(fs.admin, method, path, body), method, path, body)
		fs.unchanged(t)
	})
}

// FuzzReadsAPI: the admin's reads, with any path segment and query (a
// follow, which streams until the server stops, is left out).
func FuzzReadsAPI(f *testing.F) {
	fs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, route byte, name, query string) {
		if strings.Contains(strings.ToLower(query), "follow") {
			return
		}
		p := api.ProjectPath("default", name, "")
		paths := []string{"/api/v1/events", "/api/v1/projects", p, p + "/status", p + "/applies/" + url.PathEscape(name),
			"/api/v1/hosts", "/api/v1/" + name, p + "/applies"}
		path := paths[pick(route, len(paths))] + "?" + query
		check(t, fs.serve(fs.admin, "GET", path, nil), "GET", path, nil)
		fs.unchanged(t)
	})
}
