package desired

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/cenkalti/backoff/v4"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/placement"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/store"
)

// PlaceVolume chooses the host of the deployed volume, or adopts the host
// that lists it already (an earlier attempt, or a volume retained after it
// left the file and now back: its data is there), lists it as kept there,
// and returns that host.
func (s *States) PlaceVolume(ctx context.Context, project string, r *resource.Deployed) (string, error) {
	in, err := decode[inputs.Volume](r.Key(), r.Inputs)
	if err != nil {
		return "", err
	}
	var host string
	err = s.update(ctx, func(v *view) error {
		var err error
		if host, err = s.volumeHost(v, project, r.Name, in); err != nil {
			return err
		}
		return v.keepVolume(project, r.Name, host)
	})
	return host, err
}

// KeepVolume lists the project's volume as kept on host, and only there.
func (s *States) KeepVolume(ctx context.Context, project, name, host string) error {
	return s.update(ctx, func(v *view) error { return v.keepVolume(project, name, host) })
}

// RemoveVolume retains the project's volume on its host, or, with
// deleteData, marks it for deletion there; an event says which.
func (s *States) RemoveVolume(ctx context.Context, project, name string, deleteData bool) error {
	e := store.Event{Project: project, Resource: resource.Key(resource.Volume, name)}
	err := s.update(ctx, func(v *view) error {
		host, ok := v.volumeEntry(project, name)
		if !ok {
			return nil // never listed, or deleted already
		}
		if deleteData {
			v.markVolumeDeleted(project, name)
			e.Type, e.Host = store.EventVolumeDeleted, host
			e.Message = fmt.Sprintf("volume %s of %s is deleted from host %s", name, project, v.name(host))
			return nil
		}
		e.Type, e.Host = store.EventVolumeRetained, host
		e.Message = fmt.Sprintf("volume %s of %s left the project file and is kept on host %s (hatch destroy --volumes deletes it)",
			name, project, v.name(host))
		return nil
	})
	if err == nil && e.Type != "" {
		s.event(ctx, e)
	}
	return err
}

// volumeHost is where a new volume lives: where it is listed already, else on
// its egg's first volume's host (a second volume of one egg), else the host
// the scheduler chooses from the egg's placement and resources.
func (s *States) volumeHost(v *view, project, name string, in inputs.Volume) (string, error) {
	if host, ok := v.volumeEntry(project, name); ok {
		return host, nil
	}
	if in.Placement.VolumeHost != "" {
		return in.Placement.VolumeHost, nil
	}
	return s.chooseVolumeHost(v, project, name, in, v.scheduled())
}

// chooseVolumeHost is the host the scheduler chooses for the volume from
// its egg's placement and resources, among the live hosts of hosts.
func (s *States) chooseVolumeHost(v *view, project, name string, in inputs.Volume, hosts []placement.Host) (string, error) {
	ns, proj, err := resource.SplitProject(project)
	if err != nil {
		return "", backoff.Permanent(err)
	}
	consumer := placement.Egg{Namespace: ns, Project: proj, Name: in.Egg, Replicas: 1,
		PerReplica: request(in.Resources), Placement: in.Placement.Hosts}
	if in.Egg == "" {
		consumer.Name = name // a volume no egg mounts yet
	} else {
		consumer.Current = v.slotsOf(contract.WorkloadID(ns, proj, in.Egg))
	}
	choice, err := s.sched.ChooseVolumeHost(name, consumer, hosts, s.now())
	var unplaceable *placement.UnplaceableError
	switch {
	case err == nil:
		return choice.HostID, nil
	case errors.As(err, &unplaceable) && !v.anyLive():
		return "", fmt.Errorf("%w (no host is live yet: waiting for an agent to report)", err)
	default:
		return "", backoff.Permanent(err)
	}
}

// volumeEntry returns the host listing the project's volume as kept.
// VolumeKept says whether a volume of the project is kept on a host (in use,
// or retained after it left the project file), not deleted: a rollback
// to a spec with a volume no longer kept creates it empty.
func (s *States) VolumeKept(ctx context.Context, project, name string) (bool, error) {
	v, err := s.read(ctx)
	if err != nil {
		return false, err
	}
	_, ok := v.volumeEntry(project, name)
	return ok, nil
}

func (v *view) volumeEntry(project, name string) (string, bool) {
	for host, d := range v.states {
		for _, vol := range d.Volumes {
			if resource.Project(vol.Namespace, vol.Project) == project && vol.Name == name && !vol.Delete && vol.Stale == nil {
				return host, true
			}
		}
	}
	return "", false
}

// keepVolume lists the volume as kept on host, and only there (its stale
// copies, left by a failover, stay listed where they are).
func (v *view) keepVolume(project, name, host string) error {
	d, ok := v.states[host]
	if !ok {
		return backoff.Permanent(fmt.Errorf("volume %s: its host %s is not a known host", name, host))
	}
	ns, proj, err := resource.SplitProject(project)
	if err != nil {
		return backoff.Permanent(err)
	}
	for _, s := range v.states {
		s.Volumes = slices.DeleteFunc(s.Volumes, func(vol contract.VolumeSpec) bool {
			// A stale copy forgotten (marked for deletion) on host goes too:
			// the volume kept there now has its Docker name.
			return vol.Namespace == ns && vol.Project == proj && vol.Name == name && (vol.Stale == nil || vol.Delete && s == d)
		})
	}
	d.Volumes = append(d.Volumes, contract.VolumeSpec{Namespace: ns, Project: proj, Name: name,
		DockerName: contract.VolumeName(host, ns, proj, name)})
	return nil
}

// markVolumeDeleted marks the project's volume (every volume of the project
// when name is "") for deletion wherever it is listed, and returns the names
// it marked.
func (v *view) markVolumeDeleted(project, name string) []string {
	var marked []string
	for _, d := range v.states {
		for i := range d.Volumes {
			vol := &d.Volumes[i]
			if resource.Project(vol.Namespace, vol.Project) == project && (name == "" || vol.Name == name) && !vol.Delete {
				vol.Delete = true
				marked = append(marked, vol.Name)
			}
		}
	}
	slices.Sort(marked)
	return marked
}

// DeleteVolumes marks every volume of the project for deletion, those the
// project file still had and those retained earlier (hatch destroy
// --volumes), and returns their names.
func (s *States) DeleteVolumes(ctx context.Context, project string) ([]string, error) {
	var marked []string
	err := s.update(ctx, func(v *view) error {
		marked = v.markVolumeDeleted(project, "")
		return nil
	})
	for _, name := range marked {
		s.event(ctx, store.Event{Type: store.EventVolumeDeleted, Project: project, Resource: resource.Key(resource.Volume, name),
			Message: fmt.Sprintf("volume %s of %s is deleted", name, project)})
	}
	return marked, err
}
