package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/hatchery/hatchery/internal/deploy"
	"github.com/hatchery/hatchery/internal/leader"
	"github.com/hatchery/hatchery/internal/spec"
	"github.com/hatchery/hatchery/internal/store"
)

func TestUpRefusesToStartWithoutDocker(t *testing.T) {
	isolate(t)
	dir, _ := os.Getwd()
	if err := os.WriteFile(filepath.Join(dir, "hatch.yaml"), []byte("project: demo\neggs:\n  web: {image: nginx:1.27}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(dir, "no-docker.sock"))
	code, _, stderr := run(t, "up", "--yes")
	if code != 1 || !strings.Contains(stderr, "the Docker Engine does not answer") || !strings.Contains(stderr, "start Docker") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
		t.Fatalf("stderr has more than one line: %q", stderr)
	}
}

func TestUpDirIsPrivateAndIgnoredByGit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), ".hatch")
	if err := prepareUpDir(dir); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(dir)
	if err != nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("stat %s: %v, mode %v; want 0700", dir, err, info.Mode().Perm())
	}
	ignore, err := os.ReadFile(filepath.Join(dir, ".gitignore"))
	if err != nil || !strings.HasSuffix(string(ignore), "\n*\n") {
		t.Fatalf(".gitignore = %q, %v; want it to ignore everything", ignore, err)
	}
	// A .gitignore the user changed is left alone.
	if err := os.WriteFile(filepath.Join(dir, ".gitignore"), []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := prepareUpDir(dir); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ".gitignore")); string(b) != "mine\n" {
		t.Fatalf(".gitignore rewritten: %q", b)
	}
	// An earlier run's .hatch left open to all is tightened.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := prepareUpDir(dir); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(dir); err != nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("an open .hatch of an earlier run: %v, mode %v; want 0700", err, info.Mode().Perm())
	}
}

func TestUpErrorSaysWhatToDoAboutABusyAddress(t *testing.T) {
	busy := upError(fmt.Errorf("listen: %w", syscall.EADDRINUSE), ".hatch/hatch.log")
	if !strings.Contains(busy.Error(), "another hatch up or hatch server may be running") || !errors.Is(busy, syscall.EADDRINUSE) {
		t.Fatalf("busy address: %v", busy)
	}
	other := upError(errors.New("boom"), ".hatch/hatch.log")
	if other.Error() != "boom (details in .hatch/hatch.log)" {
		t.Fatalf("other error: %v", other)
	}
	exit := &exitError{code: 1}
	if upError(exit, "x") != exit {
		t.Fatal("an exit code was wrapped")
	}
}

func TestPrintRoutesGivesEachRoutesURL(t *testing.T) {
	p := &spec.Project{Eggs: []*spec.Egg{
		{Name: "web", Routes: []spec.Route{{Host: "demo.localhost", Path: "/"}, {Host: "api.localhost", Path: "/v1"}}},
		{Name: "kv"},
	}}
	var b strings.Builder
	printRoutes(&b, p, "127.0.0.1:8080")
	want := "web answers at http://demo.localhost:8080/\nweb answers at http://api.localhost:8080/v1\n"
	if b.String() != want {
		t.Fatalf("routes:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	printRoutes(&b, p, ":80")
	if !strings.HasPrefix(b.String(), "web answers at http://demo.localhost/\n") {
		t.Fatalf("port 80 printed: %q", b.String())
	}
}

func TestIngressURL(t *testing.T) {
	for addr, want := range map[string]string{"127.0.0.1:8080": "http://127.0.0.1:8080", ":8080": "http://localhost:8080", "[::1]:80": "http://[::1]:80"} {
		if got := ingressURL(addr); got != want {
			t.Errorf("ingressURL(%q) = %q, want %q", addr, got, want)
		}
	}
}

// TestLocalRunStopsTheLastStartedFirst: the agent (started second) stops
// before the control plane, so it never sees its server go away.
func TestLocalRunStopsTheLastStartedFirst(t *testing.T) {
	var (
		mu    sync.Mutex
		order []string
	)
	l := &localRun{}
	for _, name := range []string{"server", "agent"} {
		l.run(context.Background(), func(ctx context.Context) error {
			<-ctx.Done()
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			return nil
		})
	}
	if err := l.stop(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(order, ",") != "agent,server" {
		t.Fatalf("stopped %v, want agent then server", order)
	}
	if err := l.stop(); err != nil {
		t.Fatalf("a second stop = %v", err)
	}
}

func TestLocalRunNoticesWhatEndsOnItsOwn(t *testing.T) {
	l := &localRun{}
	boom := errors.New("listen: address in use")
	early := l.run(context.Background(), func(context.Context) error { return boom })
	_, err := waitFor(context.Background(), early, time.Minute, "never", func(context.Context) (int, error) {
		return 0, errors.New("not yet")
	})
	if !errors.Is(err, boom) {
		t.Fatalf("waitFor = %v, want the goroutine's error", err)
	}
	ctx := l.ctxUntilStopped(context.Background())
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the follow context outlived a component that stopped on its own")
	}
	if err := l.stop(); !errors.Is(err, boom) {
		t.Fatalf("stop = %v, want the error it ended with", err)
	}
}

func TestWaitForGivesUpAfterItsTimeoutWithTheLastReason(t *testing.T) {
	_, err := waitFor(context.Background(), nil, 150*time.Millisecond, "the agent did not report", func(context.Context) (string, error) {
		return "", errors.New("not up yet")
	})
	if err == nil || err.Error() != "the agent did not report within 150ms: not up yet" {
		t.Fatalf("waitFor = %v", err)
	}
}

// hatch up runs its control plane with the server's defaults: a setting
// added to `hatch server` with a flag default but not to hatch up left its
// server refusing to start (twice: --max-replicas, then the lease terms).
func TestUpsControlPlaneStartsWithTheServersDefaults(t *testing.T) {
	dir := filepath.Join(t.TempDir(), ".hatch")
	if err := prepareUpDir(dir); err != nil {
		t.Fatal(err)
	}
	l := &localRun{}
	defer func() {
		if err := l.stop(); err != nil {
			t.Error(err)
		}
	}()
	c, err := l.startServer(t.Context(), dir, upOptions{listen: freeAddr(t)}, zapcore.AddSync(io.Discard))
	if err != nil {
		t.Fatalf("hatch up's control plane did not start: %v", err)
	}
	c.Close()
	// And what hatch server takes with no flag is the same.
	cmd := newServerCmd()
	if err := cmd.ParseFlags(nil); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"max-replicas": fmt.Sprint(deploy.DefaultMaxReplicas),
		"loops-lease": leader.DefaultTTL.String(), "keep-applies": fmt.Sprint(store.DefaultKeepApplies)} {
		if got := cmd.Flags().Lookup(name).DefValue; got != want {
			t.Errorf("--%s defaults to %s, want %s", name, got, want)
		}
	}
}
