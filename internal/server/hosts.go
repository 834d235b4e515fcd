package server

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/fleet"
	"github.com/hatchery/hatchery/internal/holds"
	"github.com/hatchery/hatchery/internal/store"
)

// fleetAPI maps the endpoints of hosts, tokens, project status and the
// event log to the fleet.
type fleetAPI struct {
	svc *fleet.Service
	// backups fill the project status's volumes: a backup failing or
	// falling behind is seen where the project is looked at.
	backups interface {
		BackupStates(ctx context.Context, project string) ([]api.VolumeBackupState, error)
	}
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
//
// The poll is held under its caller (pollsPerHost per host): a newer one
// beyond that answers the oldest 304 at once. Before it answers with a
// state it checks its token again, so that a host removed while it waited
// gets 401, never its new state; and its right ending while it waits ends
// it with 401 too.
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
	held, err := s.hold(r, endpointDesiredState)
	if err != nil {
		return err
	}
	defer held.Release()
	servers, serversChanged := s.deps.Servers.Servers()
	if len(servers) > 0 {
		// Every answer, "not modified" too, names the live servers.
		w.Header().Set(api.HeaderServers, strings.Join(servers, ","))
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	waiting, spread, first := false, false, true
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
			if !spread && peersAloneChanged(known, heldPeers, stored.Version, peersVersion) {
				// The peer list alone changed for this host: answered after
				// a while drawn from the spread, then with the latest list.
				spread, first = true, false
				select {
				case <-time.After(peerSpread(s.pollingHosts())):
					continue
				case <-held.Done():
					return s.heldEnded(w, held)
				case <-s.closing:
				case <-r.Context().Done():
					return r.Context().Err()
				}
			}
			if !first {
				// It waited: its host may have been removed meanwhile (the
				// token was checked as the request came in).
				if err := s.recheck(r); err != nil {
					return err
				}
			}
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
		first = false
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
		case <-held.Done():
			return s.heldEnded(w, held)
		case <-s.closing:
			w.WriteHeader(http.StatusNotModified)
			return nil
		case <-r.Context().Done():
			return r.Context().Err()
		}
	}
}

// heldEnded answers a desired-state poll whose hold ended: replaced by a
// newer poll of its host, as if its wait had passed (304); its right
// ended, 401.
func (s *Server) heldEnded(w http.ResponseWriter, held *holds.Hold) error {
	if replaced(held) {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	return ended(held)
}

// peerAnswerRate bounds how many answers a second one server sends for a
// change of the peer list alone. Each carries the whole list, about 80
// bytes a host, so a new list woke every host's poll at once: hosts squared
// bytes in a burst (320 MB at 2,000 hosts), and the reports that follow,
// which a fleet whose hosts all report new mesh addresses at once could not
// get through. Those polls are answered spread over hosts/peerAnswerRate
// seconds instead, counting the distinct hosts polling this server (a host
// holding many polls counts once, so it cannot stretch the spread that
// delays every other host's new list): 4 s for 1,000 hosts on one server. A
// change of a host's own state is answered at once.
const peerAnswerRate = 250

// peersAloneChanged says whether a host's state (its stored content's
// version and the peers') differs from the one its agent holds (known, with
// the peers of version held) by the peers alone.
func peersAloneChanged(known, held, content, peers string) bool {
	return held != "" && held != peers && contract.CombineVersions(content, held) == known
}

// peerSpread draws how long a poll woken by a new peer list waits before it
// is answered: uniformly under the spread the hosts polling need.
func peerSpread(hosts int) time.Duration {
	spread := time.Duration(hosts) * time.Second / peerAnswerRate
	if spread <= 0 {
		return 0
	}
	return rand.N(spread)
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
