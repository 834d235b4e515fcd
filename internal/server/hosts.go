package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/store"
)

// hostJSON is a host as the API shows it.
type hostJSON struct {
	ID string `json:"id"`
	// Name is the name the host joined with, and RemovedAt when `hatch
	// hosts remove` revoked its token (see security.go).
	Name       string    `json:"name,omitempty"`
	RemovedAt  time.Time `json:"removed_at,omitzero"`
	State      string    `json:"state"`
	StateSince time.Time `json:"state_since"`
	LastSeen   time.Time `json:"last_seen,omitzero"`
	// DesiredVersion is the version of the host's desired state, and
	// ReportedVersion the one its agent last said it converged towards.
	DesiredVersion  string `json:"desired_version,omitempty"`
	ReportedVersion string `json:"reported_version,omitempty"`
}

func (s *Server) hostView(r *http.Request, h store.Host) (hostJSON, *contract.StatusReport, error) {
	v := hostJSON{ID: h.ID, State: string(h.State), StateSince: h.StateSince, LastSeen: h.LastSeen}
	d, err := s.deps.Desired.DesiredState(r.Context(), h.ID)
	if err != nil {
		return v, nil, err
	}
	v.DesiredVersion = d.Version
	st, err := s.deps.Statuses.Status(r.Context(), h.ID)
	if errors.Is(err, store.ErrNotFound) {
		return v, nil, nil
	}
	if err != nil {
		return v, nil, err
	}
	report, err := contract.DecodeStatusReport(bytes.NewReader(st.Report))
	if err != nil {
		return v, nil, fmt.Errorf("host %s: stored report: %w", h.ID, err)
	}
	v.ReportedVersion = report.Version
	return v, &report, nil
}

func (s *Server) listHosts(w http.ResponseWriter, r *http.Request) error {
	hosts, err := s.deps.Statuses.ListHosts(r.Context())
	if err != nil {
		return err
	}
	identities, err := s.hostIdentities(r.Context())
	if err != nil {
		return err
	}
	out := make([]hostJSON, 0, len(hosts))
	for _, h := range hosts {
		v, _, err := s.hostView(r, h)
		if err != nil {
			return err
		}
		v.Name, v.RemovedAt = identities[h.ID].Name, identities[h.ID].RemovedAt
		out = append(out, v)
	}
	writeJSON(w, http.StatusOK, map[string]any{"hosts": out})
	return nil
}

func (s *Server) getHost(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	h, err := s.deps.Statuses.Host(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return notFoundf("no host %q", id)
	}
	if err != nil {
		return err
	}
	v, report, err := s.hostView(r, h)
	if err != nil {
		return err
	}
	identities, err := s.hostIdentities(r.Context())
	if err != nil {
		return err
	}
	v.Name, v.RemovedAt = identities[id].Name, identities[id].RemovedAt
	writeJSON(w, http.StatusOK, struct {
		hostJSON
		Status *contract.StatusReport `json:"status"`
	}{v, report})
	return nil
}

// getDesiredState answers at once when the host's stored version differs
// from the one the caller has, and otherwise holds the request until the
// state changes (200) or the wait passes (304).
func (s *Server) getDesiredState(w http.ResponseWriter, r *http.Request) error {
	host := r.PathValue("id")
	q := r.URL.Query()
	known := q.Get("version")
	var wait time.Duration
	if v := q.Get("wait"); v != "" {
		var err error
		if wait, err = time.ParseDuration(v); err != nil || wait < 0 || wait > s.cfg.MaxWait {
			return badRequest("wait: %q is not a duration between 0s and %v (for example 30s)", v, s.cfg.MaxWait)
		}
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
		case <-s.closing:
			w.WriteHeader(http.StatusNotModified)
			return nil
		case <-r.Context().Done():
			return r.Context().Err()
		}
	}
}

// postStatus stores a host's report. It is the host's heartbeat, and the
// report's containers, compared with the previous report's, give the rollout
// events.
func (s *Server) postStatus(w http.ResponseWriter, r *http.Request) error {
	host := r.PathValue("id")
	var report contract.StatusReport
	if err := decodeContract(r, &report); err != nil {
		return err
	}
	if report.HostID == "" {
		report.HostID = host
	}
	if err := validateReport(host, report); err != nil {
		return err
	}
	body, err := json.Marshal(report)
	if err != nil {
		return err
	}
	now := s.now()
	prevBody, err := s.deps.Statuses.PutStatus(r.Context(), host, body, now)
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	// The report is stored and acknowledged; rollout events are derived from
	// it and their failure is logged, not the agent's concern.
	if err := s.recordRollouts(r, host, prevBody, report, now); err != nil {
		s.log.Warn("rollout events not recorded", zap.String("host", host), zap.Error(err))
	}
	return nil
}

func (s *Server) recordRollouts(r *http.Request, host string, prevBody []byte, report contract.StatusReport, now time.Time) error {
	stored, err := s.deps.Desired.DesiredState(r.Context(), host)
	if err != nil || stored.Doc == nil {
		return err
	}
	// Spec hashes leave secret values out, so the sealed form serves as it is.
	desired, err := contract.DecodeDesiredState(bytes.NewReader(stored.Doc))
	if err != nil {
		return err
	}
	var prev []contract.ContainerStatus
	if prevBody != nil {
		p, err := contract.DecodeStatusReport(bytes.NewReader(prevBody))
		if err != nil {
			return err
		}
		prev = p.Containers
	}
	for _, e := range s.rollouts.events(host, desired, prev, report.Containers, now) {
		if _, err := s.deps.Events.AppendEvent(r.Context(), e); err != nil {
			return err
		}
	}
	return nil
}

var knownStates = map[contract.ContainerState]bool{
	contract.StateBuilding: true, contract.StateStarting: true, contract.StateRunning: true,
	contract.StateDraining: true, contract.StateStopped: true, contract.StateCompleted: true,
	contract.StateCrashed: true, contract.StateUnknown: true,
}

// validateReport names the first field of a report that cannot be right.
func validateReport(host string, rep contract.StatusReport) error {
	if rep.HostID != host {
		return badRequest("host_id: %q, but the report was sent for host %q", rep.HostID, host)
	}
	for i, c := range rep.Containers {
		switch {
		case c.WorkloadID == "":
			return badRequest("containers[%d].workload: empty", i)
		case c.Slot < 0:
			return badRequest("containers[%d].slot: %d is negative", i, c.Slot)
		case !knownStates[c.State]:
			return badRequest("containers[%d].state: %q is not a container state", i, c.State)
		case c.Restarts < 0:
			return badRequest("containers[%d].restarts: %d is negative", i, c.Restarts)
		}
	}
	return nil
}
