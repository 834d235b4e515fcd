//go:build docker

package docker

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/volume"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/relay"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// ownVolume creates a volume of the env's host and returns its name.
func (v *env) ownVolume(name string) string {
	v.t.Helper()
	full := v.s.Name(name)
	_, err := v.s.Client.VolumeCreate(v.t.Context(), volume.CreateOptions{Name: full,
		Labels: v.s.Labels(map[string]string{containers.LabelManaged: "true", containers.LabelHost: v.host})})
	if err != nil {
		v.t.Fatal(err)
	}
	return full
}

func (v *env) helpers() []container.Summary {
	v.t.Helper()
	cs, err := v.s.Client.ContainerList(v.t.Context(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", LabelVolumeHelper+"="+v.host))})
	if err != nil {
		v.t.Fatal(err)
	}
	return cs
}

func TestDockerAVolumeIsWrittenAndReadThroughANeverStartedHelperThatIsRemoved(t *testing.T) {
	v := newEnv(t)
	vol := v.ownVolume("data")
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "hatch-volume/", Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "hatch-volume/hello.txt", Mode: 0o640, Size: 5, Uid: 999, Gid: 999})
	tw.Write([]byte("hello"))
	tw.Close()
	if err := v.e.WriteVolume(t.Context(), v.image, vol, &in); err != nil {
		t.Fatal(err)
	}
	var names []string
	var content string
	err := v.e.ReadVolume(t.Context(), v.image, vol, func(r io.Reader) error {
		hs := v.helpers()
		if len(hs) != 1 || hs[0].State != "created" {
			t.Errorf("helpers while reading: %+v, want one, never started", hs)
		}
		tr := tar.NewReader(r)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			names = append(names, h.Name)
			if h.Name == "hatch-volume/hello.txt" {
				b, _ := io.ReadAll(tr)
				content = string(b)
				if h.Uid != 999 || h.Mode&0o777 != 0o640 {
					t.Errorf("hello.txt read back with uid %d, mode %o: want 999, 640", h.Uid, h.Mode)
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if content != "hello" {
		t.Errorf("read back %q (names %v), want hello.txt's content", content, names)
	}
	if hs := v.helpers(); len(hs) != 0 {
		t.Errorf("%d helpers left after the read", len(hs))
	}
}

func TestDockerTheVolumeCallsLeaveAForeignVolumeAlone(t *testing.T) {
	v := newEnv(t)
	foreign := v.s.Name("foreign")
	if _, err := v.s.Client.VolumeCreate(t.Context(), volume.CreateOptions{Name: foreign, Labels: v.s.Labels(nil)}); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := v.e.ReadVolume(ctx, v.image, foreign, func(io.Reader) error { return nil }); !errors.Is(err, ErrForeign) {
		t.Errorf("read a foreign volume: %v, want ErrForeign", err)
	}
	if err := v.e.WriteVolume(ctx, v.image, foreign, strings.NewReader("")); !errors.Is(err, ErrForeign) {
		t.Errorf("write a foreign volume: %v, want ErrForeign", err)
	}
	if err := v.e.RecreateVolume(ctx, foreign, "default", "shop", nil); !errors.Is(err, ErrForeign) {
		t.Errorf("recreate a foreign volume: %v, want ErrForeign", err)
	}
	if _, err := v.s.Client.VolumeInspect(ctx, foreign); err != nil {
		t.Errorf("the foreign volume is gone: %v", err)
	}
}

func TestDockerRecreateVolumeRefusesOneInUseAndLabelsTheNewOneAsThisHosts(t *testing.T) {
	v := newEnv(t)
	vol := v.ownVolume("data")
	c, err := v.s.Client.ContainerCreate(t.Context(), &container.Config{Image: v.image, Labels: v.s.Labels(nil)},
		&container.HostConfig{Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: vol, Target: "/data"}}}, nil, nil, v.s.Name("user"))
	if err != nil {
		t.Fatal(err)
	}
	users, err := v.e.VolumeUsers(t.Context(), vol, false)
	if err != nil || len(users) != 1 || users[0] != v.s.Name("user") {
		t.Errorf("users of the volume: %v, %v: want the container", users, err)
	}
	if running, _ := v.e.VolumeUsers(t.Context(), vol, true); len(running) != 0 {
		t.Errorf("running users of the volume: %v, want none", running)
	}
	if err := v.e.RecreateVolume(t.Context(), vol, "default", "shop", nil); err == nil {
		t.Error("a volume a container mounts was recreated")
	}
	if err := v.s.Client.ContainerRemove(t.Context(), c.ID, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if err := v.e.RecreateVolume(t.Context(), vol, "default", "shop", map[string]string{"x": "y", containers.LabelHost: "other"}); err != nil {
		t.Fatal(err)
	}
	info, err := v.s.Client.VolumeInspect(t.Context(), vol)
	if err != nil {
		t.Fatal(err)
	}
	if info.Labels["x"] != "y" || !containers.Owned(info.Labels, v.host) {
		t.Errorf("recreated volume's labels %v: want the given ones with this host's winning", info.Labels)
	}
}

func TestDockerHelpersLeftByAnEarlierAgentAreRemovedAndOthersKept(t *testing.T) {
	v := newEnv(t)
	vol := v.ownVolume("data")
	mk := func(host string) string {
		c, err := v.s.Client.ContainerCreate(t.Context(), &container.Config{Image: v.image,
			Labels: v.s.Labels(map[string]string{LabelVolumeHelper: host})},
			&container.HostConfig{Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: vol, Target: HelperMountPath}}}, nil, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		return c.ID
	}
	mine, other := mk(v.host), mk("another-host")
	if err := v.e.RemoveVolumeHelpers(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := v.s.Client.ContainerInspect(t.Context(), mine); !cerrdefs.IsNotFound(err) {
		t.Errorf("this host's left helper is still there (%v)", err)
	}
	if _, err := v.s.Client.ContainerInspect(t.Context(), other); err != nil {
		t.Errorf("another host's helper was removed: %v", err)
	}
}

func TestDockerAHelperImageIsNeverPulled(t *testing.T) {
	v := newEnv(t)
	vol := v.ownVolume("data")
	err := v.e.ReadVolume(t.Context(), "hatchtest-absent/helper:1", vol, func(io.Reader) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "neither on this host nor one the agent builds") {
		t.Errorf("a helper from an absent image: %v", err)
	}
}

func TestDockerExecRunsInTheEggsRunningContainerWithItsOutputAndCode(t *testing.T) {
	v := newEnv(t)
	if id, err := v.e.EggContainer(t.Context(), "default", "shop", "web"); err != nil || id != "" {
		t.Fatalf("no container yet: %q, %v", id, err)
	}
	w := v.spec("web")
	v.start(w, 0, "")
	var id string
	v.waitFor("web runs", func(cs []containers.Container) bool {
		for _, c := range cs {
			if c.State == "running" {
				id = c.ID
				return true
			}
		}
		return false
	})
	got, err := v.e.EggContainer(t.Context(), "default", "shop", "web")
	if err != nil || got != id {
		t.Fatalf("egg container %q, %v: want %s", got, err, id)
	}
	var out bytes.Buffer
	code, err := v.e.Exec(t.Context(), id, []string{"/app", "-exit", "5"}, &out)
	if err != nil || code != 5 || !strings.Contains(out.String(), "job done, exit 5") {
		t.Errorf("exec: code %d, %v, output %q", code, err, out.String())
	}
}

// The production helper: the relay image, built from the hatch binary on
// first use (never pulled), makes a helper that reads a volume.
func TestDockerTheRelayImageBuiltOnFirstUseMakesTheHelper(t *testing.T) {
	bin, err := dockertest.Binary("./cmd/hatch")
	if err != nil {
		t.Fatal(err)
	}
	img, err := relay.ImageFromBinary(bin)
	if err != nil {
		t.Fatal(err)
	}
	v := newEnv(t, func(c *Config) {
		c.BuiltinImages = map[string]BuiltinImage{img.Ref: func() (io.Reader, error) { return bytes.NewReader(img.Context), nil }}
	})
	vol := v.ownVolume("data")
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	tw.WriteHeader(&tar.Header{Name: "hatch-volume/x", Mode: 0o644, Size: 1})
	tw.Write([]byte("x"))
	tw.Close()
	if err := v.e.WriteVolume(t.Context(), img.Ref, vol, &in); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := v.e.ReadVolume(t.Context(), img.Ref, vol, func(r io.Reader) error {
		var err error
		n, err = io.Copy(io.Discard, r)
		return err
	}); err != nil || n == 0 {
		t.Fatalf("read through the relay image's helper: %d bytes, %v", n, err)
	}
}
