package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/notify"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/store"
)

var notifySecret = []byte("notify-secret-of-the-test-server")

// hookReceiver is a webhook on loopback that checks each delivery's
// signature with its key, and keeps the events of those that verify; one
// that does not fails the test.
type hookReceiver struct {
	*httptest.Server
	t      *testing.T
	key    []byte
	mu     sync.Mutex // guards events
	events []api.Event
}

func newHookReceiver(t *testing.T, key []byte) *hookReceiver {
	r := &hookReceiver{t: t, key: key}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if err := notify.Verify(r.key, req.Header.Get(notify.HeaderTimestamp), req.Header.Get(notify.HeaderSignature), body,
			time.Now(), time.Minute); err != nil {
			t.Errorf("a delivery to %s does not verify: %v", req.URL.Path, err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var e api.Event
		if err := json.Unmarshal(body, &e); err != nil {
			t.Errorf("a delivery's body %s: %v", body, err)
		}
		r.mu.Lock()
		r.events = append(r.events, e)
		r.mu.Unlock()
	}))
	t.Cleanup(r.Close)
	return r
}

// types are the types of the events received, in order.
func (r *hookReceiver) types() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		out = append(out, e.Type)
	}
	return out
}

func (r *hookReceiver) has(typ string) bool {
	for _, t := range r.types() {
		if t == typ {
			return true
		}
	}
	return false
}

func notifyConfig(targets ...inputs.NotifyTarget) *notify.Config {
	cfg := notify.DefaultConfig()
	cfg.Targets, cfg.Secret = targets, notifySecret
	cfg.Tries, cfg.FirstRetry, cfg.MaxRetry = 2, 10*time.Millisecond, 20*time.Millisecond
	return &cfg
}

// The project's file names its own webhook; the server has one for the
// cluster. An apply, then a failed rollout reverted, reach both, each
// signed with its own key.
func TestAnApplyAndAFailedRolloutAreNotifiedToTheServersAndTheProjectsWebhooks(t *testing.T) {
	cluster := newHookReceiver(t, notifySecret)
	project := newHookReceiver(t, notify.ProjectKey(notifySecret, "default/shop"))
	h := newApplyHarness(t, applyOptions{notify: notifyConfig(inputs.NotifyTarget{URL: cluster.URL + "/all"})})
	yaml := revertYAML + "notify: [\"" + project.URL + "/shop?token=abc\"]\n"
	h.report("h1")
	wantSucceeded(t, h.applyAndWait("default/shop", yaml, nil))
	eventually(t, "apply.finished at both webhooks", func() bool {
		return cluster.has("apply.finished") && project.has("apply.finished")
	})

	h.healthy("h1")
	v2 := strings.ReplaceAll(yaml, "web:1", "web:2")
	wantSucceeded(t, h.applyAndWait("default/shop", v2, nil))
	w2, _ := h.desired("h1").Workload("default/shop/web")
	h.report("h1", contract.ContainerStatus{WorkloadID: w2.ID(), Slot: 0, State: contract.StateRunning,
		SpecHash: contract.SpecHash(w2), RolloutFailure: "not healthy within its progress deadline"})
	eventually(t, "rollout.failed and rollout.reverted at both webhooks", func() bool {
		for _, r := range []*hookReceiver{cluster, project} {
			if !r.has("rollout.failed") || !r.has("rollout.reverted") {
				return false
			}
		}
		return true
	})
	project.mu.Lock()
	defer project.mu.Unlock()
	for _, e := range project.events {
		if e.Project != "default/shop" {
			t.Errorf("the project's webhook got %+v, of another scope", e)
		}
		if e.Type == "rollout.failed" && (e.Resource != "egg/web" || e.Host != "h1" || !strings.Contains(e.Message, "progress deadline")) {
			t.Errorf("rollout.failed delivered as %+v", e)
		}
	}
	// Only the notified kinds: never a resource.created or an apply.started.
	for _, typ := range cluster.types() {
		if !notify.Notified(store.EventType(typ)) {
			t.Errorf("the cluster's webhook got a %s", typ)
		}
	}
	if n := len(h.eventsOf(notify.EventFailed)); n != 0 {
		t.Fatalf("%d notify.failed events, want none", n)
	}
}

// A receiver that never answers holds no apply back: the apply's call and
// its stream end while the receiver still holds the delivery of the
// previous apply.
func TestAHangingReceiverDoesNotDelayAnApply(t *testing.T) {
	release := make(chan struct{})
	held := make(chan struct{}, 16)
	var returned atomic.Int32 // deliveries the receiver has answered
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer returned.Add(1)
		held <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hanging.Close)
	t.Cleanup(func() { close(release) }) // runs first: the handlers return
	h := newApplyHarness(t, applyOptions{notify: notifyConfig(inputs.NotifyTarget{URL: hanging.URL})})
	h.report("h1")
	wantSucceeded(t, h.applyAndWait("default/shop", revertYAML, nil))
	select {
	case <-held: // the first apply's apply.finished, held from now on
	case <-time.After(10 * time.Second):
		t.Fatal("the receiver never got the first apply's notification")
	}
	h.healthy("h1")
	start := time.Now()
	wantSucceeded(t, h.applyAndWait("default/shop", strings.ReplaceAll(revertYAML, "web:1", "web:2"), nil))
	took := time.Since(start)
	if n := returned.Load(); n != 0 {
		t.Fatalf("the receiver answered %d deliveries during the apply; it should still hold the first", n)
	}
	// The same plan, apply and stream take a few milliseconds here; a
	// delivery in their path would take the client's 10 s timeout.
	if took > 2*time.Second {
		t.Fatalf("the apply took %v while a receiver hung", took)
	}
}

// A receiver that keeps failing becomes a notify.failed event of the
// project whose webhook it is, naming its host and never its path or query.
func TestAFailingProjectWebhookBecomesAnEventOfItsProject(t *testing.T) {
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
	}))
	t.Cleanup(failing.Close)
	h := newApplyHarness(t, applyOptions{notify: notifyConfig()})
	h.report("h1")
	wantSucceeded(t, h.applyAndWait("default/shop", revertYAML+"notify: [\""+failing.URL+"/p/s3cret?token=s3cret\"]\n", nil))
	eventually(t, "a notify.failed event", func() bool { return len(h.eventsOf(notify.EventFailed)) == 1 })
	e := h.eventsOf(notify.EventFailed)[0]
	if e.Project != "default/shop" || !strings.Contains(e.Message, strings.TrimPrefix(failing.URL, "http://")) ||
		!strings.Contains(e.Message, "apply.finished") || strings.Contains(e.Message, "s3cret") {
		t.Fatalf("notify.failed %+v", e)
	}
	// The project's events, as its deploy tokens read them, hold it.
	list := decode[api.EventList](t, h.do("GET", "/api/v1/events?project=default/shop", nil), http.StatusOK)
	found := false
	for _, ev := range list.Events {
		found = found || ev.Type == string(notify.EventFailed)
	}
	if !found {
		t.Fatalf("the project's events %+v lack notify.failed", list.Events)
	}
}

// A plan that only changes the project's webhooks has a change to apply.
func TestAPlanChangingOnlyTheWebhooksHasChanges(t *testing.T) {
	h := newApplyHarness(t, applyOptions{})
	h.report("h1")
	wantSucceeded(t, h.applyAndWait("default/shop", revertYAML, nil))
	if p := h.plan("default/shop", revertYAML, nil); p.HasChanges {
		t.Fatalf("the same file again: %+v, want no changes", p)
	}
	p := h.plan("default/shop", revertYAML+"notify: [\"https://hooks.example.com/x\"]\n", nil)
	if !p.HasChanges || len(p.Notes) != 1 || !strings.Contains(p.Notes[0], "notify") {
		t.Fatalf("a plan adding a webhook: changes %v, notes %v; want a change, noted", p.HasChanges, p.Notes)
	}
	resp := h.do("POST", "/api/v1/projects/default/shop/plan",
		strings.NewReader(`{"resources":[],"dependencies":[],"secrets":{},"notify":[{"url":"http://hooks.example.com/x?token=s3cret"}]}`))
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "notify[0]") || strings.Contains(string(body), "s3cret") {
		t.Fatalf("a plan with an http webhook off loopback: %d %s", resp.StatusCode, body)
	}
}
