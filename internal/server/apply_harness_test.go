package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/deploy"
	"github.com/hatchery/hatchery/internal/fleet"
	"github.com/hatchery/hatchery/internal/imageref/imagereftest"
	"github.com/hatchery/hatchery/internal/notify"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/provider"
	"github.com/hatchery/hatchery/internal/spec"
	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/store/sqlite"
)

// applyHarness is a server with the apply protocol, on a real SQLite file,
// whose hosts are simulated by posting status reports.
type applyHarness struct {
	*harness
	deploy    *deploy.Service
	providers *provider.Set
	t         *testing.T // shadows harness.t: decode needs a *testing.T
	dir       string
	once      sync.Once
}

type applyOptions struct {
	dir      string      // reuse a data dir (a restart); "" for a new one
	serverID string      // "" for "srv-test"
	logger   *zap.Logger // nil: the test's log
	clock    *clock      // nil: the real clock
	// maxReplicas is the deploy service's MaxReplicas (0: its default).
	maxReplicas int
	// keepApplies is the deploy service's KeepApplies (0: its default).
	keepApplies int
	// blobGrace is the fleet's BlobGrace (0: its default).
	blobGrace time.Duration
	// notify runs the webhooks with these settings (nil: none).
	notify *notify.Config
	// images resolves the plans' image tags (nil: a new fake).
	images *imagereftest.Fake
}

// imageResolver is o.images, or nil for BuildTestServer's default (a nil
// *Fake in the interface would not be nil).
func (o applyOptions) imageResolver() deploy.ImageResolver {
	if o.images == nil {
		return nil
	}
	return o.images
}

func newApplyHarness(t *testing.T, o applyOptions) *applyHarness {
	t.Helper()
	if o.dir == "" {
		o.dir = t.TempDir()
	}
	if o.serverID == "" {
		o.serverID = "srv-test"
	}
	log := o.logger
	if log == nil {
		log = zap.NewNop()
	}
	now := time.Now
	if o.clock != nil {
		now = o.clock.Now
	}
	// The store is opened here, not by BuildTestServer: stop closes it, as
	// a restart of the server does.
	st, err := sqlite.Open(t.Context(), filepath.Join(o.dir, "hatch.db"), log)
	if err != nil {
		t.Fatal(err)
	}
	tok := pki.NewToken(pki.KindAdmin, fingerprint())
	dc := deploy.DefaultConfig()
	dc.RescheduleInterval, dc.RevertRetry = 20*time.Millisecond, 20*time.Millisecond
	if o.maxReplicas != 0 {
		dc.MaxReplicas = o.maxReplicas
	}
	if o.keepApplies != 0 {
		dc.KeepApplies = o.keepApplies
	}
	fc := fleet.DefaultConfig()
	if o.blobGrace != 0 {
		fc.BlobGrace = o.blobGrace
	}
	dc.Backoff = func() backoff.BackOff {
		return backoff.NewExponentialBackOff(backoff.WithInitialInterval(10*time.Millisecond),
			backoff.WithMaxInterval(50*time.Millisecond), backoff.WithMaxElapsedTime(20*time.Second))
	}
	b := BuildTestServer(t, DefaultConfig(), TestWiring{Dir: o.dir, Store: st, AdminHash: tok.Hash(), ServerID: o.serverID,
		Logger: log, Now: now, Deploy: dc, Fleet: fc, Notify: o.notify, Images: o.imageResolver()})
	srv := b.Server
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if b.Notify != nil {
		<-b.Notify.Following() // every event from now on is notified
	}
	hs := httptest.NewServer(srv.Handler())
	h := &applyHarness{harness: &harness{t: t, srv: srv, http: hs, store: st, blobs: b.Blobs, box: b.Box, fleet: b.Fleet, token: tok.String(),
		clock: o.clock}, deploy: b.Deploy, providers: b.Providers, t: t, dir: o.dir}
	t.Cleanup(h.stop)
	return h
}

// stop shuts the server down gracefully and closes its store; once.
func (h *applyHarness) stop() {
	h.once.Do(func() {
		h.srv.Close()
		h.http.Close()
		h.store.Close()
	})
}

// report posts a host's status report: the host is up from then on.
func (h *applyHarness) report(host string, containers ...contract.ContainerStatus) {
	h.t.Helper()
	body, _ := json.Marshal(contract.StatusReport{HostID: host, Time: time.Now(), Containers: containers})
	resp := h.do("POST", "/api/v1/hosts/"+host+"/status", bytes.NewReader(body))
	if resp.StatusCode != http.StatusNoContent {
		h.t.Fatalf("report of %s: status %d", host, resp.StatusCode)
	}
}

// healthy reports every workload the host should run as healthy at its spec.
func (h *applyHarness) healthy(host string) {
	h.t.Helper()
	var cs []contract.ContainerStatus
	for _, w := range h.desired(host).Workloads {
		for slot := range w.Replicas {
			cs = append(cs, contract.ContainerStatus{WorkloadID: w.ID(), Slot: slot, State: contract.StateRunning,
				Healthy: true, SpecHash: contract.SpecHash(w), ContainerID: fmt.Sprintf("c-%s-%d", w.Egg, slot)})
		}
	}
	h.report(host, cs...)
}

// desired reads a host's desired state as its agent does.
func (h *applyHarness) desired(host string) contract.DesiredState {
	h.t.Helper()
	return decode[contract.DesiredState](h.t, h.do("GET", "/api/v1/hosts/"+host+"/desired-state", nil), http.StatusOK)
}

// planBody turns a hatch.yaml into a plan request, as the CLI would.
func planBody(t *testing.T, yaml string, secrets map[string]string) []byte {
	t.Helper()
	p, err := spec.Parse([]byte(yaml), "hatch.yaml", spec.Options{})
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	rs, deps := p.Resources()
	req := client.NewPlanRequest(rs, deps, secrets)
	req.Notify = p.Notify
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// plan posts a plan of yaml for project ("<namespace>/<project>").
func (h *applyHarness) plan(project, yaml string, secrets map[string]string) api.Plan {
	h.t.Helper()
	return decode[api.Plan](h.t, h.do("POST", "/api/v1/projects/"+project+"/plan", bytes.NewReader(planBody(h.t, yaml, secrets))), http.StatusCreated)
}

type applyStarted struct {
	Apply struct {
		ID int64 `json:"id"`
	} `json:"apply"`
	Events string `json:"events"`
}

// apply starts the apply of a plan.
func (h *applyHarness) apply(project, planID string) applyStarted {
	h.t.Helper()
	return decode[applyStarted](h.t, h.applyResp(project, planID), http.StatusAccepted)
}

func (h *applyHarness) applyResp(project, planID string) *http.Response {
	h.t.Helper()
	return h.do("POST", "/api/v1/projects/"+project+"/apply", strings.NewReader(`{"plan":"`+planID+`"}`))
}

// follow reads an apply's event stream to its end and returns its steps.
func (h *applyHarness) follow(path string) []api.Progress {
	h.t.Helper()
	resp := h.do("GET", path, nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		h.t.Fatalf("GET %s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return readSteps(h.t, resp)
}

func readSteps(t *testing.T, resp *http.Response) []api.Progress {
	t.Helper()
	var steps []api.Progress
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var p api.Progress
		if err := json.Unmarshal([]byte(data), &p); err != nil {
			t.Fatalf("step %s: %v", data, err)
		}
		steps = append(steps, p)
		if p.Status == "finished" {
			return steps
		}
	}
	t.Fatalf("the stream ended without a finished step: %+v (%v)", steps, sc.Err())
	return nil
}

// applyAndWait plans, applies and follows to the end; it returns the last step.
func (h *applyHarness) applyAndWait(project, yaml string, secrets map[string]string) api.Progress {
	h.t.Helper()
	p := h.plan(project, yaml, secrets)
	steps := h.follow(h.apply(project, p.ID).Events)
	return steps[len(steps)-1]
}

// wantSucceeded checks an apply's last step.
func wantSucceeded(t *testing.T, last api.Progress) {
	t.Helper()
	if last.Outcome != string(store.ApplySucceeded) {
		t.Fatalf("apply finished %s: %s", last.Outcome, last.Message)
	}
}

// eventsOf lists the events of a type.
// reschedulePasses waits until the reschedule loop has made n more passes
// than it had when called: it has looked at the fleet as it is now, more
// than once, and done what it chose to.
func (h *applyHarness) reschedulePasses(n int64) {
	h.t.Helper()
	from := h.deploy.LoopProgress().ReschedulePasses
	eventually(h.t, fmt.Sprintf("%d passes of the reschedule loop", n), func() bool {
		return h.deploy.LoopProgress().ReschedulePasses >= from+n
	})
}

// revertsSettled waits until the auto-revert loop has read every event
// stored now and every revert it started has ended.
func (h *applyHarness) revertsSettled() {
	h.t.Helper()
	evs, err := h.store.ListEvents(h.t.Context(), 0, 1000)
	if err != nil {
		h.t.Fatal(err)
	}
	var last int64
	if len(evs) > 0 {
		last = evs[len(evs)-1].Seq
	}
	eventually(h.t, fmt.Sprintf("the revert loop at event %d, idle", last), func() bool {
		p := h.deploy.LoopProgress()
		return p.RevertReadTo >= last && p.Reverting == 0
	})
}

func (h *applyHarness) eventsOf(typ store.EventType) []store.Event {
	h.t.Helper()
	evs, err := h.store.ListEvents(h.t.Context(), 0, 1000)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []store.Event
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}
