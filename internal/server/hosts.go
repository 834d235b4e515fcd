package server

import (
	"context"
	"net/http"
	"strings"
	"sync"
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
// version of the host's state (its stored state's and the fleet's peers')
// differs from the one the caller has, and otherwise holds the request
// until either changes (200) or the wait passes (304). A caller that names
// the peers' version it holds (peers=) and still holds the current one gets
// the state without them (contract.DesiredState.PeersOmitted).
func (s *Server) getDesiredState(w http.ResponseWriter, r *http.Request) error {
	host := r.PathValue("id")
	q := r.URL.Query()
	known, heldPeers := q.Get("version"), q.Get("peers")
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
		peersVersion, err := s.deps.Desired.DesiredPeersVersion(r.Context())
		if err != nil {
			return err
		}
		if contract.CombineVersions(stored.Version, peersVersion) != known {
			peers, peersVersion, err := s.peers.get(r.Context(), s.deps.Desired, peersVersion)
			if err != nil {
				return err
			}
			d, err := store.WholeDesiredState(s.deps.Box, stored, peers, peersVersion)
			if err != nil {
				return err
			}
			if heldPeers != "" && heldPeers == peersVersion {
				d.Peers, d.PeersOmitted = nil, true
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

// peerCache keeps the fleet's peer list decoded at its latest version: every
// long-poll answer carries it, and an apply over 1,000 hosts answers 1,000
// polls at once, which then read only its version.
type peerCache struct {
	mu      sync.Mutex // guards the fields below; held while reading a new list
	loaded  bool
	version string
	peers   []contract.Peer // shared by the answers, never changed
}

// get returns the peers and their version: those cached if they are at
// version, else the stored ones (at version, or newer), read and decoded.
func (c *peerCache) get(ctx context.Context, st DesiredStates, version string) ([]contract.Peer, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.loaded || c.version != version {
		l, err := st.DesiredPeers(ctx)
		if err != nil {
			return nil, "", err
		}
		peers, err := store.DecodePeers(l)
		if err != nil {
			return nil, "", err
		}
		c.loaded, c.version, c.peers = true, l.Version, peers
	}
	return c.peers, c.version, nil
}
