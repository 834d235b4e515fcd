package desired

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/placement"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

// Failover (docs/BACKUPS.md): a volume with failover whose host is lost
// moves to another host, restored there from its last good backup; the
// copy on the lost host stays listed in that host's state as stale
// (contract.StaleCopy), so nothing mounts it, nothing deletes it, and the
// user can still take what it holds.

// FailoverHost chooses the host a failed-over volume is restored on: the
// scheduler's choice for a new volume of that egg, among the live hosts
// (so never the lost one) that hold no stale copy of it (a restore there
// would write over that copy, whose Docker name it would have). Forgotten
// copies (marked for deletion) do not count.
func (s *States) FailoverHost(ctx context.Context, project, name string, in inputs.Volume) (string, error) {
	v, err := s.read(ctx)
	if err != nil {
		return "", err
	}
	var hosts []placement.Host
	var stale []string
	for _, h := range v.scheduled() {
		if slices.ContainsFunc(v.states[h.ID].Volumes, func(vol contract.VolumeSpec) bool {
			return vol.Stale != nil && !vol.Delete && vol.Name == name && resource.Project(vol.Namespace, vol.Project) == project
		}) {
			stale = append(stale, v.name(h.ID))
			continue
		}
		hosts = append(hosts, h)
	}
	in.Placement.VolumeHost = ""
	host, err := s.chooseVolumeHost(v, project, name, in, hosts)
	if err != nil && len(stale) > 0 {
		return "", fmt.Errorf("%w (hosts %s hold a stale copy of it, which a restore would overwrite: hatch volume forget --stale-copy one of them to let the volume go there)",
			err, strings.Join(stale, ", "))
	}
	return host, err
}

// FailoverMove is a volume's move from its lost host to another.
type FailoverMove struct {
	Project, Volume string
	From, To        string
	At              time.Time
	// Restore writes the volume's backup on To. It is delivered in the
	// same write, so the egg is held at 0 replicas there (HoldsEgg) from
	// the moment it is placed on To until the restore is released.
	Restore VolumeTaskDelivery
}

// MoveVolume marks the volume's copy on From stale, lists the volume as
// kept on To and delivers the restore, in one write. Done again, it
// changes nothing.
func (s *States) MoveVolume(ctx context.Context, m FailoverMove) error {
	if m.Restore.Host != m.To || m.Restore.Task.Kind != contract.TaskRestore {
		return fmt.Errorf("volume %s's failover: the restore must be on host %s", m.Volume, m.To)
	}
	return s.update(ctx, func(v *view) error {
		if d, ok := v.states[m.From]; ok {
			for i := range d.Volumes {
				vol := &d.Volumes[i]
				if resource.Project(vol.Namespace, vol.Project) == m.Project && vol.Name == m.Volume && !vol.Delete && vol.Stale == nil {
					vol.Stale = &contract.StaleCopy{Since: m.At, MovedTo: m.To}
				}
			}
		}
		if err := v.keepVolume(m.Project, m.Volume, m.To); err != nil {
			return err
		}
		return v.deliverVolumeTask(m.Restore)
	})
}

// StaleCopy is a volume's copy left on a lost host by a failover.
type StaleCopy struct {
	Volume     string
	Host       string
	DockerName string
	contract.StaleCopy
}

// StaleCopies lists the project's stale copies not marked for deletion,
// by volume then host.
func (s *States) StaleCopies(ctx context.Context, project string) ([]StaleCopy, error) {
	v, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	var out []StaleCopy
	for host, d := range v.states {
		for _, vol := range d.Volumes {
			if vol.Stale != nil && !vol.Delete && resource.Project(vol.Namespace, vol.Project) == project {
				out = append(out, StaleCopy{Volume: vol.Name, Host: host, DockerName: vol.DockerName, StaleCopy: *vol.Stale})
			}
		}
	}
	slices.SortFunc(out, func(a, b StaleCopy) int {
		return strings.Compare(a.Volume+" "+a.Host, b.Volume+" "+b.Host)
	})
	return out, nil
}

// FindStaleCopies records as found, at the time given, the stale copies
// of the hosts heard from (by ID: the host's last report) after their
// failover, and returns them with the project of each.
func (s *States) FindStaleCopies(ctx context.Context, heard map[string]time.Time) (map[string][]StaleCopy, error) {
	found := map[string][]StaleCopy{}
	// Read first: the loop asks every pass, and most find none, which
	// need not wait for the lock of every write of desired states.
	v, err := s.read(ctx)
	if err != nil || !v.anyStaleHeard(heard) {
		return found, err
	}
	err = s.update(ctx, func(v *view) error {
		clear(found)
		for host, d := range v.states {
			at, ok := heard[host]
			if !ok {
				continue
			}
			for i := range d.Volumes {
				vol := &d.Volumes[i]
				if !staleHeard(*vol, at) {
					continue
				}
				vol.Stale.Found = at
				p := resource.Project(vol.Namespace, vol.Project)
				found[p] = append(found[p], StaleCopy{Volume: vol.Name, Host: host, DockerName: vol.DockerName, StaleCopy: *vol.Stale})
			}
		}
		return nil
	})
	return found, err
}

// anyStaleHeard says whether a stale copy not yet found is on a host heard
// after its failover.
func (v *view) anyStaleHeard(heard map[string]time.Time) bool {
	for host, d := range v.states {
		at, ok := heard[host]
		if ok && slices.ContainsFunc(d.Volumes, func(vol contract.VolumeSpec) bool { return staleHeard(vol, at) }) {
			return true
		}
	}
	return false
}

// staleHeard says whether vol is a stale copy not yet found whose host was
// heard at, after its failover.
func staleHeard(vol contract.VolumeSpec, at time.Time) bool {
	return vol.Stale != nil && vol.Stale.Found.IsZero() && at.After(vol.Stale.Since)
}

// DeleteStaleCopy marks the volume's stale copy on host for deletion
// (hatch volume forget --stale-copy), and returns its Docker name.
func (s *States) DeleteStaleCopy(ctx context.Context, project, name, host string) (string, error) {
	var docker string
	err := s.update(ctx, func(v *view) error {
		d, ok := v.states[host]
		if ok {
			for i := range d.Volumes {
				vol := &d.Volumes[i]
				if vol.Stale != nil && !vol.Delete && vol.Name == name && resource.Project(vol.Namespace, vol.Project) == project {
					vol.Delete, docker = true, vol.DockerName
				}
			}
		}
		if docker == "" {
			return fmt.Errorf("%w: volume %s of %s has no stale copy on host %s", ErrNoStaleCopy, name, project, host)
		}
		return nil
	})
	return docker, err
}

// ErrNoStaleCopy is wrapped by DeleteStaleCopy's error when there is no
// such copy.
var ErrNoStaleCopy = errors.New("no stale copy")
