package docker

import (
	"context"
	"fmt"
	"strconv"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

// Start begins creating and starting a container for a slot (see
// containers.Client). The work runs as a task: get the image; create the
// networks and volumes it lacks; write its secret files; with req.Replace,
// drain, stop and remove the replaced container only now that all of that is
// ready; create the container on its first network, connect it to the
// others, start it.
// A failure after the create removes the half-made container and its
// secrets, and is kept in Failures.
func (e *Engine) Start(ctx context.Context, req containers.StartRequest) error {
	what := req.Spec.ID() + "/" + strconv.Itoa(req.Slot)
	if req.HostID != e.cfg.HostID {
		return fmt.Errorf("start %s: host %q is not this host (%q)", what, req.HostID, e.cfg.HostID)
	}
	if req.Replace != "" {
		// Refuse a foreign container before anything starts. One already gone
		// is fine: there is nothing left to replace.
		if _, err := e.inspectOwned(ctx, "start "+what+": replace", req.Replace); err != nil {
			return err
		}
	}
	e.rememberWorkload(req.Spec)
	name := contract.ContainerName(req.Spec.Namespace, req.Spec.Project, req.Spec.Egg, req.Slot, e.cfg.HostID, contract.RandomSuffix())
	task := containers.StartTask(req, name, time.Now())
	return e.run(task, func(ctx context.Context) error {
		if err := e.startSlot(ctx, req, name); err != nil {
			return fmt.Errorf("start %s: %w", what, err)
		}
		return nil
	})
}

func (e *Engine) startSlot(ctx context.Context, req containers.StartRequest, name string) error {
	w := req.Spec
	log := e.log.With(zap.String("workload", w.ID()), zap.Int("slot", req.Slot), zap.String("container", name))
	// Networks, volumes and secret files before the replaced container
	// goes: a stateful egg has no replica from its drain until the new one
	// is healthy, so that gap holds only what needs the old one gone, and
	// a failure here leaves it serving.
	ref, secretFiles, err := e.prepare(ctx, w, name)
	if err != nil {
		return err
	}
	if req.Replace != "" {
		log.Info("image ready, draining and stopping the container it replaces", zap.String("replaced", short(req.Replace)))
		if err := e.replace(ctx, req); err != nil {
			e.secrets().remove(name)
			return fmt.Errorf("replace %s: %w", short(req.Replace), err)
		}
	}
	plan := planCreate(req, ref, name, e.labels(req.Stamp.AddTo(containers.Labels(e.cfg.HostID, w, req.Slot, req.SpecHash))), secretFiles)
	id, err := e.create(ctx, plan)
	if err != nil {
		e.secrets().remove(name)
		return err
	}
	if err := e.startCreated(ctx, id, w); err != nil {
		e.discard(id, name, log)
		return err
	}
	log.Info("started container", zap.String("id", short(id)), zap.String("spec", req.SpecHash))
	return nil
}

// prepare gets what a container of w named name needs before its create:
// its image (the reference to create it from), its networks and volumes,
// and its secret files (by secret name; removed again if writing fails).
func (e *Engine) prepare(ctx context.Context, w contract.WorkloadSpec, name string) (string, map[string]string, error) {
	ref, err := e.ensureImage(ctx, w)
	if err != nil {
		return "", nil, err
	}
	if err := e.ensureNetworks(ctx, w); err != nil {
		return "", nil, err
	}
	if err := e.ensureVolumes(ctx, w); err != nil {
		return "", nil, err
	}
	secretFiles, err := e.secrets().write(name, w.Secrets, w.User)
	if err != nil {
		e.secrets().remove(name)
		return "", nil, err
	}
	return ref, secretFiles, nil
}

// replace drains the container a stop-first start supersedes, as Drain
// does, then stops and removes it: out of the ingress (which holds a
// stateful egg's new requests from then on), its requests in flight
// finished or the drain timeout passed, then the stop signal. Stopping it
// undrained cut the requests in flight, and a write among them could leave
// the volume half-written. It leaves traffic (Gone) once stopped, and also
// when the stop failed: the agent retries it, out of traffic.
func (e *Engine) replace(ctx context.Context, req containers.StartRequest) error {
	c, err := e.inspectOwned(ctx, "replace", req.Replace)
	if c == nil {
		return err // gone already (nothing to drain), or foreign
	}
	e.drainRunning(ctx, c, req.Spec.ID(), req.Slot, req.Spec.DrainTimeout())
	defer e.leaveTraffic(c.ID)
	return e.stopAndRemove(ctx, c.ID, req.Spec.EffectiveStopTimeout())
}

// create creates the container on its first network and connects it to the
// others, before it starts (API 1.41 takes one network at create).
func (e *Engine) create(ctx context.Context, p createPlan) (string, error) {
	cctx, cancel := e.call(ctx)
	defer cancel()
	resp, err := e.api.ContainerCreate(cctx, p.config, p.host, p.network, nil, p.name)
	if err != nil {
		return "", fmt.Errorf("create container %s: %w", p.name, err)
	}
	for _, c := range p.connect {
		if err := e.api.NetworkConnect(cctx, c.network, resp.ID, &network.EndpointSettings{Aliases: c.aliases}); err != nil {
			e.discard(resp.ID, p.name, e.log)
			return "", fmt.Errorf("connect %s to network %s: %w", p.name, c.network, err)
		}
	}
	return resp.ID, nil
}

// startCreated starts a created container and has the monitor probe it at
// once.
func (e *Engine) startCreated(ctx context.Context, id string, w contract.WorkloadSpec) error {
	cctx, cancel := e.call(ctx)
	defer cancel()
	if err := e.api.ContainerStart(cctx, id, container.StartOptions{}); err != nil {
		return fmt.Errorf("start container %s: %w", short(id), err)
	}
	e.track(cctx, id, w)
	return nil
}

// track hands a just-started container to the monitor, if an agent-side
// probe judges it, so its first check does not wait for the next List.
func (e *Engine) track(ctx context.Context, id string, w contract.WorkloadSpec) {
	c, err := e.api.ContainerInspect(ctx, id)
	if err != nil || c.State == nil || !c.State.Running {
		return // the next List sees whatever happened
	}
	p, ok := agentProbe(w)
	if !ok {
		if c.State.Health != nil || w.Port == 0 { // Docker judges it, or nothing to probe
			return
		}
		p = tcpOnPort(w)
	}
	e.mon.track(id, target{probe: p, addr: containerAddr(&c, w), startedAt: parseTime(c.State.StartedAt)})
}

// discard removes a container that failed half-way through its start, with
// its secrets. Its failure is the start's error; this one is only logged.
func (e *Engine) discard(id, name string, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.CallTimeout)
	defer cancel()
	err := e.api.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		log.Warn("remove half-started container", zap.String("id", short(id)), zap.Error(err))
	}
	if err := e.secrets().remove(name); err != nil {
		log.Warn("remove secrets of half-started container", zap.Error(err))
	}
}
