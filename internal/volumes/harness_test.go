package volumes

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/backup"
	"github.com/hatchery/hatchery/internal/blob"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/desired"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/seal"
	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/store/postgres"
	"github.com/hatchery/hatchery/internal/store/sqlite"
	"github.com/hatchery/hatchery/internal/testutil/pgtest"
)

// testStore is what the tests need of a real store.
type testStore interface {
	store.VolumeTasks
	store.Runs
	store.ScheduleStates
	store.Leases
	store.Events
	store.DesiredStates
	store.Statuses
	store.Members
	store.SecretValues
	store.RegistryLogins
	store.BlobRetention
	ListProjects(ctx context.Context) ([]string, error)
	ListResources(ctx context.Context, project string) ([]*resource.Deployed, error)
	PutResource(ctx context.Context, project string, r *resource.Deployed) error
	MarkHostDown(ctx context.Context, id string, notSeenSince, at time.Time) (bool, error)
}

// clock stands still unless advanced, a little past the wall clock (whose
// time the SQLite store checks leases' fences by).
type clock struct {
	mu sync.Mutex
	at time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = c.at.Add(d)
}

// harness is a backups service over a real store, the hosts' desired
// states and the blob store, without its loop: the tests run its passes.
type harness struct {
	st     testStore
	states *desired.States
	svc    *Service
	clock  *clock
	box    *seal.Box
	key    []byte
	blobs  blob.Storage
	began  time.Time
}

const project = "default/shop"

// onStores runs test on a harness over SQLite and over PostgreSQL.
func onStores(t *testing.T, test func(t *testing.T, h *harness)) {
	t.Run("sqlite", func(t *testing.T) {
		st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "hatch.db"), zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		b, err := blob.Open(filepath.Join(t.TempDir(), "blobs"))
		if err != nil {
			t.Fatal(err)
		}
		test(t, harnessOn(t, st, b, "srv-a"))
	})
	t.Run("postgres", func(t *testing.T) {
		st, err := postgres.Open(t.Context(), pgtest.Shared(t).NewSchema(t), zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		test(t, harnessOn(t, st, st.Blobs(), "srv-a"))
	})
}

func harnessOn(t *testing.T, st testStore, blobs blob.Storage, serverID string) *harness {
	t.Helper()
	log := zaptest.NewLogger(t)
	box, err := seal.New(bytes.Repeat([]byte{1}, 32))
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{at: time.Now().Truncate(time.Second).Add(500 * time.Millisecond)}
	states, err := desired.New(desired.Deps{Desired: st, Statuses: st, Records: st, Events: st, Secrets: st,
		Fleet: desired.StoreFleet{List: st, Identities: st, Reports: st}, Box: box, Logger: log, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	key := bytes.Repeat([]byte{9}, backup.KeySize)
	cfg := DefaultConfig()
	cfg.LeaseWait = 500 * time.Millisecond
	svc, err := New(cfg, Deps{Tasks: st, Leases: st, Events: st, Retention: st, Records: st, Hosts: st, Desired: states,
		Store: &BlobStore{Blobs: blobs, Tasks: st}, ClusterKey: key, ServerID: serverID, Logger: log, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	return &harness{st: st, states: states, svc: svc, clock: c, box: box, key: key, blobs: blobs, began: c.now().Add(-time.Minute)}
}

// report stores a status report of host (which makes it up).
func (h *harness) report(t *testing.T, host string, tasks []contract.VolumeTaskStatus, containers ...contract.ContainerStatus) {
	t.Helper()
	b, err := json.Marshal(contract.StatusReport{HostID: host, Time: h.clock.now(), VolumeTasks: tasks, Containers: containers})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.st.PutStatus(t.Context(), host, b, h.clock.now()); err != nil {
		t.Fatal(err)
	}
}

// volume records a deployed volume of the project on host, mounted by egg
// db, with the backup policy given (nil: none), and lists it as kept there.
func (h *harness) volume(t *testing.T, name, host string, policy map[string]any) {
	t.Helper()
	in := map[string]any{"labels": map[string]any{}, "egg": "db", "placement": map[string]any{}, "resources": map[string]any{}}
	if policy != nil {
		in["backup"] = policy
	}
	r := &resource.Deployed{ID: "id-" + name, Type: resource.Volume, Name: name, Inputs: in,
		Outputs: map[string]any{"name": name, "host": host}}
	if err := h.st.PutResource(t.Context(), project, r); err != nil {
		t.Fatal(err)
	}
	if err := h.states.KeepVolume(t.Context(), project, name, host); err != nil {
		t.Fatal(err)
	}
}

// eggOn puts egg db's workload in host's desired state, mounting the
// project's volume (as an apply would have placed it).
func (h *harness) eggOn(t *testing.T, host, volume string) {
	t.Helper()
	d := h.desiredState(t, host)
	d.Workloads = append(d.Workloads, contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: "db", Image: "db:1", Replicas: 1,
		Volumes: []contract.VolumeMount{{Name: volume, DockerName: contract.VolumeName(host, "default", "shop", volume), Target: "/data"}}})
	d.Version = d.ContentVersion()
	enc, err := store.EncodeDesiredState(h.box, d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.st.PutDesiredStates(t.Context(), []store.DesiredState{enc}, nil); err != nil {
		t.Fatal(err)
	}
}

// desiredState returns host's desired state.
func (h *harness) desiredState(t *testing.T, host string) contract.DesiredState {
	t.Helper()
	st, err := h.st.DesiredState(t.Context(), host)
	if err != nil {
		t.Fatal(err)
	}
	d, err := store.DecodeDesiredState(h.box, st)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// pass runs one pass of the loop.
func (h *harness) pass(t *testing.T) {
	t.Helper()
	for _, step := range []func(context.Context) error{
		func(ctx context.Context) error { return h.svc.recordProgress(ctx, h.began) }, h.svc.failover, h.svc.deliverPending, h.svc.releaseEnded,
	} {
		if err := step(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// task returns a recorded task.
func (h *harness) task(t *testing.T, id string) store.VolumeTask {
	t.Helper()
	v, err := h.st.VolumeTask(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// events returns the events recorded.
func (h *harness) events(t *testing.T) []store.Event {
	t.Helper()
	evs, err := h.st.ListEvents(t.Context(), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func eventOf(evs []store.Event, typ store.EventType) (store.Event, bool) {
	i := slices.IndexFunc(evs, func(e store.Event) bool { return e.Type == typ })
	if i < 0 {
		return store.Event{}, false
	}
	return evs[i], true
}

// hostStore is a backup.Store as a host's agent reaches the control
// plane: every call goes through the service's data routes as that host.
type hostStore struct {
	svc        *Service
	host, task string
}

func (a hostStore) Put(ctx context.Context, id string, data []byte) error {
	return a.svc.PutChunk(ctx, a.host, a.task, id, data)
}
func (a hostStore) Get(ctx context.Context, id string) ([]byte, error) {
	return a.svc.GetChunk(ctx, a.host, a.task, id)
}
func (a hostStore) Missing(ctx context.Context, ids []string) ([]string, error) {
	return a.svc.Missing(ctx, a.host, a.task, ids)
}
func (a hostStore) PutManifest(ctx context.Context, id string, data []byte) error {
	return a.svc.PutManifest(ctx, a.host, a.task, id, data)
}
func (a hostStore) GetManifest(ctx context.Context, _ string) ([]byte, error) {
	return a.svc.GetManifest(ctx, a.host, a.task)
}
func (a hostStore) ListManifests(context.Context) ([]string, error) {
	return nil, fmt.Errorf("a host lists no manifests")
}

// volumeKeyOf is the key a host is to get for a volume of the project.
func (h *harness) volumeKeyOf(t *testing.T, name string) backup.VolumeKey {
	t.Helper()
	k, err := backup.DeriveVolumeKey(h.key, backup.VolumeID{Namespace: "default", Project: "shop", Volume: name})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func sha(b []byte) [32]byte { return sha256.Sum256(b) }
