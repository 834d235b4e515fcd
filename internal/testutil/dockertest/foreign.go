package dockertest

import (
	"context"
	"fmt"
	cerrdefs "github.com/containerd/errdefs"
	"maps"
	"slices"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
)

// ForeignOptions says which foreign objects to set beside the code under
// test. Two sets are created, each a running container on its own network
// with its own volume mounted:
//
//   - unmanaged: no Hatchery label but the test's own run and scope labels
//     (which the harness needs to remove them), under the given names, which
//     should be the names the agent would choose in another namespace, so
//     that code matching objects by name rather than by label takes them
//     for its own;
//   - other host: labelled exactly as another host's agent would label its
//     objects (OtherHostLabels), so code that forgets the host label in a
//     filter takes them for its own.
type ForeignOptions struct {
	// Image runs the foreign containers; it must stay up (the test app does).
	Image string
	// Names of the unmanaged objects; an empty one is generated.
	ContainerName, NetworkName, VolumeName string
	// OtherHostLabels are put on the other host's objects. Empty: no such set.
	OtherHostLabels map[string]string
}

// Foreign is a set of foreign objects and what they looked like when made.
type Foreign struct {
	cli        client.APIClient
	containers []string // IDs
	networks   []string // IDs
	volumes    []string // names
	before     Snapshot
}

// ContainerIDs returns the foreign containers' IDs.
func (f *Foreign) ContainerIDs() []string { return slices.Clone(f.containers) }

// NetworkIDs returns the foreign networks' IDs.
func (f *Foreign) NetworkIDs() []string { return slices.Clone(f.networks) }

// VolumeNames returns the foreign volumes' names.
func (f *Foreign) VolumeNames() []string { return slices.Clone(f.volumes) }

// CreateForeign creates the foreign objects and records their state. The
// scope's cleanup removes them.
func (s *Scope) CreateForeign(opts ForeignOptions) *Foreign {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.t.Context(), callTimeout)
	defer cancel()
	f := &Foreign{cli: s.Client}
	name := func(given, kind string) string {
		if given != "" {
			return given
		}
		return s.Name("foreign", kind)
	}
	if err := f.create(ctx, s, opts.Image, name(opts.ContainerName, "c"), name(opts.NetworkName, "n"), name(opts.VolumeName, "v"), nil); err != nil {
		s.t.Fatal(err)
	}
	if len(opts.OtherHostLabels) > 0 {
		if err := f.create(ctx, s, opts.Image, s.Name("otherhost", "c"), s.Name("otherhost", "n"), s.Name("otherhost", "v"), opts.OtherHostLabels); err != nil {
			s.t.Fatal(err)
		}
	}
	snap, err := f.snapshot(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	f.before = snap
	return f
}

func (f *Foreign) create(ctx context.Context, s *Scope, img, cName, nName, vName string, extra map[string]string) error {
	labels := s.Labels(extra)
	n, err := f.cli.NetworkCreate(ctx, nName, network.CreateOptions{Labels: labels})
	if err != nil {
		return fmt.Errorf("create foreign network %s: %w", nName, err)
	}
	f.networks = append(f.networks, n.ID)
	if _, err := f.cli.VolumeCreate(ctx, volume.CreateOptions{Name: vName, Labels: labels}); err != nil {
		return fmt.Errorf("create foreign volume %s: %w", vName, err)
	}
	f.volumes = append(f.volumes, vName)
	c, err := f.cli.ContainerCreate(ctx,
		&container.Config{Image: img, Labels: labels, Env: []string{"APP_VERSION=foreign", "APP_COUNT_FILE=/data/count"}},
		&container.HostConfig{NetworkMode: container.NetworkMode(nName), Binds: []string{vName + ":/data"}},
		nil, nil, cName)
	if err != nil {
		return fmt.Errorf("create foreign container %s: %w", cName, err)
	}
	f.containers = append(f.containers, c.ID)
	if err := f.cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		return fmt.Errorf("start foreign container %s: %w", cName, err)
	}
	return nil
}

// Snapshot is what the harness compares of foreign objects: everything a
// careless stop, restart, reconnect, relabel or re-creation would change.
type Snapshot struct {
	Containers map[string]ContainerState // by ID
	Networks   map[string]NetworkState   // by ID
	Volumes    map[string]VolumeState    // by name
}

// ContainerState is the comparable state of one container. A missing
// container has Exists false.
type ContainerState struct {
	Exists    bool
	Name      string
	Status    string
	StartedAt string
	Restarts  int
	Labels    map[string]string
	Networks  []string // names, sorted
	Mounts    []string // "source:destination", sorted
}

// NetworkState is the comparable state of one network.
type NetworkState struct {
	Exists     bool
	Name       string
	Created    string
	Labels     map[string]string
	Containers []string // IDs, sorted
}

// VolumeState is the comparable state of one volume.
type VolumeState struct {
	Exists    bool
	CreatedAt string
	Labels    map[string]string
}

func (f *Foreign) snapshot(ctx context.Context) (Snapshot, error) {
	snap := Snapshot{Containers: map[string]ContainerState{}, Networks: map[string]NetworkState{}, Volumes: map[string]VolumeState{}}
	for _, id := range f.containers {
		c, err := f.cli.ContainerInspect(ctx, id)
		if cerrdefs.IsNotFound(err) {
			snap.Containers[id] = ContainerState{}
			continue
		}
		if err != nil {
			return Snapshot{}, fmt.Errorf("inspect foreign container %s: %w", id[:12], err)
		}
		st := ContainerState{Exists: true, Name: c.Name, Restarts: c.RestartCount, Labels: c.Config.Labels}
		if c.State != nil {
			st.Status, st.StartedAt = string(c.State.Status), c.State.StartedAt
		}
		if c.NetworkSettings != nil {
			st.Networks = slices.Sorted(maps.Keys(c.NetworkSettings.Networks))
		}
		for _, m := range c.Mounts {
			src := m.Name
			if src == "" {
				src = m.Source
			}
			st.Mounts = append(st.Mounts, src+":"+m.Destination)
		}
		slices.Sort(st.Mounts)
		snap.Containers[id] = st
	}
	for _, id := range f.networks {
		n, err := f.cli.NetworkInspect(ctx, id, network.InspectOptions{})
		if cerrdefs.IsNotFound(err) {
			snap.Networks[id] = NetworkState{}
			continue
		}
		if err != nil {
			return Snapshot{}, fmt.Errorf("inspect foreign network %s: %w", id[:12], err)
		}
		snap.Networks[id] = NetworkState{
			Exists: true, Name: n.Name, Created: n.Created.String(), Labels: n.Labels,
			Containers: slices.Sorted(maps.Keys(n.Containers)),
		}
	}
	for _, name := range f.volumes {
		v, err := f.cli.VolumeInspect(ctx, name)
		if cerrdefs.IsNotFound(err) {
			snap.Volumes[name] = VolumeState{}
			continue
		}
		if err != nil {
			return Snapshot{}, fmt.Errorf("inspect foreign volume %s: %w", name, err)
		}
		snap.Volumes[name] = VolumeState{Exists: true, CreatedAt: v.CreatedAt, Labels: v.Labels}
	}
	return snap, nil
}

// Changes returns one line per difference between the foreign objects as
// they were made and as they are now; none means untouched.
func (f *Foreign) Changes(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	now, err := f.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return Diff(f.before, now), nil
}

// AssertUntouched fails the test if any foreign object changed.
func (f *Foreign) AssertUntouched(t testing.TB) {
	t.Helper()
	changes, err := f.Changes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range changes {
		t.Errorf("foreign object changed: %s", c)
	}
}

// Diff lists the differences between two snapshots, in a stable order.
func Diff(before, after Snapshot) []string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(before.Containers)) {
		b, a := before.Containers[id], after.Containers[id]
		what := "container " + b.Name
		switch {
		case !a.Exists:
			out = append(out, what+": removed")
		case a.Name != b.Name:
			out = append(out, fmt.Sprintf("%s: renamed to %s", what, a.Name))
		case a.Status != b.Status:
			out = append(out, fmt.Sprintf("%s: %s, was %s", what, a.Status, b.Status))
		case a.StartedAt != b.StartedAt || a.Restarts != b.Restarts:
			out = append(out, what+": restarted")
		case !maps.Equal(a.Labels, b.Labels):
			out = append(out, fmt.Sprintf("%s: labels %v, were %v", what, a.Labels, b.Labels))
		case !slices.Equal(a.Networks, b.Networks):
			out = append(out, fmt.Sprintf("%s: on networks %v, was on %v", what, a.Networks, b.Networks))
		case !slices.Equal(a.Mounts, b.Mounts):
			out = append(out, fmt.Sprintf("%s: mounts %v, were %v", what, a.Mounts, b.Mounts))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(before.Networks)) {
		b, a := before.Networks[id], after.Networks[id]
		what := "network " + b.Name
		switch {
		case !a.Exists:
			out = append(out, what+": removed")
		case a.Name != b.Name || a.Created != b.Created:
			out = append(out, what+": re-created")
		case !maps.Equal(a.Labels, b.Labels):
			out = append(out, fmt.Sprintf("%s: labels %v, were %v", what, a.Labels, b.Labels))
		case !slices.Equal(a.Containers, b.Containers):
			out = append(out, fmt.Sprintf("%s: containers %d, were %d", what, len(a.Containers), len(b.Containers)))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(before.Volumes)) {
		b, a := before.Volumes[name], after.Volumes[name]
		what := "volume " + name
		switch {
		case !a.Exists:
			out = append(out, what+": removed")
		case a.CreatedAt != b.CreatedAt:
			out = append(out, what+": re-created")
		case !maps.Equal(a.Labels, b.Labels):
			out = append(out, fmt.Sprintf("%s: labels %v, were %v", what, a.Labels, b.Labels))
		}
	}
	return out
}
