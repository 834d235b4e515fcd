package docker

import (
	"context"
	"fmt"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

// inspectConcurrency bounds the inspects of one List.
const inspectConcurrency = 8

// List returns this host's containers with the work in progress overlaid
// (see containers.Tasks.Overlay), each with its latest health result. It also
// keeps the health monitor's targets in step with what runs.
func (e *Engine) List(ctx context.Context) ([]containers.Container, error) {
	cctx, cancel := e.call(ctx)
	defer cancel()
	summaries, err := e.api.ContainerList(cctx, container.ListOptions{All: true, Filters: e.ownedFilter()})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	inspected := make([]*container.InspectResponse, len(summaries))
	errs := make([]error, len(summaries))
	sem := make(chan struct{}, inspectConcurrency)
	var wg sync.WaitGroup
	for i, s := range summaries {
		if !containers.Owned(s.Labels, e.cfg.HostID) {
			continue // the filter already did this; a second check costs nothing
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, err := e.api.ContainerInspect(cctx, s.ID)
			switch {
			case cerrdefs.IsNotFound(err): // removed since the list
			case err != nil:
				errs[i] = fmt.Errorf("list containers: inspect %s: %w", short(s.ID), err)
			default:
				inspected[i] = &c
			}
		}()
	}
	wg.Wait()
	out := make([]containers.Container, 0, len(summaries))
	running := map[string]target{}
	for i, c := range inspected {
		if errs[i] != nil {
			return nil, errs[i]
		}
		if c == nil {
			continue
		}
		dc, tgt, probed := e.observe(c)
		if probed {
			running[c.ID] = tgt
		}
		out = append(out, dc)
	}
	e.mon.sync(running)
	// The monitor's results, read after the sync so that a container seen for
	// the first time shows "no result yet" rather than a stale one.
	for i := range out {
		if t, ok := running[out[i].ID]; ok {
			r := e.mon.result(out[i].ID, t)
			out[i].Healthy, out[i].FailingStreak = r.healthy, r.streak
		}
	}
	return e.tasks.Overlay(out), nil
}

// observe turns an inspected container into the agent's view. For a running
// container judged by an agent-side probe it also returns the probe target.
func (e *Engine) observe(c *container.InspectResponse) (containers.Container, target, bool) {
	dc := containers.FromLabels(c.ID, trimSlash(c.Name), c.Config.Labels)
	dc.Created = parseTime(c.Created)
	if c.State == nil {
		dc.State = contract.StateUnknown
		return dc, target{}, false
	}
	dc.State = containers.StateFromDocker(string(c.State.Status), c.State.ExitCode)
	dc.Paused = c.State.Paused
	dc.StartedAt = parseTime(c.State.StartedAt)
	dc.FinishedAt = parseTime(c.State.FinishedAt)
	if dc.State != contract.StateRunning {
		dc.ExitCode = c.State.ExitCode
		return dc, target{}, false
	}
	w, known := e.workload(dc.WorkloadID)
	dc.IP = containerAddr(c, w)
	if dc.RunID != "" {
		// A run's container serves nothing and is never probed: it shares
		// its egg's workload, whose probes are the replicas'.
		return dc, target{}, false
	}
	if known {
		if p, ok := agentProbe(w); ok {
			t := target{probe: p, addr: dc.IP, startedAt: dc.StartedAt, paused: dc.Paused}
			return dc, t, true
		}
	}
	if h := c.State.Health; h != nil {
		// A Docker HEALTHCHECK (the image's, or the spec's cmd): Docker
		// probes, already skipping failures in the start period.
		dc.Healthy = len(h.Log) > 0 && h.Log[len(h.Log)-1].ExitCode == 0 && !dc.Paused
		dc.FailingStreak = h.FailingStreak
		return dc, target{}, false
	}
	if known && w.Port > 0 {
		t := target{probe: tcpOnPort(w), addr: dc.IP, startedAt: dc.StartedAt, paused: dc.Paused}
		return dc, t, true
	}
	dc.Healthy = !dc.Paused // running, and nothing more to check
	return dc, target{}, false
}

// containerAddr returns the container's IP on the workload's first network
// (the one it was created on), or on any network.
func containerAddr(c *container.InspectResponse, w contract.WorkloadSpec) string {
	if c.NetworkSettings == nil {
		return ""
	}
	if len(w.Networks) > 0 {
		if ep, ok := c.NetworkSettings.Networks[w.Networks[0]]; ok && ep != nil && ep.IPAddress != "" {
			return ep.IPAddress
		}
	}
	for _, ep := range c.NetworkSettings.Networks {
		if ep != nil && ep.IPAddress != "" {
			return ep.IPAddress
		}
	}
	return ""
}

func trimSlash(name string) string {
	if len(name) > 0 && name[0] == '/' {
		return name[1:]
	}
	return name
}

// parseTime reads Docker's RFC 3339 times; its zero time
// ("0001-01-01T00:00:00Z") and garbage read as the zero time.
func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() <= 1 {
		return time.Time{}
	}
	return t
}
