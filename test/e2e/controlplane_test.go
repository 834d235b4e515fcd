//go:build docker

package e2e

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/pki/authority"
)

// controlPlane plays the control plane's agent-facing API over HTTPS, with
// a CA and serving certificate made by pki, as `hatch server` has: join,
// long-polled desired state, status reports. Tests set each host's desired
// state and read the reports; stop makes it unreachable.
type controlPlane struct {
	srv       *httptest.Server
	joinToken string
	quit      chan struct{} // closed by stop: held long polls return

	mu      sync.Mutex
	tokens  map[string]string // host token -> host ID
	hosts   map[string]*cpHost
	stopped bool
}

type cpHost struct {
	state   contract.DesiredState
	changed chan struct{} // closed and replaced when state changes
	reports []contract.StatusReport
}

func newControlPlane(t testing.TB) *controlPlane {
	t.Helper()
	p, err := authority.LoadOrCreate(t.TempDir(), authority.DefaultNames(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cp := &controlPlane{
		joinToken: pki.NewToken(pki.KindJoin, p.Fingerprint()).String(),
		quit:      make(chan struct{}),
		tokens:    map[string]string{},
		hosts:     map[string]*cpHost{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/join", cp.join)
	mux.HandleFunc("GET /api/v1/hosts/{id}/desired-state", cp.desiredState)
	mux.HandleFunc("POST /api/v1/hosts/{id}/status", cp.status)
	cp.srv = httptest.NewUnstartedServer(mux)
	cp.srv.TLS = p.TLSConfig()
	cp.srv.StartTLS()
	t.Cleanup(cp.stop)
	return cp
}

// URL is the server's base URL.
func (cp *controlPlane) URL() string { return cp.srv.URL }

// stop makes the control plane unreachable: connections are refused.
func (cp *controlPlane) stop() {
	cp.mu.Lock()
	if cp.stopped {
		cp.mu.Unlock()
		return
	}
	cp.stopped = true
	close(cp.quit)
	cp.mu.Unlock()
	cp.srv.CloseClientConnections()
	cp.srv.Close()
}

func (cp *controlPlane) host(id string) *cpHost {
	h := cp.hosts[id]
	if h == nil {
		h = &cpHost{changed: make(chan struct{})}
		cp.hosts[id] = h
	}
	return h
}

// set makes ws the host's desired state.
func (cp *controlPlane) set(hostID string, ws ...contract.WorkloadSpec) contract.DesiredState {
	d := contract.DesiredState{HostID: hostID, Workloads: ws}
	d.Seal()
	cp.mu.Lock()
	defer cp.mu.Unlock()
	h := cp.host(hostID)
	h.state = d
	close(h.changed)
	h.changed = make(chan struct{})
	return d
}

// lastReport returns the host's last status report.
func (cp *controlPlane) lastReport(hostID string) (contract.StatusReport, bool) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	h := cp.hosts[hostID]
	if h == nil || len(h.reports) == 0 {
		return contract.StatusReport{}, false
	}
	return h.reports[len(h.reports)-1], true
}

// reports returns the host's last status reports (up to 100), oldest first.
func (cp *controlPlane) reports(hostID string) []contract.StatusReport {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if h := cp.hosts[hostID]; h != nil {
		return append([]contract.StatusReport(nil), h.reports...)
	}
	return nil
}

func apiError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "message": msg})
}

func bearer(r *http.Request) string {
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
}

// join gives host ID "h-<name>" for a valid join token.
func (cp *controlPlane) join(w http.ResponseWriter, r *http.Request) {
	if bearer(r) != cp.joinToken {
		apiError(w, http.StatusUnauthorized, "unauthorized", "invalid join token")
		return
	}
	var body struct{ Name string }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Name == "" {
		apiError(w, http.StatusBadRequest, "bad_request", "a name is needed")
		return
	}
	hostID := "h-" + body.Name
	tok := pki.NewToken(pki.KindHost, strings.Split(cp.joinToken, ".")[2]).String()
	cp.mu.Lock()
	cp.tokens[tok] = hostID
	cp.host(hostID)
	cp.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"host_id": hostID, "token": tok})
}

// authorized checks the host token against the path's host ID.
func (cp *controlPlane) authorized(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	cp.mu.Lock()
	owner := cp.tokens[bearer(r)]
	cp.mu.Unlock()
	if owner == "" || owner != id {
		apiError(w, http.StatusUnauthorized, "unauthorized", "invalid host token")
		return "", false
	}
	return id, true
}

// desiredState answers at once when the agent's version differs, else holds
// the request until the state changes or wait passes (then 304).
func (cp *controlPlane) desiredState(w http.ResponseWriter, r *http.Request) {
	id, ok := cp.authorized(w, r)
	if !ok {
		return
	}
	wait, err := time.ParseDuration(r.URL.Query().Get("wait"))
	if err != nil {
		wait = 0
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		cp.mu.Lock()
		h := cp.host(id)
		state, changed := h.state, h.changed
		cp.mu.Unlock()
		if state.Version != "" && state.Version != r.URL.Query().Get("version") {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(state)
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			w.WriteHeader(http.StatusNotModified)
			return
		case <-r.Context().Done():
			return
		case <-cp.quit:
			return
		}
	}
}

func (cp *controlPlane) status(w http.ResponseWriter, r *http.Request) {
	id, ok := cp.authorized(w, r)
	if !ok {
		return
	}
	rep, err := contract.DecodeStatusReport(r.Body)
	if err != nil {
		apiError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	cp.mu.Lock()
	h := cp.host(id)
	h.reports = append(h.reports, rep)
	if len(h.reports) > 100 {
		h.reports = h.reports[len(h.reports)-100:]
	}
	cp.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}
