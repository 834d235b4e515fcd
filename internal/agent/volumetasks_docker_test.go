//go:build docker

package agent

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/volume"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/backup"
	"github.com/hatchery/hatchery/internal/backup/backuptest"
	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/containers/docker"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// volumeEnv is a Docker adapter of its own host ID, with the test app's
// image as the helpers' image (present locally, as the relay image is once
// built), and helpers to fill and read volumes behind the code under test.
type volumeEnv struct {
	t     testing.TB
	s     *dockertest.Scope
	e     *docker.Engine
	host  string
	image string
}

func newVolumeEnv(t testing.TB) *volumeEnv {
	t.Helper()
	s := dockertest.NewScope(t)
	v := &volumeEnv{t: t, s: s, host: "h" + s.ID, image: dockertest.Image(t, dockertest.ImageSpec{})}
	ecfg := docker.DefaultConfig(v.host)
	ecfg.SecretDir, ecfg.Labels = s.ShmDir(), s.Labels(nil)
	ecfg.Logger = zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
	ecfg.Blobs, ecfg.Ingress, ecfg.OnChange = noBlobs{}, idleIngress{}, func() {}
	e, err := docker.New(t.Context(), s.Client, ecfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	v.e = e
	return v
}

// volume creates a volume of this host (labelled as the adapter's are) and
// returns its Docker name.
func (v *volumeEnv) volume(name string) string {
	v.t.Helper()
	full := v.s.Name(name)
	_, err := v.s.Client.VolumeCreate(v.t.Context(), volume.CreateOptions{Name: full, Labels: v.s.Labels(map[string]string{
		containers.LabelManaged: "true", containers.LabelHost: v.host,
		containers.LabelNamespace: "default", containers.LabelProject: "shop"})})
	if err != nil {
		v.t.Fatal(err)
	}
	return full
}

// file is a file of a volume as the tests see it.
type file struct {
	mode int64
	data []byte
}

// withScratch runs fn on a never-started container mounting vol at /data,
// removed afterwards: the tests' own access to a volume, apart from the
// adapter's helpers.
func (v *volumeEnv) withScratch(vol string, fn func(id string)) {
	v.t.Helper()
	ctx := v.t.Context()
	c, err := v.s.Client.ContainerCreate(ctx, &container.Config{Image: v.image, Labels: v.s.Labels(nil)},
		&container.HostConfig{Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: vol, Target: "/data"}}}, nil, nil, "")
	if err != nil {
		v.t.Fatal(err)
	}
	defer v.s.Client.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	fn(c.ID)
}

// fill writes files (names relative to the volume's root) into vol.
func (v *volumeEnv) fill(vol string, files map[string]file) {
	v.t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		f := files[name]
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: f.mode, Size: int64(len(f.data)), ModTime: time.Unix(1e9, 0), Uid: 1000, Gid: 1000}); err != nil {
			v.t.Fatal(err)
		}
		tw.Write(f.data)
	}
	tw.Close()
	v.withScratch(vol, func(id string) {
		if err := v.s.Client.CopyToContainer(v.t.Context(), id, "/data", &buf, container.CopyToContainerOptions{}); err != nil {
			v.t.Fatal(err)
		}
	})
}

// read returns every regular file of vol with its mode and owner folded into
// the mode's string ("0640 1000:1000"), by name relative to the root.
func (v *volumeEnv) read(vol string) map[string]string {
	v.t.Helper()
	out := map[string]string{}
	v.withScratch(vol, func(id string) {
		rc, _, err := v.s.Client.CopyFromContainer(v.t.Context(), id, "/data")
		if err != nil {
			v.t.Fatal(err)
		}
		defer rc.Close()
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				v.t.Fatal(err)
			}
			name := strings.TrimPrefix(h.Name, "data/")
			if h.Typeflag != tar.TypeReg || strings.HasPrefix(name, ".count-") {
				continue
			}
			data, _ := io.ReadAll(tr)
			out[name] = fmt.Sprintf("%04o %d:%d %x", h.Mode&0o7777, h.Uid, h.Gid, data)
		}
	})
	return out
}

// runner is a task runner on the adapter, storing into store; its status is
// kept in st.
type testRunner struct {
	*taskRunner
	mu sync.Mutex
	st contract.VolumeTaskStatus
}

func (v *volumeEnv) runner(store *backuptest.Mem) *testRunner {
	tr := &testRunner{}
	tr.taskRunner = &taskRunner{docker: v.e, store: store, image: v.image, spillDir: v.t.TempDir(), now: time.Now,
		pollEvery: 100 * time.Millisecond, log: zaptest.NewLogger(v.t),
		set: func(fn func(*contract.VolumeTaskStatus)) { tr.mu.Lock(); fn(&tr.st); tr.mu.Unlock() }}
	return tr
}

func (r *testRunner) status() contract.VolumeTaskStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st
}

func randomKey(t *testing.T) contract.SecretValue {
	b := make([]byte, 32)
	rand.Read(b)
	return contract.SecretValue(hex.EncodeToString(b))
}

func backupTask(vol string, key contract.SecretValue) contract.VolumeTask {
	return contract.VolumeTask{ID: "b1", Kind: contract.TaskBackup, Key: key, Egg: "kv", Consistency: contract.ConsistencyHooks,
		Volume: contract.VolumeSpec{Namespace: "default", Project: "shop", Name: "data", DockerName: vol}}
}

func restoreTask(from contract.VolumeTask, manifest, target string) contract.VolumeTask {
	return contract.VolumeTask{ID: "r1", Kind: contract.TaskRestore, Key: from.Key, Volume: from.Volume, Backup: manifest,
		Target: target, Labels: map[string]string{"restored-from": manifest[:12]}}
}

// backUp backs vol up into store through the runner and returns the
// manifest's ID.
func (v *volumeEnv) backUp(store *backuptest.Mem, task contract.VolumeTask) string {
	v.t.Helper()
	r := v.runner(store)
	if err := r.run(v.t.Context(), task); err != nil {
		v.t.Fatalf("backup: %v (status %+v)", err, r.status())
	}
	st := r.status()
	if st.Manifest == "" || st.Bytes == 0 || st.Chunks == 0 || st.NewChunks == 0 {
		v.t.Fatalf("backup status %+v: want a manifest, bytes and chunks", st)
	}
	return st.Manifest
}

func TestDockerABackupRestoresIntoANewVolumeAndOverAnOldOneByteForByte(t *testing.T) {
	v := newVolumeEnv(t)
	big := make([]byte, 3<<20)
	rand.Read(big)
	src := v.volume("src")
	v.fill(src, map[string]file{
		"big.bin":          {0o644, big},
		"empty":            {0o600, nil},
		"etc/conf/app.ini": {0o640, []byte("[app]\nkey = value\n")},
		"repeat.txt":       {0o644, bytes.Repeat([]byte("hatchery "), 100000)},
	})
	want := v.read(src)
	if len(want) != 4 {
		t.Fatalf("the source volume holds %d files, want 4: %v", len(want), slices.Collect(maps.Keys(want)))
	}
	store := backuptest.NewMem()
	task := backupTask(src, randomKey(t))
	task.Egg = "" // no hooks
	manifest := v.backUp(store, task)

	// Into a volume that does not exist yet (hatch volume restore --to).
	fresh := v.s.Name("fresh")
	r := v.runner(store)
	if err := r.run(t.Context(), restoreTask(task, manifest, fresh)); err != nil {
		t.Fatalf("restore into a new volume: %v", err)
	}
	if got := v.read(fresh); !maps.Equal(got, want) {
		t.Errorf("the new volume differs from the backed-up one:\n got %.200v\nwant %.200v", got, want)
	}
	info, err := v.s.Client.VolumeInspect(t.Context(), fresh)
	if err != nil {
		t.Fatal(err)
	}
	if info.Labels["restored-from"] != manifest[:12] || !containers.Owned(info.Labels, v.host) {
		t.Errorf("the new volume's labels %v: want the task's and this host's", info.Labels)
	}

	// Over a volume holding other files: they do not survive (the archive
	// PUT merges, so the volume is recreated first).
	old := v.volume("old")
	v.fill(old, map[string]file{"stale.txt": {0o644, []byte("from before")}, "big.bin": {0o600, []byte("short")}})
	if err := v.runner(store).run(t.Context(), restoreTask(task, manifest, old)); err != nil {
		t.Fatalf("restore over an old volume: %v", err)
	}
	if got := v.read(old); !maps.Equal(got, want) {
		t.Errorf("the restored volume differs from the backed-up one (stale files kept?): got names %v", slices.Sorted(maps.Keys(got)))
	}
}

func TestDockerARestoreRefusesAVolumeAContainerStillMountsNamingIt(t *testing.T) {
	v := newVolumeEnv(t)
	src := v.volume("src")
	v.fill(src, map[string]file{"a": {0o644, []byte("a")}})
	store := backuptest.NewMem()
	task := backupTask(src, randomKey(t))
	task.Egg = ""
	manifest := v.backUp(store, task)
	target := v.volume("held")
	v.fill(target, map[string]file{"keep": {0o644, []byte("keep me")}})
	_, err := v.s.Client.ContainerCreate(t.Context(), &container.Config{Image: v.image, Labels: v.s.Labels(nil)},
		&container.HostConfig{Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: target, Target: "/data"}}}, nil, nil, v.s.Name("holder"))
	if err != nil {
		t.Fatal(err)
	}
	err = v.runner(store).run(t.Context(), restoreTask(task, manifest, target))
	if err == nil || !strings.Contains(err.Error(), v.s.Name("holder")) {
		t.Fatalf("restore over a volume a stopped container mounts: %v, want a refusal naming the container", err)
	}
	if got := v.read(target); len(got) != 1 || !strings.HasSuffix(got["keep"], hex.EncodeToString([]byte("keep me"))) {
		t.Errorf("the refused target changed: %v", got)
	}
}

func TestDockerACorruptedChunkFailsTheRestoreNamingItAndLeavesTheTargetUntouched(t *testing.T) {
	v := newVolumeEnv(t)
	data := make([]byte, 2<<20)
	rand.Read(data)
	src := v.volume("src")
	v.fill(src, map[string]file{"data.bin": {0o644, data}})
	store := backuptest.NewMem()
	task := backupTask(src, randomKey(t))
	task.Egg = ""
	manifest := v.backUp(store, task)
	m, err := openManifestOf(t, store, task, manifest)
	if err != nil {
		t.Fatal(err)
	}
	bad := m.Chunks[len(m.Chunks)/2].ID
	stored, _ := store.Get(t.Context(), bad)
	stored[len(stored)/2] ^= 0xff
	store.Set(bad, stored)

	target := v.volume("target")
	v.fill(target, map[string]file{"keep": {0o644, []byte("keep me")}})
	before := v.read(target)
	r := v.runner(store)
	err = r.run(t.Context(), restoreTask(task, manifest, target))
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), manifest) {
		t.Fatalf("restore with chunk %s corrupted: %v, want an error naming the chunk and backup %s", bad, err, manifest)
	}
	if after := v.read(target); !maps.Equal(after, before) {
		t.Errorf("the target changed although the restore failed: %v, was %v", after, before)
	}
	// A target that did not exist is not created either.
	absent := v.s.Name("absent")
	if err := v.runner(store).run(t.Context(), restoreTask(task, manifest, absent)); err == nil {
		t.Fatal("a restore with a corrupted chunk succeeded")
	}
	if _, err := v.s.Client.VolumeInspect(t.Context(), absent); !cerrdefs.IsNotFound(err) {
		t.Errorf("a failed restore created its target volume (inspect: %v)", err)
	}
}

// egg starts a running container of egg kv of project shop on this host,
// mounting vol at /data, whose job mode (/app -exit N) counts in
// /data/count: what the hooks run.
func (v *volumeEnv) egg(vol string) string {
	v.t.Helper()
	ctx := v.t.Context()
	labels := v.s.Labels(map[string]string{containers.LabelManaged: "true", containers.LabelHost: v.host,
		containers.LabelNamespace: "default", containers.LabelProject: "shop", containers.LabelEgg: "kv",
		containers.LabelWorkload: "default/shop/kv"})
	c, err := v.s.Client.ContainerCreate(ctx, &container.Config{Image: v.image, Labels: labels,
		Env: []string{"APP_COUNT_FILE=/data/count", "APP_PORT=8080"}},
		&container.HostConfig{Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: vol, Target: "/data"}}}, nil, nil, v.s.Name("kv"))
	if err != nil {
		v.t.Fatal(err)
	}
	if err := v.s.Client.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		v.t.Fatal(err)
	}
	return c.ID
}

// count reads /data/count of a volume's files as read gives them.
func count(t *testing.T, files map[string]string) int {
	t.Helper()
	f, ok := files["count"]
	if !ok {
		return 0
	}
	raw, err := hex.DecodeString(f[strings.LastIndexByte(f, ' ')+1:])
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatalf("count file %q: %v", raw, err)
	}
	return n
}

func TestDockerBeforeAndAfterRunInTheEggsContainerAroundTheCopy(t *testing.T) {
	v := newVolumeEnv(t)
	vol := v.volume("data")
	v.egg(vol)
	store := backuptest.NewMem()
	task := backupTask(vol, randomKey(t))
	task.Before, task.After = []string{"/app", "-exit", "0"}, []string{"/app", "-exit", "0"}
	manifest := v.backUp(store, task)
	// Before counted 1 before the copy, After 2 after it.
	restored := v.s.Name("restored")
	if err := v.runner(store).run(t.Context(), restoreTask(task, manifest, restored)); err != nil {
		t.Fatal(err)
	}
	if got, live := count(t, v.read(restored)), count(t, v.read(vol)); got != 1 || live != 2 {
		t.Errorf("the backup holds count %d and the volume %d: want 1 (before ran before the copy) and 2 (after ran after it)", got, live)
	}
}

func TestDockerAFailingBeforeFailsWithItsOutputCopiesNothingAndAfterStillRuns(t *testing.T) {
	v := newVolumeEnv(t)
	vol := v.volume("data")
	v.egg(vol)
	store := backuptest.NewMem()
	task := backupTask(vol, randomKey(t))
	task.Before, task.After = []string{"/app", "-exit", "7"}, []string{"/app", "-exit", "0"}
	r := v.runner(store)
	err := r.run(t.Context(), task)
	st := r.status()
	if err == nil || !strings.Contains(err.Error(), "before") || !strings.Contains(err.Error(), "exit code 7") {
		t.Fatalf("backup with a failing before: %v, want its failure", err)
	}
	if !strings.Contains(st.Output, "job done, exit 7") {
		t.Errorf("the status's output %q lacks the hook's", st.Output)
	}
	if store.Puts != 0 || st.Manifest != "" {
		t.Errorf("a failed before still stored %d objects (manifest %q)", store.Puts, st.Manifest)
	}
	if n := count(t, v.read(vol)); n != 2 {
		t.Errorf("count %d after a failed before: want 2 (before then after)", n)
	}
}

func TestDockerConsistencyStopWaitsUntilNoRunningContainerMountsTheVolume(t *testing.T) {
	v := newVolumeEnv(t)
	vol := v.volume("data")
	id := v.egg(vol)
	store := backuptest.NewMem()
	task := backupTask(vol, randomKey(t))
	task.Consistency, task.Egg = contract.ConsistencyStop, ""
	r := v.runner(store)
	done := make(chan error, 1)
	go func() { done <- r.run(t.Context(), task) }()
	dockertest.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		if st := r.status(); st.Phase != "waiting for the egg to stop" {
			return fmt.Errorf("phase %q", st.Phase)
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond)
	if store.Puts != 0 {
		t.Fatalf("the copy began while the egg ran (%d objects stored)", store.Puts)
	}
	stop := 1
	if err := v.s.Client.ContainerStop(t.Context(), id, container.StopOptions{Timeout: &stop}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("backup once the egg stopped: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the backup did not go on once the egg stopped")
	}
	if st := r.status(); st.Manifest == "" {
		t.Errorf("status %+v: no manifest", st)
	}
}

func openManifestOf(t *testing.T, store *backuptest.Mem, task contract.VolumeTask, id string) (backup.Manifest, error) {
	key, err := taskKey(task)
	if err != nil {
		return backup.Manifest{}, err
	}
	return backup.OpenManifest(t.Context(), store, id, key)
}

// The agent does a backup, then a restore into a new volume beside it, from
// its desired state on the real Docker Engine; its converge leaves the new
// volume alone, as it is in no desired state's Volumes.
func TestDockerAnAgentBacksUpAndRestoresFromItsDesiredState(t *testing.T) {
	v := newVolumeEnv(t)
	src := v.volume("data")
	v.fill(src, map[string]file{"a.txt": {0o644, []byte("alpha")}, "dir/b.bin": {0o600, bytes.Repeat([]byte{7}, 300<<10)}})
	want := v.read(src)
	cp := storeControlPlane{fakeControlPlane: newFakeControlPlane(), store: backuptest.NewMem()}
	cfg := testConfig(t, v.e, cp, t.TempDir())
	cfg.HostID, cfg.Events, cfg.RelayImage = v.host, v.s.Client, v.image
	cfg.ConvergeInterval = 200 * time.Millisecond
	a := startAgent(t, cfg)
	set := func(ts ...contract.VolumeTask) {
		d := contract.DesiredState{HostID: v.host, VolumeTasks: ts,
			Volumes: []contract.VolumeSpec{{Namespace: "default", Project: "shop", Name: "data", DockerName: src}}}
		d.Seal()
		cp.set(d)
	}
	b := backupTask(src, randomKey(t))
	b.Egg = ""
	set(b)
	done := waitTask(t, a, b.ID, func(st contract.VolumeTaskStatus) bool { return st.State.Ended() })
	if done.State != contract.TaskDone || done.Manifest == "" {
		t.Fatalf("backup ended %+v", done)
	}
	fresh := v.s.Name("fresh")
	r := restoreTask(b, done.Manifest, fresh)
	set(r)
	restored := waitTask(t, a, r.ID, func(st contract.VolumeTaskStatus) bool { return st.State.Ended() })
	if restored.State != contract.TaskDone {
		t.Fatalf("restore ended %+v", restored)
	}
	set()
	for range 3 {
		tickConverge(t, a)
	}
	if got := v.read(fresh); !maps.Equal(got, want) {
		t.Errorf("the restored volume (after more converges) differs: %v", slices.Sorted(maps.Keys(got)))
	}
}

// tickConverge waits for a converge that began after it was called.
func tickConverge(t *testing.T, a *Agent) {
	t.Helper()
	before, _ := a.Status()
	a.Notify()
	eventually(t, "a converge", func() error {
		if r, _ := a.Status(); !r.Time.After(before.Time) {
			return errors.New("no converge yet")
		}
		return nil
	})
}
