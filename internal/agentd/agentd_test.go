package agentd

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/agent"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/testutil/listentest"
)

// Run starts every part of the agent and, when its context ends,
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
	opts := Config{
		DataDir: dir, IngressAddr: listentest.FreeAddr(t), AdminAddr: listentest.FreeAddr(t), PublishAddr: "127.0.0.1", MeshAddr: listentest.FreeAddr(t),
		SecretDir: t.TempDir(), Logger: zaptest.NewLogger(t),
		InProcessDataPlane: true, // a test binary has no `hatch dataplane` to start
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, opts) }()

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
			t.Fatalf("Run ended before its context did: %v", err)
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
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return after its context ended")
	}
	for _, addr := range []string{opts.IngressAddr, opts.AdminAddr, opts.MeshAddr} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("%s is still held after Run returned: %v", addr, err)
			continue
		}
		ln.Close()
	}
	if _, err := os.Stat(filepath.Join(dir, "agent-state.json")); err != nil {
		t.Errorf("the agent did not save its memory when it closed: %v", err)
	}
	for name, want := range map[string]os.FileMode{".": 0o700, "identity.json": 0o600, "ca.pem": 0o600, "agent-state.json": 0o600} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s in the data dir: %v, %v; want mode %04o", name, fi, err, want)
		}
	}
}

func TestRunAgentNeedsADataDir(t *testing.T) {
	err := Run(t.Context(), Config{Logger: zaptest.NewLogger(t)})
	if err == nil || !strings.Contains(err.Error(), "--data-dir") {
		t.Fatalf("Run without a data dir: %v", err)
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
	opts := Config{DataDir: dir, Server: "https://127.0.0.1:1", JoinToken: pki.NewToken(pki.KindJoin, strings.Repeat("ab", 32)).String(),
		Logger: zaptest.NewLogger(t)}
	err := Run(t.Context(), opts)
	if err == nil || !strings.Contains(err.Error(), "--data-dir") || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "chmod 700") {
		t.Fatalf("Run in someone else's open directory: %v; want a refusal naming it and the fix", err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("the directory's mode was changed: %v %v", fi.Mode(), err)
	}
}

func TestAdvertiseForTheDataPlanesMeshAddress(t *testing.T) {
	if adv, err := advertiseFor("127.0.0.1:7702", nil); err != nil || !slices.Equal(adv, []string{"127.0.0.1:7702"}) {
		t.Errorf("a specific listening IP: advertised %v, %v; want it", adv, err)
	}
	if adv, err := advertiseFor("127.0.0.1:7702", []string{"10.0.0.1:7702"}); err != nil || !slices.Equal(adv, []string{"10.0.0.1:7702"}) {
		t.Errorf("--advertise given: advertised %v, %v", adv, err)
	}
	adv, err := advertiseFor("0.0.0.0:7702", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range adv {
		host, p, _ := net.SplitHostPort(a)
		if p != "7702" || net.ParseIP(host).IsLoopback() {
			t.Errorf("all interfaces: advertised %q, want a non-loopback address with port 7702", a)
		}
	}
	if _, err := advertiseFor("", nil); err == nil {
		t.Error("no mesh address was accepted")
	}
}

func TestRelayImageOfRefusesABinaryReplacedSinceTheStart(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "hatch")
	if err := os.WriteFile(bin, []byte("binary v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	ref, build, err := relayImageOf(func() (string, error) { return bin, nil })
	if err != nil {
		t.Fatal(err)
	}
	if ctx, err := build(); err != nil || ctx == nil {
		t.Fatalf("the context of an unchanged binary: %v", err)
	}
	if err := os.WriteFile(bin, []byte("binary v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := build(); err == nil {
		t.Fatalf("the context of a replaced binary was made for %s", ref)
	}
}

// A restarted agent may be given any URL of its control plane (one the
// live list named since the join too); a URL of none is refused.
func TestAnAgentRestartedWithAnotherServerOfItsControlPlane(t *testing.T) {
	dir := t.TempDir()
	fp := strings.Repeat("ab", 32)
	id := agent.Identity{Server: "https://a:7700", Servers: []string{"https://a:7700", "https://b:7700"}, HostID: "h1",
		Token: pki.NewToken(pki.KindHost, fp).String(), CAFingerprint: fp}
	if err := agent.SaveIdentity(dir, id, nil); err != nil {
		t.Fatal(err)
	}
	log := zaptest.NewLogger(t)
	for _, server := range []string{"", "https://b:7700", "https://c:7700,https://a:7700"} {
		got, err := ensureIdentity(t.Context(), Config{DataDir: dir, Server: server}, log)
		if err != nil || got.HostID != "h1" {
			t.Errorf("--server %q: %v, %v; want the kept identity", server, got.HostID, err)
		}
	}
	if _, err := ensureIdentity(t.Context(), Config{DataDir: dir, Server: "https://c:7700"}, log); err == nil ||
		!strings.Contains(err.Error(), "belongs to server") {
		t.Fatalf("--server of another control plane: %v, want a refusal", err)
	}
}
