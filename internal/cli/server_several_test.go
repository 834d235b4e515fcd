package cli

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/agent"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/serverd"
	"github.com/hatchery/hatchery/internal/testutil/pgtest"
)

// copyFile copies one file of a data dir to another, keeping its mode.
func copyFile(t testing.TB, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, fi.Mode().Perm()); err != nil {
		t.Fatal(err)
	}
}

// Two servers on one PostgreSQL database, given the same CA, seal key and
// admin token: a host joined through A long-polls B (30 s polls), and an
// apply through A reaches it through B at once, by B's listening
// connection, not by the poll's end.
// copySharedFiles gives a server's data dir the files every server of one
// control plane shares (serverd.SharedFiles) from another's, those it has.
func copySharedFiles(t testing.TB, from, to string) {
	t.Helper()
	for _, f := range serverd.SharedFiles() {
		if _, err := os.Stat(filepath.Join(from, f)); err == nil {
			copyFile(t, filepath.Join(from, f), filepath.Join(to, f))
		}
	}
}

// twoServers are two `hatch server` processes on one PostgreSQL database,
// B started on copies of A's shared files (those `hatch server init`
// writes), and the CLI config A wrote.
type twoServers struct {
	cfg          client.Config
	storeURL     string // the database's, with its password
	dir          string // the test's own, holding both data dirs
	dataA, dataB string
	addrA, addrB string
}

func startTwoServers(t *testing.T) twoServers {
	t.Helper()
	pg := pgtest.Shared(t)
	dir := t.TempDir()
	s := twoServers{dir: dir, dataA: filepath.Join(dir, "a"), dataB: filepath.Join(dir, "b"), addrA: freeAddr(t), addrB: freeAddr(t)}
	cfgPath := filepath.Join(dir, "config.json")
	s.storeURL = pg.URL(pg.NewDatabase(t))
	t.Setenv(storeEnv, s.storeURL)
	var logsA, logsB lockedBuffer
	startServerProc(t, &logsA, "--data-dir", s.dataA, "--listen", s.addrA, "--tls-name", "127.0.0.1", "--cli-config", cfgPath)
	eventually(t, 30*time.Second, "server A wrote its CLI config", func() bool {
		cfg, ok, err := client.Load(cfgPath)
		s.cfg = cfg
		return err == nil && ok
	})
	copySharedFiles(t, s.dataA, s.dataB)
	startServerProc(t, &logsB, "--data-dir", s.dataB, "--listen", s.addrB, "--tls-name", "127.0.0.1", "--cli-config", "-")
	eventually(t, 30*time.Second, "server B listens", func() bool {
		conn, err := net.Dial("tcp", s.addrB)
		if err == nil {
			conn.Close()
		}
		return err == nil
	})
	return s
}

func TestAnApplyThroughOneServerReachesAHostPollingAnother(t *testing.T) {
	servers := startTwoServers(t)
	cfg, dir := servers.cfg, servers.dir
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
	id.Server = "https://" + servers.addrB // the host polls B only
	host := &fakeHost{id: id, wait: 30 * time.Second}
	hostCtx, stopHost := context.WithCancel(context.Background())
	hostDone := make(chan struct{})
	go func() { defer close(hostDone); host.run(hostCtx) }()
	defer func() { stopHost(); <-hostDone }()
	eventually(t, 10*time.Second, "the host is up", func() bool {
		_, hosts, _ := run(t, "hosts")
		return strings.Contains(hosts, " up ")
	})
	// Applied before the host's poll waits on B, the state would be in the
	// poll's first read: it would pass without B being woken.
	metrics := newMetricsClient(t, servers.dataB, cfg.Token)
	eventually(t, 10*time.Second, "the host's poll held by B", func() bool {
		return metrics.gauge("https://"+servers.addrB, "hatch_longpoll_waiters") == "1"
	})

	project := filepath.Join(dir, "hatch.yaml")
	if err := os.WriteFile(project, []byte("project: shop\neggs:\n  web:\n    image: registry.local/web:1\n    pull: missing\n    replicas: 2\n    port: 8080\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if code, out, errOut := run(t, "apply", "-f", project, "--yes"); code != 0 {
		t.Fatalf("hatch apply through A = %d (the host polling B did not hear of it before its poll ended?)\n%s\n%s", code, out, errOut)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the apply took %v to converge: the host polling B heard of it only when its poll ended", took)
	}
	if host.desiredVersion() == "" {
		t.Fatal("the host never got a desired state")
	}
}
