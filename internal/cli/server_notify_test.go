package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/notify"
)

// signedHook is a loopback webhook that keeps the deliveries that verify
// with key, by the type of their event.
type signedHook struct {
	*httptest.Server
	mu     sync.Mutex // guards key and bodies
	key    []byte
	bodies map[string][]byte
	bad    int
}

func newSignedHook(t *testing.T) *signedHook {
	h := &signedHook{bodies: map[string][]byte{}}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		defer h.mu.Unlock()
		if notify.Verify(h.key, r.Header.Get(notify.HeaderTimestamp), r.Header.Get(notify.HeaderSignature), body, time.Now(), time.Minute) != nil {
			h.bad++
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		h.bodies[r.Header.Get(notify.HeaderEvent)] = body
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *signedHook) setKey(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.key = []byte(strings.TrimSpace(key))
}

func (h *signedHook) body(typ string) ([]byte, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.bodies[typ], h.bad
}

// hatch server --notify and --notify-slack, and a project's notify:, through
// the real CLI: an apply reaches the three, each signed with the key
// hatch server notify-key prints for it; no URL's query reaches the logs.
func TestHatchServerNotifiesAnApplyToItsWebhooksAndTheProjects(t *testing.T) {
	isolate(t)
	cluster, slack, project := newSignedHook(t), newSignedHook(t), newSignedHook(t)
	data := t.TempDir()
	srv := startServer(t, "--data-dir", data, "--notify", cluster.URL+"/all?token=s3cret", "--notify-slack", slack.URL+"/services/s3cret")
	for hook, args := range map[*signedHook][]string{cluster: nil, slack: nil, project: {"--project", "default/shop"}} {
		code, key, errOut := run(t, append([]string{"server", "notify-key", "--data-dir", data}, args...)...)
		if code != 0 {
			t.Fatalf("hatch server notify-key %v = %d %s", args, code, errOut)
		}
		hook.setKey(key)
	}
	joinFakeHost(t, srv.url)
	file := filepath.Join(t.TempDir(), "hatch.yaml")
	yaml := "project: shop\neggs:\n  web:\n    image: registry.local/web:1\n    pull: missing\n    port: 8080\nnotify: [\"" + project.URL + "/shop?token=s3cret\"]\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := run(t, "apply", "-f", file, "--yes"); code != 0 {
		t.Fatalf("hatch apply = %d\n%s\n%s", code, out, errOut)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, _ := cluster.body("apply.finished")
		s, _ := slack.body("apply.finished")
		p, _ := project.body("apply.finished")
		if c != nil && s != nil && p != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("apply.finished not delivered to all three (cluster %s, slack %s, project %s):\n%s", c, s, p, srv.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for name, hook := range map[string]*signedHook{"cluster": cluster, "slack": slack, "project": project} {
		if _, bad := hook.body(""); bad != 0 {
			t.Errorf("the %s webhook got %d deliveries that do not verify with its key", name, bad)
		}
	}
	var e struct{ Type, Project, Message string }
	c, _ := cluster.body("apply.finished")
	if err := json.Unmarshal(c, &e); err != nil || e.Type != "apply.finished" || e.Project != "default/shop" || !strings.Contains(e.Message, "succeeded") {
		t.Fatalf("the cluster's delivery %s (%v)", c, err)
	}
	var text struct{ Text string }
	s, _ := slack.body("apply.finished")
	if err := json.Unmarshal(s, &text); err != nil || !strings.HasPrefix(text.Text, "*apply.finished* default/shop") {
		t.Fatalf("the slack delivery %s (%v)", s, err)
	}
	if strings.Contains(srv.stderr.String(), "s3cret") {
		t.Fatalf("the server's log holds a webhook's path or query:\n%s", srv.stderr)
	}
}
