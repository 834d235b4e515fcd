package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/placement"
	"github.com/hatchery/hatchery/internal/store"
)

// A host's capacity is what its agent reports, and placement prefers the
// least loaded host relative to it, so a host that lied would draw every
// new replica with its secrets (issue 24, finding 5). The fleet records a
// host's first report as its baseline, held to the server's caps; placement
// (desired.StoreFleet) believes later reports up to it, and an admin's pin
// (hatch hosts set) whatever the host says. placement.BelieveCapacities is
// the rule both read.

// checkCapacity refuses a report's capacity that cannot be right.
func checkCapacity(c *contract.HostCapacity) error {
	if c != nil && (c.MemoryBytes < 0 || c.MilliCPU < 0) {
		return api.BadRequest("capacity: %d bytes and %d milli-CPU: neither may be negative", c.MemoryBytes, c.MilliCPU)
	}
	return nil
}

// recordBaseline records the host's baseline from its first report that
// carries a capacity; once this server knows the host has one, a report
// costs no read or write more.
func (s *Service) recordBaseline(ctx context.Context, host string, c *contract.HostCapacity) error {
	if c == nil || c.MemoryBytes <= 0 || c.MilliCPU <= 0 {
		return nil
	}
	if _, known := s.baselines.Load(host); known {
		return nil
	}
	base := placement.CappedBaseline(placement.Resources{Memory: c.MemoryBytes, MilliCPU: c.MilliCPU}, s.cfg.MaxHostCapacity)
	if _, err := s.deps.Capacities.RecordCapacityBaseline(ctx, host, store.Capacity{Memory: base.Memory, MilliCPU: base.MilliCPU}, s.now()); err != nil {
		return fmt.Errorf("host %s: record its capacity baseline: %w", host, err)
	}
	s.baselines.Store(host, struct{}{})
	return nil
}

// capacityViews shows what each host reported of its capacity and what
// placement believes, by host ID: hosts are every host of the fleet (the
// ones placement sees: a host that never said is believed to be as small as
// the smallest that did), reported their last reports' capacities.
func (s *Service) capacityViews(ctx context.Context, hosts []store.Host, names map[string]store.HostIdentity,
	reported map[string]*contract.HostCapacity) (map[string]*api.HostCapacity, error) {
	all, err := s.deps.Capacities.AllHostCapacities(ctx)
	if err != nil {
		return nil, err
	}
	records := make(map[string]store.HostCapacity, len(all))
	for _, r := range all {
		records[r.HostID] = r
	}
	claims := make([]placement.CapacityClaim, len(hosts))
	for i, h := range hosts {
		rec := records[h.ID]
		claims[i] = placement.CapacityClaim{HostID: h.ID, Reported: resources(reported[h.ID]),
			Baseline: placement.Resources(rec.Baseline), Pinned: placement.Resources(rec.Pinned)}
	}
	beliefs := placement.BelieveCapacities(claims, s.cfg.MaxHostCapacity, placement.Resources{})
	out := make(map[string]*api.HostCapacity, len(hosts))
	for i, h := range hosts {
		rec, b := records[h.ID], beliefs[i]
		v := &api.HostCapacity{Reported: reported[h.ID], Believed: hostCapacity(b.Believed), Source: string(b.Source),
			PinnedBy: rec.PinnedBy, PinnedAt: rec.PinnedAt}
		if !rec.Baseline.IsZero() {
			base := hostCapacity(placement.Resources(rec.Baseline))
			v.Baseline = &base
		}
		name := h.ID
		if id, ok := names[h.ID]; ok && id.Name != "" {
			name = id.Name
		}
		v.Problem = capacityProblem(name, claims[i].Reported, b)
		out[h.ID] = v
	}
	return out, nil
}

// capacityProblem says why a host's report is not believed, and what
// confirms it; "" when it is.
func capacityProblem(name string, reported placement.Resources, b placement.CapacityBelief) string {
	if !b.AboveBaseline && !b.AboveCap {
		return ""
	}
	why := "its first report's"
	switch {
	case b.AboveCap && b.AboveBaseline:
		why = "its first report's and within the server's caps (hatch server --max-host-memory, --max-host-cpus)"
	case b.AboveCap:
		why = "the server's caps (hatch server --max-host-memory, --max-host-cpus)"
	}
	return fmt.Sprintf("reports %s of capacity, but placement believes %s, %s, until an admin confirms it: "+
		"if the host really has it, hatch hosts set %s --memory %s --cpus %s",
		reported, b.Believed, why, name, MemoryFlag(reported.Memory), CPUFlag(reported.MilliCPU))
}

// MemoryFlag writes a byte count as hatch hosts set --memory reads it.
func MemoryFlag(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// CPUFlag writes thousandths of a CPU as hatch hosts set --cpus reads it.
func CPUFlag(milli int64) string { return strconv.FormatFloat(float64(milli)/1000, 'f', -1, 64) }

func resources(c *contract.HostCapacity) placement.Resources {
	if c == nil {
		return placement.Resources{}
	}
	return placement.Resources{Memory: c.MemoryBytes, MilliCPU: c.MilliCPU}
}

func hostCapacity(r placement.Resources) contract.HostCapacity {
	return contract.HostCapacity{MemoryBytes: r.Memory, MilliCPU: r.MilliCPU}
}

// SetHostCapacity pins the capacity of the host with the name or ID: from
// then on placement believes it, whatever the host reports. A part left out
// keeps what placement believes now. It answers the host as hatch hosts
// shows it.
func (s *Service) SetHostCapacity(ctx context.Context, ref string, req api.SetHostCapacity) (api.Host, error) {
	if req.MemoryBytes < 0 || req.MilliCPU < 0 || (req.MemoryBytes == 0 && req.MilliCPU == 0) {
		return api.Host{}, api.BadRequest("memory_bytes and milli_cpu: give one or both, above zero "+
			"(hatch hosts set NAME --memory 64Gi --cpus 16), not %d and %d", req.MemoryBytes, req.MilliCPU)
	}
	id, err := s.deps.Members.FindHost(ctx, ref)
	if errors.Is(err, store.ErrNotFound) {
		return api.Host{}, api.NotFound("no host with ID or name %q: `hatch hosts` lists them", ref)
	}
	if err != nil {
		return api.Host{}, err
	}
	if id.Removed() {
		return api.Host{}, api.NotFound("host %q (%s) was removed: join it again first", ref, id.ID)
	}
	pin := store.Capacity{Memory: req.MemoryBytes, MilliCPU: req.MilliCPU}
	if pin.Memory == 0 || pin.MilliCPU == 0 {
		now, err := s.Host(ctx, id.ID)
		if err != nil {
			return api.Host{}, err
		}
		if now.Capacity == nil {
			return api.Host{}, api.BadRequest("host %q has not reported yet: give both --memory and --cpus", ref)
		}
		if pin.Memory == 0 {
			pin.Memory = now.Capacity.Believed.MemoryBytes
		}
		if pin.MilliCPU == 0 {
			pin.MilliCPU = now.Capacity.Believed.MilliCPU
		}
	}
	if err := s.deps.Capacities.PinCapacity(ctx, id.ID, pin, s.now()); err != nil {
		return api.Host{}, err
	}
	h, err := s.Host(ctx, id.ID)
	return h.Host, err
}

// checkReportCapacity checks a report's capacity and records the host's
// baseline from the first that carries one, before the report is stored:
// placement never reads a capacity of the host without its baseline.
func (s *Service) checkReportCapacity(ctx context.Context, host string, report contract.StatusReport) error {
	if err := checkCapacity(report.Capacity); err != nil {
		return err
	}
	return s.recordBaseline(ctx, host, report.Capacity)
}

// hostCapacityView is capacityViews of one host: the whole fleet is read,
// since a host that never said is believed as small as the smallest.
func (s *Service) hostCapacityView(ctx context.Context, id string, names map[string]store.HostIdentity) (*api.HostCapacity, error) {
	hosts, err := s.deps.Statuses.ListHosts(ctx)
	if err != nil {
		return nil, err
	}
	_, reports, err := s.statesAndReports(ctx)
	if err != nil {
		return nil, err
	}
	reported := make(map[string]*contract.HostCapacity, len(reports))
	for hostID, st := range reports {
		rep, err := contract.DecodeStatusReport(bytes.NewReader(st.Report))
		if err != nil {
			return nil, fmt.Errorf("host %s: stored report: %w", hostID, err)
		}
		reported[hostID] = rep.Capacity
	}
	views, err := s.capacityViews(ctx, hosts, names, reported)
	if err != nil {
		return nil, err
	}
	return views[id], nil
}
