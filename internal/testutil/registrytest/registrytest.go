// Package registrytest runs a real image registry for tests: Debian's
// docker-registry (the CNCF distribution registry v2) on a loopback port,
// with htpasswd (bcrypt) auth and its own storage directory, stopped when
// the test ends. The local Engine treats 127.0.0.0/8 registries as insecure,
// so it pushes and pulls there over plain HTTP. Without the binary a test
// is skipped, except under CI=true, where it fails: .ci/run installs it.
package registrytest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/jsonmessage"
	"golang.org/x/crypto/bcrypt"

	"github.com/hatchery/hatchery/internal/testutil/listentest"
)

// Binary is where Debian's docker-registry package installs the registry.
const Binary = "docker-registry"

// Registry is a running registry.
type Registry struct {
	// Host is its host:port, as image references name it ("127.0.0.1:NNNN").
	Host string
	// Username and Password are its one login, made anew for each registry.
	Username, Password string
	log                *lockedBuffer
}

// Start runs a registry until the test ends.
func Start(t testing.TB) *Registry {
	t.Helper()
	bin, err := exec.LookPath(Binary)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("docker-registry is not installed (apt-get install docker-registry; .ci/run does): %v", err)
		}
		t.Skipf("docker-registry is not installed (apt-get install docker-registry): %v", err)
	}
	dir := t.TempDir()
	r := &Registry{Username: "hatchtest", Password: "pw-" + randomHex(t, 12), log: &lockedBuffer{}}
	hash, err := bcrypt.GenerateFromPassword([]byte(r.Password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	htpasswd := filepath.Join(dir, "htpasswd")
	if err := os.WriteFile(htpasswd, []byte(r.Username+":"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.Host = listentest.FreeAddr(t)
	cfg := fmt.Sprintf(`version: 0.1
log: {level: info, formatter: text}
storage:
  filesystem: {rootdirectory: %q}
  delete: {enabled: true}
http:
  addr: %q
  secret: %q
auth:
  htpasswd: {realm: hatchtest, path: %q}
`, filepath.Join(dir, "storage"), r.Host, randomHex(t, 16), htpasswd)
	cfgFile := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", cfgFile)
	cmd.Stdout, cmd.Stderr = r.log, r.log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start docker-registry: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("docker-registry did not stop")
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		// Without a login /v2/ answers 401: the registry is up, auth on.
		resp, err := http.Get("http://" + r.Host + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("docker-registry did not answer at %s: %v\n%s", r.Host, err, r.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return r
}

// Log is what the registry printed.
func (r *Registry) Log() string { return r.log.String() }

// Auth is the registry's login as the Engine's API takes it (X-Registry-Auth).
func (r *Registry) Auth(t testing.TB) string {
	t.Helper()
	auth, err := registry.EncodeAuthConfig(registry.AuthConfig{Username: r.Username, Password: r.Password, ServerAddress: r.Host})
	if err != nil {
		t.Fatal(err)
	}
	return auth
}

// Push pushes the local image local to the registry as repo:tag through
// the Engine, with the registry's login, and returns the reference
// (r.Host/repo:tag). The Engine keeps no tag of it, so that a pull of the
// reference has to reach the registry; the local image itself stays.
func (r *Registry) Push(t testing.TB, cli client.APIClient, local, repoTag string) string {
	t.Helper()
	ref, _ := r.PushDigest(t, cli, local, repoTag)
	return ref
}

// PushDigest is Push, and it returns the digest of the manifest pushed
// too, as the registry serves it ("sha256:..."): the Engine forgets it
// with the tag.
func (r *Registry) PushDigest(t testing.TB, cli client.APIClient, local, repoTag string) (ref, digest string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	ref = r.Host + "/" + repoTag
	if err := cli.ImageTag(ctx, local, ref); err != nil {
		t.Fatalf("tag %s as %s: %v", local, ref, err)
	}
	defer func() {
		if _, err := cli.ImageRemove(context.WithoutCancel(ctx), ref, image.RemoveOptions{}); err != nil {
			t.Errorf("untag %s: %v", ref, err)
		}
	}()
	rc, err := cli.ImagePush(ctx, ref, image.PushOptions{RegistryAuth: r.Auth(t)})
	if err != nil {
		t.Fatalf("push %s: %v\n%s", ref, err, r.Log())
	}
	defer rc.Close()
	var out bytes.Buffer
	aux := func(m jsonmessage.JSONMessage) {
		var pushed struct{ Digest string }
		if m.Aux != nil && json.Unmarshal(*m.Aux, &pushed) == nil && pushed.Digest != "" {
			digest = pushed.Digest
		}
	}
	if err := jsonmessage.DisplayJSONMessagesStream(rc, &out, 0, false, aux); err != nil {
		t.Fatalf("push %s: %v\n%s\n%s", ref, err, out.String(), r.Log())
	}
	if digest == "" {
		t.Fatalf("push %s: the Engine told no digest:\n%s", ref, out.String())
	}
	return ref, digest
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// lockedBuffer collects the registry's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

var _ io.Writer = (*lockedBuffer)(nil)

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }
