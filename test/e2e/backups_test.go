//go:build docker

package e2e

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// vaultYAML is the backups' project: a stateful egg keeping files on its
// volume, routed so the test writes them through the ingress, with a
// backup policy of `backup` (indented under the volume).
func vaultYAML(image, route, replicas, backup string) string {
	return fmt.Sprintf(`project: vault
eggs:
  kv:
    image: %s
    pull: missing
    replicas: %s
    port: 8080
    volumes: ["data:/data"]
    routes: [%s]
    health: {http: /healthz, interval: 1s, timeout: 1s}
    stop_timeout: 1s
volumes:
  data:
    backup:
%s
`, image, replicas, route, backup)
}

// TestVolumeBackupAndRestore is issue 30's path on one real control plane
// and agent: a backup with its hooks run in the egg's container in order,
// listed; a restore refused while the egg runs, then done with the egg
// stopped: every file byte for byte as at backup time, what was written
// since gone; a restore --to a new volume beside it; a failing before hook
// failing the backup with its output; consistency stop stopping and
// starting the egg once; an agent killed in the middle of a backup: no
// partial backup listed as good, the next one done; and, last (it spoils
// the store), chunks corrupted in the store failing the restore, naming
// the backup and a chunk, with the volume untouched.
func TestVolumeBackupAndRestore(t *testing.T) {
	c := newCluster(t, clusterOptions{agents: []string{"a"}})
	a := c.agents["a"]
	image := dockertest.Image(t, dockertest.ImageSpec{})
	route := "vault-" + randomWord()[:8] + ".localhost"
	hooks := `      keep: 3
      before: [/app, -append, /data/hooks=before]
      after: [/app, -append, /data/hooks=after]`
	c.applyWithImage(t, image, vaultYAML(image, route, "1", hooks))
	c.waitVault(t, a, route)

	// Twenty files, one of 2 MiB, written through the egg.
	want := map[string][]byte{}
	for i := range 20 {
		size := 1 + i*997
		if i == 7 {
			size = 2 << 20
		}
		b := make([]byte, size)
		_, _ = rand.Read(b)
		name := fmt.Sprintf("f%02d", i)
		c.putVaultFile(t, a, route, name, b)
		want[name] = b
	}

	out, code := c.hatchCode(nil, "volume", "backup", "vault", "data")
	if code != 0 {
		t.Fatalf("hatch volume backup: exit %d\n%s", code, out)
	}
	t.Logf("hatch volume backup:\n%s", out)
	first := c.lastBackup(t, "data")
	if first.State != string(contract.TaskDone) || first.Manifest == "" || first.Bytes == 0 || first.SentBytes == 0 {
		t.Fatalf("the first backup: %+v, want done with its manifest and sizes", first)
	}
	// before ran before the copy and after after it: the backup holds
	// "before" only, the volume both, in order.
	want["hooks"] = []byte("before\n")
	if got := c.vaultFile(t, a, route, "hooks"); got != "before\nafter\n" {
		t.Fatalf("the hooks' trace on the volume: %q, want before then after", got)
	}
	if out := c.mustHatch(nil, "volume", "backups", "vault", "data"); !strings.Contains(out, first.Manifest[:12]) {
		t.Fatalf("hatch volume backups does not list %s:\n%s", first.Manifest, out)
	}

	// Written since: one file changed, one added.
	c.putVaultFile(t, a, route, "f03", []byte("changed after the backup"))
	c.putVaultFile(t, a, route, "new", []byte("written after the backup"))

	t.Run("a restore is refused while the egg runs", func(t *testing.T) {
		out, code := c.hatchCode(nil, "volume", "restore", "vault", "data", "--yes")
		if code == 0 || !strings.Contains(out, "running") {
			t.Fatalf("restore of a mounted volume: exit %d, want refused naming the running container:\n%s", code, out)
		}
		if got := c.vaultFile(t, a, route, "new"); got != "written after the backup" {
			t.Fatalf("the refused restore changed the volume: new = %q", got)
		}
	})

	t.Run("a restore --to a new volume beside it holds the backup", func(t *testing.T) {
		out, code := c.hatchCode(nil, "volume", "restore", "vault", "data", "--to", "copy", "--yes")
		if code != 0 {
			t.Fatalf("restore --to: exit %d\n%s", code, out)
		}
		c.checkVolumeFiles(t, contract.VolumeName(a.hostID, "default", "vault", "copy"), image, want)
	})

	t.Run("a restore with the egg stopped brings every file back byte for byte", func(t *testing.T) {
		c.applyWithImage(t, image, vaultYAML(image, route, "0", hooks))
		c.waitNoVault(t)
		out, code := c.hatchCode(nil, "volume", "restore", "vault", "data", "--from", first.Manifest, "--yes")
		if code != 0 {
			t.Fatalf("restore: exit %d\n%s", code, out)
		}
		c.checkVolumeFiles(t, contract.VolumeName(a.hostID, "default", "vault", "data"), image, want)
		c.applyWithImage(t, image, vaultYAML(image, route, "1", hooks))
		c.waitVault(t, a, route)
		if got := c.vaultFile(t, a, route, "f03"); got != string(want["f03"]) {
			t.Fatalf("f03 after the restore: %d bytes, want the backup's %d", len(got), len(want["f03"]))
		}
		if code, _ := c.vaultGet(t, a, route, "new"); code != http.StatusNotFound {
			t.Fatalf("a file written after the backup: GET answered %d after the restore, want 404", code)
		}
	})

	t.Run("a failing before hook fails the backup with its output and copies nothing", func(t *testing.T) {
		c.applyWithImage(t, image, vaultYAML(image, route, "1", `      before: [/app, -fail, "checkpoint refused"]`))
		c.waitVault(t, a, route)
		out, code := c.hatchCode(nil, "volume", "backup", "vault", "data")
		if code == 0 || !strings.Contains(out, "checkpoint refused") {
			t.Fatalf("backup with a failing before: exit %d, want non-zero with the hook's output:\n%s", code, out)
		}
		last := c.lastBackup(t, "data")
		if last.State != string(contract.TaskFailed) || last.Manifest != "" || last.SentBytes != 0 {
			t.Fatalf("the failed backup: %+v, want failed with nothing sent", last)
		}
	})

	t.Run("consistency stop stops and starts the egg once", func(t *testing.T) {
		c.applyWithImage(t, image, vaultYAML(image, route, "1", `      consistency: stop`))
		c.waitVault(t, a, route)
		before := c.projectContainers("default", "vault", "kv", "")
		if len(before) != 1 {
			t.Fatalf("%d kv containers before the backup, want 1", len(before))
		}
		out, code := c.hatchCode(nil, "volume", "backup", "vault", "data")
		if code != 0 {
			t.Fatalf("backup with consistency stop: exit %d\n%s", code, out)
		}
		last := c.lastBackup(t, "data")
		if last.State != string(contract.TaskDone) || last.Consistency != contract.ConsistencyStop {
			t.Fatalf("the stop backup: %+v, want done, consistency stop", last)
		}
		c.waitVault(t, a, route)
		after := c.projectContainers("default", "vault", "kv", "")
		if len(after) != 1 || after[0].ID == before[0].ID {
			t.Fatalf("kv containers after a stop backup: %d, the same one: %v; want a new one", len(after), len(after) == 1 && after[0].ID == before[0].ID)
		}
		if n := c.containerCount(t, "default", "vault", "kv"); n != 1 {
			t.Fatalf("%d kv containers (running or not) after the backup, want exactly 1", n)
		}
	})

	t.Run("an agent killed during a backup lists no partial backup as good, and the next one is done", func(t *testing.T) {
		// The after hook holds the backup once its chunks and manifest are
		// stored, before its host reports it done: the agent is killed there.
		c.applyWithImage(t, image, vaultYAML(image, route, "1", `      after: [/app, -wait-for, /data/release]`))
		c.waitVault(t, a, route)
		var task api.VolumeTask
		resp, err := c.api.Send(t.Context(), http.MethodPost, "/api/v1/projects/default/vault/volumes/data/backups", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		decodeAnswer(t, resp, &task)
		dockertest.Eventually(t, 60*time.Second, 100*time.Millisecond, func() error {
			c.getJSON("/api/v1/projects/default/vault/volume-tasks/"+task.ID, &task)
			if task.State != string(contract.TaskRunning) || task.Phase != "after" {
				return fmt.Errorf("backup %s is %s (phase %q), not held in its after hook yet", task.ID, task.State, task.Phase)
			}
			return nil
		})
		if err := a.proc.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-a.proc.done
		c.runAgent(a)
		dockertest.Eventually(t, 60*time.Second, 200*time.Millisecond, func() error {
			c.getJSON("/api/v1/projects/default/vault/volume-tasks/"+task.ID, &task)
			if !slices.Contains([]string{string(contract.TaskFailed), "lost"}, task.State) {
				return fmt.Errorf("the killed backup is %s, want failed or lost", task.State)
			}
			return nil
		})
		if task.Manifest != "" {
			t.Fatalf("the killed backup has a manifest: %+v", task)
		}
		for _, b := range c.backups(t, "data") {
			if b.ID == task.ID && b.State == string(contract.TaskDone) {
				t.Fatalf("the killed backup is listed done: %+v", b)
			}
		}
		c.putVaultFile(t, a, route, "release", []byte("go")) // the held hook ends
		c.applyWithImage(t, image, vaultYAML(image, route, "1", `      keep: 3`))
		out, code := c.hatchCode(nil, "volume", "backup", "vault", "data")
		if code != 0 {
			t.Fatalf("the backup after the kill: exit %d\n%s", code, out)
		}
		if last := c.lastBackup(t, "data"); last.State != string(contract.TaskDone) || last.Manifest == "" {
			t.Fatalf("the backup after the kill: %+v, want done", last)
		}
	})

	t.Run("a chunk corrupted in the store fails the restore, naming it, and writes nothing", func(t *testing.T) {
		c.applyWithImage(t, image, vaultYAML(image, route, "0", `      keep: 3`))
		c.waitNoVault(t)
		volume := contract.VolumeName(a.hostID, "default", "vault", "data")
		before := c.volumeFiles(t, volume, image)
		corrupted := c.corruptChunks(t)
		out, code := c.hatchCode(nil, "volume", "restore", "vault", "data", "--from", first.Manifest, "--yes")
		named := slices.ContainsFunc(corrupted, func(id string) bool { return strings.Contains(out, "chunk "+id) })
		if code == 0 || !named || !strings.Contains(out, first.Manifest) {
			t.Fatalf("restore from corrupted chunks: exit %d, want failed naming the backup and one of its chunks:\n%s", code, out)
		}
		if after := c.volumeFiles(t, volume, image); !maps.EqualFunc(before, after, bytes.Equal) {
			t.Fatalf("the failed restore changed the volume: %d files before, %d after", len(before), len(after))
		}
	})
}

// waitVault waits until the vault's kv answers through a's ingress.
func (c *cluster) waitVault(t *testing.T, a *clAgent, route string) {
	t.Helper()
	dockertest.Eventually(t, 60*time.Second, 200*time.Millisecond, func() error {
		code, body, err := viaIngress(t.Context(), a, route, "/healthz")
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("kv: %d %q %v", code, body, err)
		}
		return nil
	})
}

// waitNoVault waits until no container of the vault's kv is left.
func (c *cluster) waitNoVault(t *testing.T) {
	t.Helper()
	dockertest.Eventually(t, 60*time.Second, 200*time.Millisecond, func() error {
		if n := c.containerCount(t, "default", "vault", "kv"); n != 0 {
			return fmt.Errorf("%d kv containers left", n)
		}
		return nil
	})
}

// containerCount counts the egg's containers, running or not.
func (c *cluster) containerCount(t *testing.T, namespace, project, egg string) int {
	t.Helper()
	f := filters.NewArgs(filters.Arg("label", dockertest.ScopeLabel+"="+c.scope.ID),
		filters.Arg("label", containers.LabelNamespace+"="+namespace), filters.Arg("label", containers.LabelProject+"="+project),
		filters.Arg("label", containers.LabelEgg+"="+egg))
	list, err := c.scope.Client.ContainerList(t.Context(), container.ListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	return len(list)
}

// putVaultFile writes /data/<name> through the egg.
func (c *cluster) putVaultFile(t *testing.T, a *clAgent, route, name string, b []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, a.IngressURL()+"/file?path=/data/"+name, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = route
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("PUT /data/%s: %s %s", name, resp.Status, body)
	}
}

// vaultGet reads /data/<name> through the egg.
func (c *cluster) vaultGet(t *testing.T, a *clAgent, route, name string) (int, string) {
	t.Helper()
	code, body, err := viaIngress(t.Context(), a, route, "/file?path=/data/"+name)
	if err != nil {
		t.Fatal(err)
	}
	return code, body
}

// vaultFile reads /data/<name> through the egg, which must have it.
func (c *cluster) vaultFile(t *testing.T, a *clAgent, route, name string) string {
	t.Helper()
	code, body := c.vaultGet(t, a, route, name)
	if code != http.StatusOK {
		t.Fatalf("GET /data/%s: %d %s", name, code, body)
	}
	return body
}

// backups lists the vault's backups of volume, newest first.
func (c *cluster) backups(t *testing.T, volume string) []api.VolumeTask {
	t.Helper()
	var list []api.VolumeTask
	c.getJSON("/api/v1/projects/default/vault/backups?volume="+volume, &list)
	return list
}

// lastBackup is the vault's newest backup of volume.
func (c *cluster) lastBackup(t *testing.T, volume string) api.VolumeTask {
	t.Helper()
	list := c.backups(t, volume)
	if len(list) == 0 {
		t.Fatalf("no backup of %s listed", volume)
	}
	return list[0]
}

// checkVolumeFiles compares the files of a Docker volume with want: the
// same names, byte for byte.
func (c *cluster) checkVolumeFiles(t *testing.T, volumeName, image string, want map[string][]byte) {
	t.Helper()
	got := c.volumeFiles(t, volumeName, image)
	for name, b := range want {
		if !bytes.Equal(got[name], b) {
			t.Errorf("volume %s: %s has %d bytes unlike the backup's %d", volumeName, name, len(got[name]), len(b))
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("volume %s holds %s, which the backup did not", volumeName, name)
		}
	}
}

// volumeFiles reads every regular file of a Docker volume through a
// never-started container of the test's own, by path in the volume.
func (c *cluster) volumeFiles(t *testing.T, volumeName, image string) map[string][]byte {
	t.Helper()
	ctx := t.Context()
	cli := c.scope.Client
	created, err := cli.ContainerCreate(ctx, &container.Config{Image: image, Labels: c.scope.Labels(nil)},
		&container.HostConfig{Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: volumeName, Target: "/v"}}}, nil, nil,
		c.scope.Name("volume-reader"))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.ContainerRemove(ctx, created.ID, container.RemoveOptions{Force: true})
	rc, _, err := cli.CopyFromContainer(ctx, created.ID, "/v/")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		got[strings.TrimPrefix(h.Name, "v/")] = b
	}
}

// corruptChunks flips a byte of every chunk in the server's blob store
// (every blob but the listed backups' manifests: the project has no build
// context) and returns their IDs.
func (c *cluster) corruptChunks(t *testing.T) []string {
	t.Helper()
	manifests := map[string]bool{}
	for _, b := range c.backups(t, "data") {
		manifests[b.Manifest] = true
	}
	var ids []string
	err := filepath.WalkDir(filepath.Join(c.dir, "server", "blobs", "sha256"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || len(d.Name()) != 64 || manifests[d.Name()] {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		data[len(data)/2] ^= 0xff
		ids = append(ids, d.Name())
		return os.WriteFile(path, data, 0o600)
	})
	if err != nil || len(ids) == 0 {
		t.Fatalf("no chunk found in the server's store: %v", err)
	}
	return ids
}

// decodeAnswer decodes a 2xx answer's JSON into out.
func decodeAnswer(t *testing.T, resp *http.Response, out any) {
	t.Helper()
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s: %s", resp.Status, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
}

// TestTheDemoKVsVolumeRestoresEveryKey backs up the demo's kv (built from
// examples/demo/kv, as `make demo` builds it) with keys written through
// its API, changes and adds keys, and restores the backup with kv stopped:
// the restored kv answers every key it had at backup time, with its value
// then, and not the key added since.
func TestTheDemoKVsVolumeRestoresEveryKey(t *testing.T) {
	c := newCluster(t, clusterOptions{agents: []string{"a"}})
	a := c.agents["a"]
	route := "kv-" + randomWord()[:8] + ".localhost"
	dir := demoProject(t, "")
	file := filepath.Join(dir, "hatch.yaml")
	apply := func(replicas int) {
		t.Helper()
		yaml := fmt.Sprintf(`project: kvdemo
eggs:
  kv:
    build: ./kv
    replicas: %d
    port: 8081
    env: {DATA_DIR: /data}
    volumes: ["data:/data"]
    routes: [%s]
    health: {http: /healthz, interval: 1s, timeout: 1s}
    stop_timeout: 2s
volumes:
  data:
    backup: {keep: 2}
`, replicas, route)
		if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		c.mustHatch(nil, "apply", "-f", file, "--yes")
	}
	kv := func(method, key, value string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, a.IngressURL()+"/kv/"+key, strings.NewReader(value))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = route
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	waitKV := func() {
		t.Helper()
		dockertest.Eventually(t, 90*time.Second, 200*time.Millisecond, func() error {
			code, body, err := viaIngress(t.Context(), a, route, "/healthz")
			if err != nil || code != http.StatusOK {
				return fmt.Errorf("kv: %d %q %v", code, body, err)
			}
			return nil
		})
	}

	apply(1)
	waitKV()
	want := map[string]string{}
	for i := range 50 {
		key, value := fmt.Sprintf("key-%02d", i), randomWord()
		if code, body := kv(http.MethodPut, key, value); code != http.StatusNoContent {
			t.Fatalf("PUT %s: %d %s", key, code, body)
		}
		want[key] = value
	}
	if out, code := c.hatchCode(nil, "volume", "backup", "kvdemo", "data"); code != 0 {
		t.Fatalf("hatch volume backup: exit %d\n%s", code, out)
	}
	kv(http.MethodPut, "key-07", "changed after the backup")
	kv(http.MethodPut, "added", "after the backup")

	apply(0)
	dockertest.Eventually(t, 60*time.Second, 200*time.Millisecond, func() error {
		if n := c.containerCount(t, "default", "kvdemo", "kv"); n != 0 {
			return fmt.Errorf("%d kv containers left", n)
		}
		return nil
	})
	if out, code := c.hatchCode(nil, "volume", "restore", "kvdemo", "data", "--yes"); code != 0 {
		t.Fatalf("hatch volume restore: exit %d\n%s", code, out)
	}
	apply(1)
	waitKV()
	for key, value := range want {
		if code, body := kv(http.MethodGet, key, ""); code != http.StatusOK || body != value {
			t.Errorf("GET %s after the restore: %d %q, want %q", key, code, body, value)
		}
	}
	if code, body := kv(http.MethodGet, "added", ""); code != http.StatusNotFound {
		t.Errorf("a key added after the backup: GET answered %d %q after the restore, want 404", code, body)
	}
}
