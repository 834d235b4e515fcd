package docker

import (
	"context"
	"errors"
	"fmt"
	"slices"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

// ErrForeign reports an object that has the name the Engine wants but is not
// this host's: the Engine neither uses nor changes it.
var ErrForeign = errors.New("exists but is not this host's Hatchery object")

// objectLabels are the labels of a network or volume of a project.
// TODO(docker): move beside containers.Labels, which covers containers only.
func (e *Engine) objectLabels(namespace, project string) map[string]string {
	return e.labels(map[string]string{
		containers.LabelManaged:   "true",
		containers.LabelHost:      e.cfg.HostID,
		containers.LabelNamespace: namespace,
		containers.LabelProject:   project,
	})
}

// ensureNetworks creates the workload's networks that do not exist yet.
// Networks are created one at a time per Engine: Docker 20.10 allows two
// networks of the same name when two creates race.
func (e *Engine) ensureNetworks(ctx context.Context, w contract.WorkloadSpec) error {
	e.netMu.Lock()
	defer e.netMu.Unlock()
	for _, name := range w.Networks {
		if err := e.ensureNetwork(ctx, name, w); err != nil {
			return err
		}
	}
	return nil
}

func (e *Engine) ensureNetwork(ctx context.Context, name string, w contract.WorkloadSpec) error {
	ctx, cancel := e.call(ctx)
	defer cancel()
	n, err := e.api.NetworkInspect(ctx, name, network.InspectOptions{})
	switch {
	case err == nil && n.Name == name:
		if !containers.Owned(n.Labels, e.cfg.HostID) {
			return fmt.Errorf("network %s %w", name, ErrForeign)
		}
		return nil
	case err != nil && !cerrdefs.IsNotFound(err):
		return fmt.Errorf("inspect network %s: %w", name, err)
	}
	_, err = e.api.NetworkCreate(ctx, name, network.CreateOptions{
		Driver: "bridge",
		Labels: e.objectLabels(w.Namespace, w.Project),
	})
	if err != nil {
		return fmt.Errorf("create network %s: %w", name, err)
	}
	return nil
}

// ensureVolumes creates the workload's named volumes that do not exist yet.
func (e *Engine) ensureVolumes(ctx context.Context, w contract.WorkloadSpec) error {
	for _, v := range w.Volumes {
		if err := e.ensureVolume(ctx, v.DockerName, w); err != nil {
			return err
		}
	}
	return nil
}

func (e *Engine) ensureVolume(ctx context.Context, name string, w contract.WorkloadSpec) error {
	ctx, cancel := e.call(ctx)
	defer cancel()
	v, err := e.api.VolumeInspect(ctx, name)
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspect volume %s: %w", name, err)
	}
	if err != nil {
		// Creating a volume that exists returns it unchanged: a race with
		// another create gives the same volume, whose labels are checked.
		v, err = e.api.VolumeCreate(ctx, volume.CreateOptions{Name: name, Labels: e.objectLabels(w.Namespace, w.Project)})
		if err != nil {
			return fmt.Errorf("create volume %s: %w", name, err)
		}
	}
	if !containers.Owned(v.Labels, e.cfg.HostID) {
		return fmt.Errorf("volume %s %w", name, ErrForeign)
	}
	return nil
}

// RemoveVolumes deletes the volumes the desired state marks for deletion
// (hatch destroy --volumes), and only those: a volume is kept or deleted by
// that list, never by its labels or by being unused. A volume still mounted
// by a container stays, and is an error, so the agent tries again after the
// container is gone. Volumes that are not this host's are never removed.
func (e *Engine) RemoveVolumes(ctx context.Context, vols []contract.VolumeSpec) error {
	var errs []error
	for _, v := range vols {
		if !v.Delete {
			continue
		}
		name := v.DockerName
		if name == "" {
			name = contract.VolumeName(e.cfg.HostID, v.Namespace, v.Project, v.Name)
		}
		errs = append(errs, e.removeVolume(ctx, name))
	}
	return errors.Join(errs...)
}

func (e *Engine) removeVolume(ctx context.Context, name string) error {
	ctx, cancel := e.call(ctx)
	defer cancel()
	v, err := e.api.VolumeInspect(ctx, name)
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove volume %s: %w", name, err)
	}
	if !containers.Owned(v.Labels, e.cfg.HostID) {
		return fmt.Errorf("remove volume %s: %w", name, ErrForeign)
	}
	if err := e.api.VolumeRemove(ctx, name, false); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove volume %s: %w", name, err)
	}
	e.log.Info("removed volume, as the desired state asked", zap.String("volume", name))
	return nil
}

// PruneNetworks removes this host's networks that are not in keep and that
// no container uses. Docker 20.10 runs out of address pools after about 30
// bridge networks, so networks no longer wanted must go.
func (e *Engine) PruneNetworks(ctx context.Context, keep []string) error {
	e.netMu.Lock()
	defer e.netMu.Unlock()
	lctx, cancel := e.call(ctx)
	defer cancel()
	ns, err := e.api.NetworkList(lctx, network.ListOptions{Filters: e.ownedFilter()})
	if err != nil {
		return fmt.Errorf("prune networks: %w", err)
	}
	var errs []error
	for _, n := range ns {
		if slices.Contains(keep, n.Name) || !containers.Owned(n.Labels, e.cfg.HostID) {
			continue
		}
		// The list does not say which containers use a network; inspect does.
		full, err := e.api.NetworkInspect(lctx, n.ID, network.InspectOptions{})
		if cerrdefs.IsNotFound(err) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("prune network %s: %w", n.Name, err))
			continue
		}
		if len(full.Containers) > 0 {
			continue
		}
		if err := e.api.NetworkRemove(lctx, n.ID); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("prune network %s: %w", n.Name, err))
		}
	}
	return errors.Join(errs...)
}
