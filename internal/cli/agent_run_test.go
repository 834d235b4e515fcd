package cli

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/agent"
	"github.com/hatchery/hatchery/internal/pki"
)

// runAgent starts every part of the agent and, when its context ends,
// closes them all: the ingress's ports are free again and the agent has
// saved its memory. No Docker Engine is needed for that: the Docker calls
// fail, and the agent keeps going.
func TestRunAgentClosesWhatItStartedWhenItsContextEnds(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-docker.sock"))
	dir := t.TempDir()
	fp := strings.Repeat("ab", 32)
	id := agent.Identity{Server: "http://127.0.0.1:1", HostID: "h-wire", Token: pki.NewToken(pki.KindHost, fp).String(), CAFingerprint: fp}
	if err := agent.SaveIdentity(dir, id, []byte("-----BEGIN CERTIFICATE-----\n")); err != nil {
		t.Fatal(err)
	}
	// As an older version left it: open to all. It holds the agent's
	// identity, so it is tightened.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := agentOptions{
		DataDir: dir, IngressAddr: freeAddr(t), AdminAddr: freeAddr(t), PublishAddr: "127.0.0.1", MeshAddr: freeAddr(t),
		SecretDir: t.TempDir(),
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- runAgent(ctx, opts, zaptest.NewLogger(t)) }()

	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + opts.AdminAddr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-done:
			t.Fatalf("runAgent ended before its context did: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ingress's /healthz did not answer within 10s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("runAgent: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("runAgent did not return after its context ended")
	}
	for _, addr := range []string{opts.IngressAddr, opts.AdminAddr, opts.MeshAddr} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("%s is still held after runAgent returned: %v", addr, err)
			continue
		}
		ln.Close()
	}
	if _, err := os.Stat(filepath.Join(dir, "agent-state.json")); err != nil {
		t.Errorf("the agent did not save its memory when it closed: %v", err)
	}
	checkPrivate(t, dir, "identity.json", "ca.pem", "agent-state.json")
}

func TestRunAgentNeedsADataDir(t *testing.T) {
	err := runAgent(t.Context(), agentOptions{}, zaptest.NewLogger(t))
	if err == nil || !strings.Contains(err.Error(), "--data-dir") {
		t.Fatalf("runAgent without a data dir: %v", err)
	}
}

func TestRunAgentRefusesAnOpenDataDirThatIsNotItsOwn(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := agentOptions{DataDir: dir, Server: "https://127.0.0.1:1", JoinToken: pki.NewToken(pki.KindJoin, strings.Repeat("ab", 32)).String()}
	err := runAgent(t.Context(), opts, zaptest.NewLogger(t))
	if err == nil || !strings.Contains(err.Error(), "--data-dir") || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "chmod 700") {
		t.Fatalf("runAgent in someone else's open directory: %v; want a refusal naming it and the fix", err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("the directory's mode was changed: %v %v", fi.Mode(), err)
	}
}

// freeAddr returns a loopback address with a port nothing listens on.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
