package desired

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource"
)

// Volume tasks (contract.VolumeTask: backups and restores) in the hosts'
// desired states: the backups service puts a recorded task in the state of
// the one host that does it (the volume's), and takes it out once its end
// is recorded. Each is one read-modify-write of the desired states; the
// caller holds the project's lease and fences its writes with it.

// VolumeTaskDelivery is a volume task to put in a host's desired state.
type VolumeTaskDelivery struct {
	Task contract.VolumeTask
	// Host is the host's ID that does it: the volume's host.
	Host string
	// TargetName is, for a restore into a new volume, that volume's name
	// in the project (Task.Target is its Docker name on Host).
	TargetName string
}

// HoldsEgg reports whether the task holds its egg's replica stopped on its
// host while it is in the desired state: a backup with consistency stop
// (the egg's stop-first window), and a restore into the volume itself (the
// volume is removed and made anew under it).
func HoldsEgg(t contract.VolumeTask) bool {
	if t.Egg == "" {
		return false
	}
	if t.Kind == contract.TaskBackup {
		return t.Consistency == contract.ConsistencyStop
	}
	return t.Target == t.Volume.DockerName
}

// DeliverVolumeTasks puts each task in its host's desired state (a task
// there already stays as it is: a retry duplicates nothing). A task that
// holds its egg (HoldsEgg) scales the egg's workload to 0 on that host; a
// restore into a new volume (Target not the volume's own) lists that
// volume as kept on the host under the name the project's volume of that
// name would have, so that nothing deletes it and an apply that adds it
// adopts it.
func (s *States) DeliverVolumeTasks(ctx context.Context, tasks []VolumeTaskDelivery) error {
	return s.update(ctx, func(v *view) error {
		for _, t := range tasks {
			if err := v.deliverVolumeTask(t); err != nil {
				return err
			}
		}
		return nil
	})
}

// deliverVolumeTask puts one task in its host's state (DeliverVolumeTasks).
func (v *view) deliverVolumeTask(t VolumeTaskDelivery) error {
	if _, ok := v.volumeTaskHost(t.Task.ID); ok {
		return nil
	}
	d, ok := v.states[t.Host]
	if !ok {
		return fmt.Errorf("volume task %s: host %s is not in the fleet", t.Task.ID, t.Host)
	}
	vol := t.Task.Volume
	if HoldsEgg(t.Task) {
		v.scaleWorkload(contract.WorkloadID(vol.Namespace, vol.Project, t.Task.Egg), t.Host, 0)
	}
	if t.Task.Kind == contract.TaskRestore && t.Task.Target != vol.DockerName {
		if err := v.keepRestoredVolume(t.Host, vol, t.TargetName, t.Task.Target); err != nil {
			return err
		}
	}
	d.VolumeTasks = append(d.VolumeTasks, t.Task)
	slices.SortFunc(d.VolumeTasks, func(a, b contract.VolumeTask) int { return strings.Compare(a.ID, b.ID) })
	return nil
}

// keepRestoredVolume lists the Docker volume target, a restore's new
// volume beside vol, as kept on host under name, the project's volume
// whose Docker name it is (checked: a restore never lists a volume under a
// name that is not its own).
func (v *view) keepRestoredVolume(host string, vol contract.VolumeSpec, name, target string) error {
	if contract.VolumeName(host, vol.Namespace, vol.Project, name) != target {
		return fmt.Errorf("restore target %q is not the Docker name of volume %s of %s/%s on host %s", target, name,
			vol.Namespace, vol.Project, host)
	}
	d := v.states[host]
	for _, kept := range d.Volumes {
		if kept.DockerName == target && !kept.Delete {
			return nil
		}
	}
	d.Volumes = slices.DeleteFunc(d.Volumes, func(k contract.VolumeSpec) bool { return k.DockerName == target })
	d.Volumes = append(d.Volumes, contract.VolumeSpec{Namespace: vol.Namespace, Project: vol.Project, Name: name, DockerName: target})
	return nil
}

// ReleaseVolumeTasks takes these tasks out of their hosts' desired states,
// and then places again the eggs given (those a task held stopped), by
// their records.
func (s *States) ReleaseVolumeTasks(ctx context.Context, project string, ids []string, eggs []*resource.Deployed) error {
	err := s.update(ctx, func(v *view) error {
		for _, d := range v.states {
			d.VolumeTasks = slices.DeleteFunc(d.VolumeTasks, func(t contract.VolumeTask) bool { return slices.Contains(ids, t.ID) })
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, rec := range eggs {
		e, err := NewEgg(project, rec.Name, rec.Inputs, rec.Source, RevisionOf(rec.Outputs))
		if err != nil {
			return err
		}
		if _, err := s.place(ctx, project, e); err != nil {
			return fmt.Errorf("start egg %s again after its volume's task: %w", rec.Name, err)
		}
	}
	return nil
}

// VolumeTaskHost returns the host whose desired state holds the task.
func (s *States) VolumeTaskHost(ctx context.Context, id string) (string, bool, error) {
	v, err := s.read(ctx)
	if err != nil {
		return "", false, err
	}
	host, ok := v.volumeTaskHost(id)
	return host, ok, nil
}

// VolumeHost returns the host that keeps the project's volume, if any
// does, and the volume's Docker name there.
func (s *States) VolumeHost(ctx context.Context, project, name string) (host, dockerName string, ok bool, err error) {
	v, err := s.read(ctx)
	if err != nil {
		return "", "", false, err
	}
	host, ok = v.volumeEntry(project, name)
	if !ok {
		return "", "", false, nil
	}
	for _, vol := range v.states[host].Volumes {
		if resource.Project(vol.Namespace, vol.Project) == project && vol.Name == name && !vol.Delete && vol.Stale == nil {
			dockerName = vol.DockerName
		}
	}
	return host, dockerName, true, nil
}

func (v *view) volumeTaskHost(id string) (string, bool) {
	for host, d := range v.states {
		if slices.ContainsFunc(d.VolumeTasks, func(t contract.VolumeTask) bool { return t.ID == id }) {
			return host, true
		}
	}
	return "", false
}

// holdForVolumeTasks keeps an egg's replica stopped on each host whose
// state holds a task that holds it (HoldsEgg), whoever places the egg
// meanwhile (an apply, a restart). ReleaseVolumeTasks places it again.
func (v *view) holdForVolumeTasks(e Egg, specs map[string]contract.WorkloadSpec) {
	for host, w := range specs {
		if slices.ContainsFunc(v.states[host].VolumeTasks, func(t contract.VolumeTask) bool {
			return HoldsEgg(t) && t.Egg == e.name && t.Volume.Namespace == e.namespace && t.Volume.Project == e.project
		}) {
			w.Replicas = 0
			specs[host] = w
		}
	}
}

// VolumeMounts returns the IDs of the workloads of host's desired state
// that mount the Docker volume (their containers would hold it open).
func (s *States) VolumeMounts(ctx context.Context, host, dockerName string) ([]string, error) {
	v, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	d, ok := v.states[host]
	if !ok {
		return nil, nil
	}
	var out []string
	for _, w := range d.Workloads {
		if slices.ContainsFunc(w.Volumes, func(m contract.VolumeMount) bool { return m.DockerName == dockerName }) {
			out = append(out, w.ID())
		}
	}
	return out, nil
}
