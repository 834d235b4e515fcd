package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/agent"
	"github.com/hatchery/hatchery/internal/client"
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
func TestAnApplyThroughOneServerReachesAHostPollingAnother(t *testing.T) {
	pg := pgtest.Shared(t)
	dir := t.TempDir()
	dataA, dataB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	cfgPath := filepath.Join(dir, "config.json")
	addrA, addrB := freeAddr(t), freeAddr(t)
	t.Setenv(storeEnv, pg.URL(pg.NewDatabase(t)))
	var logsA, logsB lockedBuffer
	startServerProc(t, &logsA, "--data-dir", dataA, "--listen", addrA, "--tls-name", "127.0.0.1", "--cli-config", cfgPath)
	var cfg client.Config
	eventually(t, 30*time.Second, "server A wrote its CLI config", func() bool {
		var ok bool
		var err error
		cfg, ok, err = client.Load(cfgPath)
		return err == nil && ok
	})
	for _, f := range []string{"tls/ca.pem", "tls/ca-key.pem", "tls/host-ca.pem", "tls/host-ca-key.pem", "seal.key", "admin-token"} {
		if _, err := os.Stat(filepath.Join(dataA, f)); err == nil {
			copyFile(t, filepath.Join(dataA, f), filepath.Join(dataB, f))
		}
	}
	startServerProc(t, &logsB, "--data-dir", dataB, "--listen", addrB, "--tls-name", "127.0.0.1", "--cli-config", "-")
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
	id.Server = "https://" + addrB // the host polls B only
	host := &fakeHost{id: id, wait: 30 * time.Second}
	hostCtx, stopHost := context.WithCancel(context.Background())
	hostDone := make(chan struct{})
	go func() { defer close(hostDone); host.run(hostCtx) }()
	defer func() { stopHost(); <-hostDone }()
	eventually(t, 10*time.Second, "the host is up", func() bool {
		_, hosts, _ := run(t, "hosts")
		return strings.Contains(hosts, " up ")
	})
	time.Sleep(500 * time.Millisecond) // the host is in its 30 s poll on B

	project := filepath.Join(dir, "hatch.yaml")
	if err := os.WriteFile(project, []byte("project: shop\neggs:\n  web:\n    image: registry.local/web:1\n    replicas: 2\n    port: 8080\n"), 0o600); err != nil {
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
