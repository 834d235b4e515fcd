package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/hatchery/hatchery/internal/backup"
	"github.com/hatchery/hatchery/internal/backup/backuptest"
	"github.com/hatchery/hatchery/internal/contract"
)

// chunkServer serves a task's chunk routes over an in-memory store, as the
// control plane does for task "t1" of host "h1"; fail, if set, answers a
// request instead (a status, or 0 to serve it).
type chunkServer struct {
	store    *backuptest.Mem
	manifest string // the restore's backup, which GET .../manifest gives
	requests atomic.Int64
	mu       sync.Mutex
	fail     func(r *http.Request) int
}

func (s *chunkServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	s.mu.Lock()
	fail := s.fail
	s.mu.Unlock()
	if fail != nil {
		if code := fail(r); code != 0 {
			writeJSON(w, code, map[string]string{"error": "injected", "message": "injected failure"})
			return
		}
	}
	if r.Header.Get("Authorization") == "" {
		writeJSON(w, 401, map[string]string{"error": "unauthenticated"})
		return
	}
	route, ok := strings.CutPrefix(r.URL.Path, contract.VolumeTaskPath("h1", "t1"))
	if !ok {
		writeJSON(w, 403, map[string]string{"error": "forbidden", "message": "not this host's task"})
		return
	}
	body, _ := io.ReadAll(r.Body)
	ctx := r.Context()
	var err error
	switch {
	case r.Method == http.MethodPost && route == "/missing":
		var ids []string
		if err = json.Unmarshal(body, &ids); err == nil {
			var missing []string
			missing, err = s.store.Missing(ctx, ids)
			if err == nil {
				writeJSON(w, 200, missing)
				return
			}
		}
	case r.Method == http.MethodPut && strings.HasPrefix(route, "/chunks/"):
		err = s.store.Put(ctx, strings.TrimPrefix(route, "/chunks/"), body)
	case r.Method == http.MethodPut && strings.HasPrefix(route, "/manifest/"):
		err = s.store.PutManifest(ctx, strings.TrimPrefix(route, "/manifest/"), body)
	case r.Method == http.MethodGet && route == "/manifest":
		var data []byte
		if data, err = s.store.GetManifest(ctx, s.manifest); err == nil {
			w.Write(data)
			return
		}
	case r.Method == http.MethodGet && strings.HasPrefix(route, "/chunks/"):
		var data []byte
		if data, err = s.store.Get(ctx, strings.TrimPrefix(route, "/chunks/")); err == nil {
			w.Write(data)
			return
		}
	default:
		writeJSON(w, 404, map[string]string{"error": "not_found"})
		return
	}
	switch {
	case errors.Is(err, backup.ErrNotFound):
		writeJSON(w, 404, map[string]string{"error": "not_found", "message": err.Error()})
	case err != nil:
		writeJSON(w, 400, map[string]string{"error": "bad_request", "message": err.Error()})
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

func (s *chunkServer) failWith(fn func(r *http.Request) int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = fn
}

func newTaskStore(t *testing.T, s *chunkServer) *TaskStore {
	t.Helper()
	srv, fp := tlsServer(t, s)
	c, err := NewHTTPClient(Identity{Server: srv.URL, HostID: "h1", Token: "hatch-host.secret." + fp, CAFingerprint: fp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ts := c.TaskStore("t1").(*TaskStore)
	ts.retry = func() backoff.BackOff { return backoff.NewConstantBackOff(time.Millisecond) }
	return ts
}

func TestABackupAndItsRestoreGoThroughTheTaskRoutesDespiteTransientFailures(t *testing.T) {
	srv := &chunkServer{store: backuptest.NewMem()}
	ts := newTaskStore(t, srv)
	// Every third request fails with a 503: each is tried again.
	var n atomic.Int64
	srv.failWith(func(*http.Request) int {
		if n.Add(1)%3 == 0 {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	key, err := backup.NewVolumeKey(backup.VolumeID{Namespace: "default", Project: "shop", Volume: "data"}, bytes.Repeat([]byte{3}, 32))
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB, several chunks
	m, st, err := backup.Backup(t.Context(), bytes.NewReader(data), key, ts, time.Now())
	if err != nil {
		t.Fatalf("backup through the task routes: %v", err)
	}
	if st.NewChunks == 0 || srv.store.Puts != st.NewChunks+1 {
		t.Errorf("stats %+v, %d objects stored: want every new chunk and the manifest", st, srv.store.Puts)
	}
	srv.manifest = m.ID
	opened, err := backup.OpenManifest(t.Context(), ts, m.ID, key)
	if err != nil {
		t.Fatalf("open the manifest through the routes: %v", err)
	}
	var out bytes.Buffer
	if err := backup.Restore(t.Context(), opened, key, ts, &out, t.TempDir()); err != nil {
		t.Fatalf("restore through the routes: %v", err)
	}
	if !bytes.Equal(out.Bytes(), data) {
		t.Error("the restored stream differs")
	}
}

func TestATaskStoreDoesNotRetryARefusalAndTellsAMissingChunk(t *testing.T) {
	srv := &chunkServer{store: backuptest.NewMem()}
	ts := newTaskStore(t, srv)
	id := strings.Repeat("a", 64)
	srv.failWith(func(*http.Request) int { return http.StatusForbidden })
	if err := ts.Put(t.Context(), id, []byte("x")); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("put refused: %v, want the 403", err)
	}
	if got := srv.requests.Load(); got != 1 {
		t.Errorf("a 403 was sent %d times, want once", got)
	}
	srv.failWith(nil)
	if _, err := ts.Get(t.Context(), id); !errors.Is(err, backup.ErrNotFound) {
		t.Errorf("get of a chunk the store lacks: %v, want ErrNotFound", err)
	}
	srv.failWith(func(*http.Request) int { return http.StatusBadGateway })
	before := srv.requests.Load()
	if err := ts.Put(t.Context(), id, []byte("x")); err == nil {
		t.Error("put with the server always failing succeeded")
	}
	if got := srv.requests.Load() - before; got != taskStoreAttempts {
		t.Errorf("a failing put was sent %d times, want %d", got, taskStoreAttempts)
	}
	if _, err := ts.ListManifests(t.Context()); err == nil {
		t.Error("a host's store listed backups")
	}
}

func TestATaskStoreRefusesAMissingAnswerNamingChunksNotAskedAbout(t *testing.T) {
	bogus := strings.Repeat("b", 64)
	srv, fp := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, []string{bogus})
	}))
	c, err := NewHTTPClient(Identity{Server: srv.URL, HostID: "h1", Token: "hatch-host.secret." + fp, CAFingerprint: fp})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.TaskStore("t1").Missing(t.Context(), []string{strings.Repeat("a", 64)}); err == nil || !strings.Contains(err.Error(), bogus) {
		t.Errorf("missing answered with an ID not asked about: %v, want a refusal naming it", err)
	}
}
