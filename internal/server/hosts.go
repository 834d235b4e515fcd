package server

import (
	"net/http"
	"strings"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/fleet"
	"github.com/hatchery/hatchery/internal/store"
)

// fleetAPI maps the endpoints of hosts, tokens, project status and the
// event log to the fleet.
type fleetAPI struct {
	svc     *fleet.Service
	streams streams
}

func (h fleetAPI) listHosts(w http.ResponseWriter, r *http.Request) error {
	hosts, err := h.svc.Hosts(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.HostList{Hosts: hosts})
	return nil
}

func (h fleetAPI) getHost(w http.ResponseWriter, r *http.Request) error {
	host, err := h.svc.Host(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, host)
	return nil
}

// postStatus stores a host's report, which is also its heartbeat.
func (h fleetAPI) postStatus(w http.ResponseWriter, r *http.Request) error {
	var report contract.StatusReport
	if err := decodeContract(r, &report); err != nil {
		return err
	}
	if err := h.svc.Report(r.Context(), r.PathValue("id"), report); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// getDesiredState is the agents' long-poll: it answers at once when the
// host's stored version differs from the one the caller has, and otherwise
// holds the request until the state changes (200) or the wait passes (304).
func (s *Server) getDesiredState(w http.ResponseWriter, r *http.Request) error {
	host := r.PathValue("id")
	q := r.URL.Query()
	known := q.Get("version")
	var wait time.Duration
	if v := q.Get("wait"); v != "" {
		var err error
		if wait, err = time.ParseDuration(v); err != nil || wait < 0 || wait > s.cfg.MaxWait {
			return api.BadRequest("wait: %q is not a duration between 0s and %v (for example 30s)", v, s.cfg.MaxWait)
		}
	}
	servers, serversChanged := s.deps.Servers.Servers()
	if len(servers) > 0 {
		// Every answer, "not modified" too, names the live servers.
		w.Header().Set(api.HeaderServers, strings.Join(servers, ","))
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	waiting := false
	defer func() {
		if waiting {
			s.metrics.waiters.Dec()
		}
	}()
	for {
		changed := s.deps.Desired.WatchDesiredState(host) // before the read: no change slips between
		stored, err := s.deps.Desired.DesiredState(r.Context(), host)
		if err != nil {
			return err
		}
		if stored.Version != known {
			d, err := store.DecodeDesiredState(s.deps.Box, stored)
			if err != nil {
				return err
			}
			w.Header().Set("ETag", `"`+d.Version+`"`)
			writeJSON(w, http.StatusOK, d)
			return nil
		}
		if !waiting {
			waiting = true
			s.metrics.waiters.Inc()
		}
		select {
		case <-changed:
		case <-timer.C:
			w.WriteHeader(http.StatusNotModified)
			return nil
		case <-serversChanged:
			servers, _ := s.deps.Servers.Servers()
			w.Header().Set(api.HeaderServers, strings.Join(servers, ","))
			w.WriteHeader(http.StatusNotModified)
			return nil
		case <-s.closing:
			w.WriteHeader(http.StatusNotModified)
			return nil
		case <-r.Context().Done():
			return r.Context().Err()
		}
	}
}
