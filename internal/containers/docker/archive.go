package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/containers"
)

// Volume tasks (backups and restores) read and write a volume only through
// Docker's archive API (GET and PUT /containers/{id}/archive), on a helper
// container that is created mounting the volume and never started: Docker
// mounts a container's volumes for the archive calls of a created container
// too (Engine 20.10 and later). No host path of Docker's is ever read.
//
// A helper is made from the agent's own local image (the relay's,
// hatch-relay:<binary hash>, built from the agent's binary when missing:
// never pulled). It carries LabelVolumeHelper (not LabelManaged), so the
// converge and List never see it; a helper left by an agent that died is
// removed by RemoveVolumeHelpers.

// HelperMountPath is where a helper mounts its volume. A backup's tar stream
// names every file under it ("hatch-volume/..."), and a restore writes the
// stream at "/", so the paths meet again in the volume whatever it holds.
const HelperMountPath = "/hatch-volume"

// LabelVolumeHelper marks a volume task's helper container with the host
// whose agent made it.
const LabelVolumeHelper = containers.LabelPrefix + "volume-helper"

// archiveAPI is the part of the Engine API volume tasks use beyond
// dockerAPI. A *client.Client is one; an API wrapped by a test without it
// gets an error naming the missing capability.
type archiveAPI interface {
	CopyFromContainer(ctx context.Context, containerID, srcPath string) (io.ReadCloser, container.PathStat, error)
	CopyToContainer(ctx context.Context, containerID, dstPath string, content io.Reader, options container.CopyToContainerOptions) error
	ContainerExecCreate(ctx context.Context, containerID string, options container.ExecOptions) (container.ExecCreateResponse, error)
	ContainerExecAttach(ctx context.Context, execID string, config container.ExecAttachOptions) (types.HijackedResponse, error)
	ContainerExecInspect(ctx context.Context, execID string) (container.ExecInspect, error)
}

var _ archiveAPI = (*client.Client)(nil)

func (e *Engine) archiveAPI() (archiveAPI, error) {
	a, ok := e.api.(archiveAPI)
	if !ok {
		return nil, errors.New("this Docker client has no archive or exec calls")
	}
	return a, nil
}

// ReadVolume streams the tar of the volume's content (every name under
// "hatch-volume/") to read, through a never-started helper made from image
// mounting the volume read-only. The helper is removed afterwards, whatever
// read did. The volume must exist and be this host's.
func (e *Engine) ReadVolume(ctx context.Context, image, name string, read func(io.Reader) error) error {
	api, err := e.archiveAPI()
	if err != nil {
		return fmt.Errorf("read volume %s: %w", name, err)
	}
	if _, err := e.ownedVolume(ctx, name); err != nil {
		return fmt.Errorf("read volume %s: %w", name, err)
	}
	id, err := e.createHelper(ctx, image, name, true)
	if err != nil {
		return fmt.Errorf("read volume %s: %w", name, err)
	}
	defer e.removeHelper(id)
	// No call timeout: the stream is as long as the volume; ctx bounds it.
	rc, _, err := api.CopyFromContainer(ctx, id, HelperMountPath)
	if err != nil {
		return fmt.Errorf("read volume %s: archive: %w", name, err)
	}
	defer rc.Close()
	if err := read(rc); err != nil {
		return fmt.Errorf("read volume %s: %w", name, err)
	}
	return nil
}

// WriteVolume writes a tar stream that ReadVolume made into the volume,
// through a never-started helper made from image mounting it. The archive
// API merges into what is there and deletes nothing: a restore recreates
// the volume first (RecreateVolume).
func (e *Engine) WriteVolume(ctx context.Context, image, name string, tarStream io.Reader) error {
	api, err := e.archiveAPI()
	if err != nil {
		return fmt.Errorf("write volume %s: %w", name, err)
	}
	if _, err := e.ownedVolume(ctx, name); err != nil {
		return fmt.Errorf("write volume %s: %w", name, err)
	}
	id, err := e.createHelper(ctx, image, name, false)
	if err != nil {
		return fmt.Errorf("write volume %s: %w", name, err)
	}
	defer e.removeHelper(id)
	if err := api.CopyToContainer(ctx, id, "/", tarStream, container.CopyToContainerOptions{}); err != nil {
		return fmt.Errorf("write volume %s: archive: %w", name, err)
	}
	return nil
}

// VolumeUsers returns the names of the containers that mount the volume:
// every one, or only the running ones. Any container counts, Hatchery's or
// not: what matters is who may write the volume.
func (e *Engine) VolumeUsers(ctx context.Context, name string, runningOnly bool) ([]string, error) {
	ctx, cancel := e.call(ctx)
	defer cancel()
	args := filters.NewArgs(filters.Arg("volume", name))
	if runningOnly {
		args.Add("status", "running")
	}
	found, err := e.api.ContainerList(ctx, container.ListOptions{All: !runningOnly, Filters: args})
	if err != nil {
		return nil, fmt.Errorf("list the containers of volume %s: %w", name, err)
	}
	var names []string
	for _, c := range found {
		n := c.ID
		if len(c.Names) > 0 {
			n = trimSlash(c.Names[0])
		}
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

// RecreateVolume removes the volume if it exists (it must be this host's,
// and no container may use it: Docker refuses then, and so does this) and
// creates it anew, empty, with labels plus Hatchery's own for the project
// (which win, so the converge owns the new volume like any other).
func (e *Engine) RecreateVolume(ctx context.Context, name, namespace, project string, labels map[string]string) error {
	v, err := e.ownedVolume(ctx, name)
	switch {
	case err == nil:
		rctx, cancel := e.call(ctx)
		err := e.api.VolumeRemove(rctx, v.Name, false)
		cancel()
		if err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("recreate volume %s: remove: %w", name, err)
		}
		e.log.Info("removed volume to restore into it", zap.String("volume", name))
	case !cerrdefs.IsNotFound(err):
		return fmt.Errorf("recreate volume %s: %w", name, err)
	}
	all := maps.Clone(labels)
	if all == nil {
		all = map[string]string{}
	}
	maps.Copy(all, e.objectLabels(namespace, project))
	cctx, cancel := e.call(ctx)
	defer cancel()
	if _, err := e.api.VolumeCreate(cctx, volume.CreateOptions{Name: name, Labels: all}); err != nil {
		return fmt.Errorf("recreate volume %s: create: %w", name, err)
	}
	return nil
}

// ownedVolume inspects a volume and checks it is this host's: one that does
// not exist gives an error for which cerrdefs.IsNotFound holds, a foreign
// one ErrForeign.
func (e *Engine) ownedVolume(ctx context.Context, name string) (volume.Volume, error) {
	ctx, cancel := e.call(ctx)
	defer cancel()
	v, err := e.api.VolumeInspect(ctx, name)
	if err != nil {
		return volume.Volume{}, fmt.Errorf("inspect volume: %w", err)
	}
	if !containers.Owned(v.Labels, e.cfg.HostID) {
		return volume.Volume{}, fmt.Errorf("volume %s %w", name, ErrForeign)
	}
	return v, nil
}

// createHelper creates (never starts) a helper container mounting the
// volume at HelperMountPath, with no network.
func (e *Engine) createHelper(ctx context.Context, image, name string, readOnly bool) (string, error) {
	if err := e.ensureLocalImage(ctx, image); err != nil {
		return "", err
	}
	ctx, cancel := e.call(ctx)
	defer cancel()
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	created, err := e.api.ContainerCreate(ctx,
		&container.Config{Image: image, Labels: e.labels(map[string]string{LabelVolumeHelper: e.cfg.HostID})},
		&container.HostConfig{NetworkMode: "none", Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: name,
			Target: HelperMountPath, ReadOnly: readOnly}}},
		nil, nil, "hatch-volume-helper-"+hex.EncodeToString(suffix[:]))
	if err != nil {
		return "", fmt.Errorf("create helper container: %w", err)
	}
	return created.ID, nil
}

// removeHelper removes a helper, on a context of its own: the task's may be
// why it is being removed.
func (e *Engine) removeHelper(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.CallTimeout)
	defer cancel()
	if err := e.api.ContainerRemove(ctx, id, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		e.log.Warn("volume helper container not removed; the agent's next start removes it", zap.String("container", short(id)), zap.Error(err))
	}
}

// RemoveVolumeHelpers removes the helpers this host's agent made and left
// (it died during a task): each holds its volume, which a restore would
// then refuse to replace. Call it before any task begins.
func (e *Engine) RemoveVolumeHelpers(ctx context.Context) error {
	lctx, cancel := e.call(ctx)
	defer cancel()
	found, err := e.api.ContainerList(lctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", LabelVolumeHelper+"="+e.cfg.HostID))})
	if err != nil {
		return fmt.Errorf("list volume helpers: %w", err)
	}
	var errs []error
	for _, c := range found {
		if c.Labels[LabelVolumeHelper] != e.cfg.HostID {
			continue
		}
		if err := e.api.ContainerRemove(lctx, c.ID, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove volume helper %s: %w", short(c.ID), err))
			continue
		}
		e.log.Info("removed a volume helper left by an earlier agent", zap.String("container", short(c.ID)))
	}
	return errors.Join(errs...)
}

// ensureLocalImage makes a local image present: found, or built if it is
// one of the agent's built-in images. It is never pulled: a helper runs
// only the agent's own binary.
func (e *Engine) ensureLocalImage(ctx context.Context, ref string) error {
	if ref == "" {
		return errors.New("no helper image: the agent has no relay image (its binary could not be read at its start)")
	}
	mu := e.imageLock(ref)
	mu.Lock()
	defer mu.Unlock()
	present, err := e.imagePresent(ctx, ref)
	if err != nil || present {
		return err
	}
	b, ok := e.cfg.BuiltinImages[ref]
	if !ok {
		return fmt.Errorf("helper image %s is neither on this host nor one the agent builds", ref)
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.ImageTimeout)
	defer cancel()
	return e.buildBuiltin(ctx, ref, b)
}

// EggContainer returns the ID of a running replica of the egg on this host
// (not a run's container; the oldest if several), or "" if none runs.
func (e *Engine) EggContainer(ctx context.Context, namespace, project, egg string) (string, error) {
	ctx, cancel := e.call(ctx)
	defer cancel()
	args := e.ownedFilter()
	args.Add("label", containers.LabelNamespace+"="+namespace)
	args.Add("label", containers.LabelProject+"="+project)
	args.Add("label", containers.LabelEgg+"="+egg)
	args.Add("status", "running")
	found, err := e.api.ContainerList(ctx, container.ListOptions{Filters: args})
	if err != nil {
		return "", fmt.Errorf("find the container of egg %s: %w", egg, err)
	}
	slices.SortFunc(found, func(a, b container.Summary) int { return int(a.Created - b.Created) })
	for _, c := range found {
		if containers.Owned(c.Labels, e.cfg.HostID) && c.Labels[containers.LabelRun] == "" &&
			c.Labels[containers.LabelNamespace] == namespace && c.Labels[containers.LabelProject] == project &&
			c.Labels[containers.LabelEgg] == egg {
			return c.ID, nil
		}
	}
	return "", nil
}

// Exec runs cmd in the running container, its stdout and stderr both to out,
// and returns its exit code once it has ended. If ctx ends first the
// command's output stops being read and ctx's error is returned; the Engine
// API has no call to stop an exec, so the command may run on.
func (e *Engine) Exec(ctx context.Context, containerID string, cmd []string, out io.Writer) (int, error) {
	api, err := e.archiveAPI()
	if err != nil {
		return 0, err
	}
	if _, err := e.inspectOwned(ctx, "exec", containerID); err != nil {
		return 0, err
	}
	cctx, cancel := e.call(ctx)
	created, err := api.ContainerExecCreate(cctx, containerID, container.ExecOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true})
	cancel()
	if err != nil {
		return 0, fmt.Errorf("exec in %s: %w", short(containerID), err)
	}
	hr, err := api.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return 0, fmt.Errorf("exec in %s: attach: %w", short(containerID), err)
	}
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(out, out, hr.Reader)
		copied <- err
	}()
	select {
	case err = <-copied:
		hr.Close()
	case <-ctx.Done():
		hr.Close()
		<-copied
		return 0, fmt.Errorf("exec in %s: %w", short(containerID), ctx.Err())
	}
	if err != nil {
		return 0, fmt.Errorf("exec in %s: read its output: %w", short(containerID), err)
	}
	// The output closes as the process ends; its code follows shortly.
	for {
		ictx, cancel := e.call(ctx)
		ins, err := api.ContainerExecInspect(ictx, created.ID)
		cancel()
		if err != nil {
			return 0, fmt.Errorf("exec in %s: inspect: %w", short(containerID), err)
		}
		if !ins.Running {
			return ins.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("exec in %s: %w", short(containerID), ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
