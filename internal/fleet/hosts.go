package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/store"
)

// hostView shows a host: its liveness, identity, the version of its desired
// state as its agent gets it (its stored state's with the fleet's peers'),
// and its last report's (nil before one).
func hostView(h store.Host, id store.HostIdentity, desired store.DesiredState, peersVersion string, st *store.Status) (api.Host, *contract.StatusReport, error) {
	v := api.Host{ID: h.ID, Name: id.Name, RemovedAt: id.RemovedAt, State: string(h.State), StateSince: h.StateSince, LastSeen: h.LastSeen}
	v.DesiredVersion = contract.CombineVersions(desired.Version, peersVersion)
	if st == nil {
		return v, nil, nil
	}
	report, err := contract.DecodeStatusReport(bytes.NewReader(st.Report))
	if err != nil {
		return v, nil, fmt.Errorf("host %s: stored report: %w", h.ID, err)
	}
	v.ReportedVersion, v.Errors, v.Engine = report.Version, report.Errors, report.Engine
	problem, err := unplacedProblem(desired, v.DesiredVersion, report)
	if err != nil {
		return v, nil, err
	}
	if problem != "" {
		v.Errors = append(slices.Clip(v.Errors), problem)
	}
	return v, &report, nil
}

// Hosts lists every host, removed ones too, sorted by ID: one read of each
// kind, not one a host.
func (s *Service) Hosts(ctx context.Context) ([]api.Host, error) {
	hosts, err := s.deps.Statuses.ListHosts(ctx)
	if err != nil {
		return nil, err
	}
	identities, err := s.hostIdentities(ctx)
	if err != nil {
		return nil, err
	}
	peersVersion, err := s.deps.Desired.DesiredPeersVersion(ctx)
	if err != nil {
		return nil, err
	}
	desired, reports, err := s.statesAndReports(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.Host, 0, len(hosts))
	reported := make(map[string]*contract.HostCapacity, len(hosts))
	for _, h := range hosts {
		v, report, err := hostView(h, identities[h.ID], desired[h.ID], peersVersion, reports[h.ID])
		if err != nil {
			return nil, err
		}
		if report != nil {
			reported[h.ID] = report.Capacity
		}
		out = append(out, v)
	}
	capacities, err := s.capacityViews(ctx, hosts, identities, reported)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Capacity = capacities[out[i].ID]
	}
	return out, nil
}

// Host returns one host with its last report; an unknown ID gives
// api.CodeNotFound.
func (s *Service) Host(ctx context.Context, id string) (api.HostDetail, error) {
	h, err := s.deps.Statuses.Host(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return api.HostDetail{}, api.NotFound("no host %q", id)
	}
	if err != nil {
		return api.HostDetail{}, err
	}
	identities, err := s.hostIdentities(ctx)
	if err != nil {
		return api.HostDetail{}, err
	}
	desired, err := s.deps.Desired.DesiredState(ctx, id)
	if err != nil {
		return api.HostDetail{}, err
	}
	peersVersion, err := s.deps.Desired.DesiredPeersVersion(ctx)
	if err != nil {
		return api.HostDetail{}, err
	}
	var report *store.Status
	switch st, err := s.deps.Statuses.Status(ctx, id); {
	case err == nil:
		report = &st
	case !errors.Is(err, store.ErrNotFound):
		return api.HostDetail{}, err
	}
	v, status, err := hostView(h, identities[id], desired, peersVersion, report)
	if err != nil {
		return api.HostDetail{}, err
	}
	if v.Capacity, err = s.hostCapacityView(ctx, id, identities); err != nil {
		return api.HostDetail{}, err
	}
	return api.HostDetail{Host: v, Status: status}, nil
}

// statesAndReports reads every host's stored desired state and latest
// report, by host ID: one read of each, not one a host.
func (s *Service) statesAndReports(ctx context.Context) (map[string]store.DesiredState, map[string]*store.Status, error) {
	states, err := s.deps.Desired.AllDesiredStates(ctx)
	if err != nil {
		return nil, nil, err
	}
	desired := make(map[string]store.DesiredState, len(states))
	for _, d := range states {
		desired[d.HostID] = d
	}
	statuses, err := s.deps.Statuses.AllStatuses(ctx)
	if err != nil {
		return nil, nil, err
	}
	reports := make(map[string]*store.Status, len(statuses))
	for i := range statuses {
		reports[statuses[i].HostID] = &statuses[i]
	}
	return desired, reports, nil
}

// hostIdentities returns the joined hosts by ID.
func (s *Service) hostIdentities(ctx context.Context) (map[string]store.HostIdentity, error) {
	all, err := s.deps.Members.ListHostIdentities(ctx)
	if err != nil {
		return nil, err
	}
	byID := make(map[string]store.HostIdentity, len(all))
	for _, h := range all {
		byID[h.ID] = h
	}
	return byID, nil
}

// Report stores a host's status report. It is the host's heartbeat, and the
// report's containers, compared with the previous report's, give the
// rollout events. A report that cannot be right gives an *api.Error naming
// the field. Once the report is stored, a failure to record its rollout
// events is logged, not returned: it is not the agent's concern.
func (s *Service) Report(ctx context.Context, host string, report contract.StatusReport) error {
	if report.HostID == "" {
		report.HostID = host
	}
	if err := validateReport(host, report); err != nil {
		return err
	}
	if err := s.checkReportCapacity(ctx, host, report); err != nil {
		return err
	}
	if err := s.checkMeshAddresses(report); err != nil {
		return err
	}
	body, err := json.Marshal(report)
	if err != nil {
		return err
	}
	now := s.now()
	prevBody, err := s.deps.Statuses.PutStatus(ctx, host, body, now)
	if err != nil {
		return err
	}
	// The previous report, read once: its containers give the rollout
	// events, its mesh addresses tell whether the valid host set changed.
	var prev *contract.StatusReport
	if prevBody != nil {
		p, err := contract.DecodeStatusReport(bytes.NewReader(prevBody))
		if err != nil {
			s.log.Warn("the previous status report is unreadable", zap.String("host", host), zap.Error(err))
		} else {
			prev = &p
		}
	}
	// Rollout events come from changes of the containers: a report whose
	// containers are the previous one's, as most are, gives none, and its
	// host's desired state is not read.
	if prev == nil || !reflect.DeepEqual(prev.Containers, report.Containers) {
		if err := s.recordRollouts(ctx, host, prev, report, now); err != nil {
			s.log.Warn("rollout events not recorded", zap.String("host", host), zap.Error(err))
		}
	}
	s.recordEngineChange(ctx, host, prev, report, now)
	s.recordFence(ctx, host, prev, report, now)
	if meshAddressesChanged(prev, report) {
		s.reportedPeers.kick(func() {
			// Not bound to this report's request: the run is for others' too.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s.syncPeers(ctx, "new mesh addresses")
		})
	}
	return nil
}

// meshAddressesChanged says whether a report's mesh addresses differ from the
// previous report's (nil: none readable, so any addresses are new).
func meshAddressesChanged(prev *contract.StatusReport, report contract.StatusReport) bool {
	if prev == nil {
		return len(report.MeshAddresses) > 0
	}
	return !slices.Equal(prev.MeshAddresses, report.MeshAddresses)
}

// recordRollouts appends the rollout events that the change from prev (nil:
// none) to report gives.
func (s *Service) recordRollouts(ctx context.Context, host string, prev *contract.StatusReport, report contract.StatusReport, now time.Time) error {
	stored, err := s.deps.Desired.DesiredState(ctx, host)
	if err != nil || stored.Doc == nil {
		return err
	}
	// Spec hashes leave secret values out, so the sealed form serves as it is.
	desired, err := contract.DecodeDesiredState(bytes.NewReader(stored.Doc))
	if err != nil {
		return err
	}
	var before []contract.ContainerStatus
	if prev != nil {
		before = prev.Containers
	}
	for _, e := range s.rollouts.events(host, desired, before, report.Containers, now) {
		if _, err := s.deps.Events.AppendEvent(ctx, e); err != nil {
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
		return api.BadRequest("host_id: %q, but the report was sent for host %q", rep.HostID, host)
	}
	for i, c := range rep.Containers {
		switch {
		case c.WorkloadID == "":
			return api.BadRequest("containers[%d].workload: empty", i)
		case c.Slot < 0:
			return api.BadRequest("containers[%d].slot: %d is negative", i, c.Slot)
		case !knownStates[c.State]:
			return api.BadRequest("containers[%d].state: %q is not a container state", i, c.State)
		case c.Restarts < 0:
			return api.BadRequest("containers[%d].restarts: %d is negative", i, c.Restarts)
		}
	}
	return nil
}

// ReferencesBlob reports whether the host's desired state builds from the
// blob: a host may read only those.
func (s *Service) ReferencesBlob(ctx context.Context, hostID, digest string) (bool, error) {
	stored, err := s.deps.Desired.DesiredState(ctx, hostID)
	if err != nil || len(stored.Doc) == 0 {
		return false, err
	}
	// Blob IDs are not secret: the sealed form serves as it is.
	d, err := contract.DecodeDesiredState(bytes.NewReader(stored.Doc))
	if err != nil {
		return false, err
	}
	for _, w := range d.Workloads {
		if w.BlobID != "" && w.BlobID == digest {
			return true, nil
		}
	}
	return false, nil
}

// Events returns up to limit events of the log after since, oldest first:
// every event, or with project ("<namespace>/<name>") only that project's.
func (s *Service) Events(ctx context.Context, project string, since int64, limit int) ([]api.Event, error) {
	var evs []store.Event
	var err error
	if project == "" {
		evs, err = s.deps.Events.ListEvents(ctx, since, limit)
	} else {
		evs, err = s.deps.Events.ListProjectEvents(ctx, project, since, limit)
	}
	if err != nil {
		return nil, err
	}
	out := make([]api.Event, len(evs))
	for i, e := range evs {
		out[i] = api.Event{Seq: e.Seq, Time: e.Time, Type: string(e.Type), Project: e.Project, Host: e.Host,
			Resource: e.Resource, Message: e.Message, Actor: e.Actor}
	}
	return out, nil
}

// WatchEvents returns a channel closed when the next event is recorded
// after the call: call it before Events, so that none slips between.
func (s *Service) WatchEvents() <-chan struct{} { return s.deps.Events.WatchEvents() }
