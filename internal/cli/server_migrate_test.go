package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/agent"
	"github.com/hatchery/hatchery/internal/blob/blobtest"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/testutil/pgtest"
)

func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	removeHatchBinary()
	os.Exit(code)
}

// lockedBuffer is a bytes.Buffer safe for a server writing its logs while
// the test reads them.
type lockedBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startServerProc runs `hatch server args...` in this process until the
// returned stop is called; its stdout and stderr go to out.
func startServerProc(t *testing.T, out *lockedBuffer, args ...string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() { done <- Run(ctx, append([]string{"server"}, args...), out, out) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case code := <-done:
				if code != 0 {
					t.Errorf("hatch server exited %d:\n%s", code, out.String())
				}
			case <-time.After(30 * time.Second):
				t.Error("hatch server did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// fakeHost is a joined host without Docker: it long-polls its desired state
// and reports every workload of it running and healthy at its spec, as an
// agent that converged would.
type fakeHost struct {
	id      agent.Identity
	wait    time.Duration // of each long-poll
	mu      sync.Mutex    // guards version
	version string
}

func (h *fakeHost) run(ctx context.Context) {
	cp, err := agent.NewHTTPClient(h.id)
	if err != nil {
		panic(err)
	}
	defer cp.Close()
	var ds contract.DesiredState
	for ctx.Err() == nil {
		// The report first, as the agent's heartbeat does not wait on its
		// long-poll.
		var cs []contract.ContainerStatus
		for _, w := range ds.Workloads {
			for slot := range w.Replicas {
				cs = append(cs, contract.ContainerStatus{WorkloadID: w.ID(), Slot: slot, State: contract.StateRunning,
					Healthy: true, SpecHash: contract.SpecHash(w), ContainerID: fmt.Sprintf("c-%s-%d", w.Egg, slot)})
			}
		}
		_ = cp.ReportStatus(ctx, contract.StatusReport{HostID: h.id.HostID, Version: ds.Version, Time: time.Now(), Containers: cs})
		next, err := cp.DesiredState(ctx, ds.Version, h.wait)
		switch {
		case err == nil:
			ds = next
			h.mu.Lock()
			h.version = ds.Version
			h.mu.Unlock()
		case errors.Is(err, agent.ErrNotModified):
		default:
			time.Sleep(100 * time.Millisecond) // the server is away: try again
		}
	}
}

func (h *fakeHost) desiredVersion() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.version
}

// A project with every kind of resource (egg, network, volume, secret,
// route) deployed on a server over SQLite; `hatch server migrate` copies the
// store into PostgreSQL; the server started on the copy, with the same data
// dir, shows the same `hatch status`, and the host carries on with the
// identity it has: no new join, the same desired state.
func TestMigrateToPostgresKeepsStatusAndHosts(t *testing.T) {
	pg := pgtest.Shared(t)
	dir := t.TempDir()
	data, cfgPath := filepath.Join(dir, "server"), filepath.Join(dir, "config.json")
	addr := freeAddr(t)
	var logs lockedBuffer
	stop := startServerProc(t, &logs, "--data-dir", data, "--listen", addr, "--cli-config", cfgPath)
	var cfg client.Config
	eventually(t, 30*time.Second, "the server wrote its CLI config", func() bool {
		var ok bool
		var err error
		cfg, ok, err = client.Load(cfgPath)
		return err == nil && ok
	})
	t.Setenv(client.EnvServer, cfg.Server)
	t.Setenv(client.EnvToken, cfg.Token)

	code, joinToken, errOut := run(t, "token", "create", "--join")
	if code != 0 {
		t.Fatalf("hatch token create --join = %d %s", code, errOut)
	}
	id, err := agent.JoinHost(t.Context(), t.TempDir(), cfg.Server, strings.TrimSpace(joinToken), "node-1", zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	host := &fakeHost{id: id, wait: time.Second}
	hostCtx, stopHost := context.WithCancel(context.Background())
	hostDone := make(chan struct{})
	go func() { defer close(hostDone); host.run(hostCtx) }()
	defer func() { stopHost(); <-hostDone }()

	project := filepath.Join(dir, "hatch.yaml")
	if err := os.WriteFile(project, []byte(`project: shop
eggs:
  web:
    image: registry.local/web:1
    pull: missing
    replicas: 2
    port: 8080
    routes: [shop.localhost]
    env: {DB_URL: "http://${db.address}", KEY: "${secret.api_key}"}
    secrets: [api_key]
    networks: [front]
  db:
    image: registry.local/db:1
    pull: missing
    port: 5432
    volumes: ["data:/data"]
    networks: [front]
networks:
  front: {}
volumes:
  data: {}
secrets:
  api_key: {env: API_KEY}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("API_KEY", "k-1")
	if code, out, errOut := run(t, "apply", "-f", project, "--yes"); code != 0 {
		t.Fatalf("hatch apply = %d\n%s\n%s", code, out, errOut)
	}
	// A build context uploaded to the SQLite server, kept in its data dir.
	blobContent := blobtest.Random(1<<20+77, 21)
	blobDigest, blobFile := blobtest.Digest(blobContent), filepath.Join(dir, "context.tar")
	if err := os.WriteFile(blobFile, blobContent, 0o600); err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.Blobs().Put(t.Context(), blobDigest, blobFile); err != nil {
		t.Fatal(err)
	}
	// The apply returns once the eggs rolled out; the route's write that
	// follows them reaches the host a moment later. The version to keep is
	// the one that no longer moves (the host polls every second at most).
	versionBefore := host.desiredVersion()
	for still := time.Now(); time.Since(still) < 1500*time.Millisecond; time.Sleep(50 * time.Millisecond) {
		if v := host.desiredVersion(); v != versionBefore {
			versionBefore, still = v, time.Now()
		}
	}
	_, statusBefore, _ := run(t, "status")
	if versionBefore == "" || !strings.Contains(statusBefore, "web") {
		t.Fatalf("before the copy: version %q, status\n%s", versionBefore, statusBefore)
	}
	stop()

	db := pg.NewDatabase(t)
	passFile := filepath.Join(dir, "pgpass")
	if err := pg.PassFile(passFile); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PGPASSFILE", passFile)
	code, out, errOut := run(t, "server", "migrate", "--from", filepath.Join(data, "hatch.db"), "--to", pg.URLWithoutPassword(db))
	if code != 0 {
		t.Fatalf("hatch server migrate = %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, fmt.Sprintf("blobs            1 (%d bytes)", len(blobContent))) {
		t.Fatalf("hatch server migrate does not say it copied the blob:\n%s", out)
	}
	// The copy keeps no blob on disk: remove the data dir's, so that only
	// the database can serve it.
	if err := os.RemoveAll(filepath.Join(data, "blobs")); err != nil {
		t.Fatal(err)
	}

	// The copy's server, its URL (with the password) in HATCH_STORE.
	t.Setenv("PGPASSFILE", filepath.Join(dir, "none"))
	t.Setenv(storeEnv, pg.URL(db))
	var pgLogs lockedBuffer
	startServerProc(t, &pgLogs, "--data-dir", data, "--listen", addr, "--cli-config", cfgPath)
	var statusAfter string
	eventually(t, 30*time.Second, "the copy's server shows the same status", func() bool {
		_, statusAfter, _ = run(t, "status")
		return statusAfter == statusBefore
	})
	if v := host.desiredVersion(); v != versionBefore {
		t.Fatalf("the host's desired state went from %s to %s", versionBefore, v)
	}
	if code, got := fetchBlob(t, admin, blobDigest); code != http.StatusOK || !bytes.Equal(got, blobContent) {
		t.Fatalf("GET of the copied blob = %d with %d bytes, want 200 with the %d uploaded", code, len(got), len(blobContent))
	}
	_, hosts, _ := run(t, "hosts")
	if strings.Count(hosts, "node-1") != 1 || !strings.Contains(hosts, " up ") {
		t.Fatalf("hatch hosts on the copy:\n%s", hosts)
	}
	for name, text := range map[string]string{"the server's output": pgLogs.String(), "migrate's output": out + errOut} {
		if strings.Contains(text, pg.Password) {
			t.Fatalf("%s holds the database password:\n%s", name, text)
		}
	}
	if !strings.Contains(pgLogs.String(), "postgres://127.0.0.1:") {
		t.Fatalf("the server's logs do not say which store it uses:\n%s", pgLogs.String())
	}
}

// eventually polls cond every 100 ms until it holds, or fails the test.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A --blobs directory that is not there is refused, naming it, before the
// database is touched.
func TestMigrateRefusesAMissingBlobDir(t *testing.T) {
	dir := t.TempDir()
	from := filepath.Join(dir, "hatch.db")
	if err := os.WriteFile(from, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "elsewhere")
	code, _, errOut := run(t, "server", "migrate", "--from", from, "--blobs", missing, "--to", "postgres://nobody@127.0.0.1:1/none")
	if code == 0 || !strings.Contains(errOut, "--blobs "+missing) {
		t.Fatalf("hatch server migrate --blobs <missing> = %d\n%s", code, errOut)
	}
}
