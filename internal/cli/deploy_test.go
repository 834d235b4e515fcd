package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/client"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/pki"
	"github.com/hatchery/hatchery/internal/spec"
)

// fakeAPI plays the control plane's project endpoints over HTTP, recording
// what the CLI sends. Each read of the project's status moves it one step
// along the statuses the test gives; each read of the host list moves the
// hosts one step along theirs. A read of a host's desired state fails the
// test: it carries secret values, which the CLI must never receive.
type fakeAPI struct {
	mu        sync.Mutex // guards every field below
	blobs     map[string]bool
	puts      int
	plans     []api.PlanRequest
	answer    api.Plan
	applied   []string
	steps     []api.Progress
	outcome   string
	statuses  []api.ProjectStatus // successive answers; the last one stays
	polls     int
	hosts     [][]hostState // successive answers; the last one stays
	hostPolls int
	restarted []string
	// cutApply cuts the apply request's connection without an answer, as
	// a server killed during it does; outage cuts the status polls after
	// the first, that many times.
	cutApply bool
	outage   int
}

// cut drops the request's connection without answering it.
func cut(t *testing.T, w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Error(err)
		return
	}
	conn.Close()
}

func newFakeAPI(t *testing.T) (*fakeAPI, *client.Client) {
	t.Helper()
	f := &fakeAPI{blobs: map[string]bool{}, outcome: "succeeded",
		answer: api.Plan{ID: "plan-1", HasChanges: true, Changes: []api.Change{{Action: "+", Key: "egg/web"}}}}
	mux := http.NewServeMux()
	mux.HandleFunc("HEAD /api/v1/blobs/{digest}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if !f.blobs[r.PathValue("digest")] {
			w.WriteHeader(http.StatusNotFound)
		}
	})
	mux.HandleFunc("PUT /api/v1/blobs/{digest}", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		f.mu.Lock()
		defer f.mu.Unlock()
		f.blobs[r.PathValue("digest")] = true
		f.puts++
		w.WriteHeader(http.StatusCreated)
	})
	mux.HandleFunc("POST /api/v1/projects/{ns}/{p}/plan", func(w http.ResponseWriter, r *http.Request) {
		var req api.PlanRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.plans = append(f.plans, req)
		writeTestJSON(w, http.StatusCreated, f.answer)
	})
	mux.HandleFunc("POST /api/v1/projects/{ns}/{p}/destroy", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		writeTestJSON(w, http.StatusCreated, f.answer)
	})
	mux.HandleFunc("POST /api/v1/projects/{ns}/{p}/apply", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Plan string }
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		defer f.mu.Unlock()
		f.applied = append(f.applied, req.Plan)
		if f.cutApply {
			cut(t, w)
			return
		}
		writeTestJSON(w, http.StatusAccepted, map[string]any{"apply": map[string]any{"id": 7}})
	})
	mux.HandleFunc("GET /api/v1/projects/{ns}/{p}/applies/7/events", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		steps, outcome := f.steps, f.outcome
		f.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		for i, s := range steps {
			s.Seq = int64(i + 1)
			data, _ := json.Marshal(s)
			fmt.Fprintf(w, "id: %d\nevent: progress\ndata: %s\n\n", s.Seq, data)
		}
		data, _ := json.Marshal(api.Progress{Seq: int64(len(steps) + 1), Status: "finished", Outcome: outcome, Message: "apply " + outcome})
		fmt.Fprintf(w, ": keep-alive\n\nid: %d\nevent: done\ndata: %s\n\n", len(steps)+1, data)
	})
	mux.HandleFunc("POST /api/v1/projects/{ns}/{p}/eggs/{egg}/restart", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.restarted = append(f.restarted, r.PathValue("egg"))
		writeTestJSON(w, http.StatusOK, map[string]any{"egg": r.PathValue("egg"), "revision": 2})
	})
	mux.HandleFunc("GET /api/v1/projects", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		var projects []api.ProjectSummary
		if len(f.statuses) > 0 {
			projects = append(projects, api.ProjectSummary{Namespace: f.statuses[0].Namespace, Name: f.statuses[0].Project})
		}
		writeTestJSON(w, http.StatusOK, map[string]any{"projects": projects})
	})
	mux.HandleFunc("GET /api/v1/projects/{ns}/{p}/status", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.statuses) == 0 || f.statuses[0].Namespace != r.PathValue("ns") || f.statuses[0].Project != r.PathValue("p") {
			writeTestJSON(w, http.StatusNotFound, map[string]string{"error": "not_found", "message": "no project"})
			return
		}
		if f.polls > 0 && f.outage > 0 {
			f.outage--
			cut(t, w)
			return
		}
		f.polls++
		writeTestJSON(w, http.StatusOK, f.statuses[min(f.polls, len(f.statuses))-1])
	})
	mux.HandleFunc("GET /api/v1/hosts", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.hostPolls++
		var hosts []api.Host
		for _, h := range f.currentHosts() {
			hosts = append(hosts, api.Host{ID: h.ID, Name: h.Name, State: h.State})
		}
		writeTestJSON(w, http.StatusOK, map[string]any{"hosts": hosts})
	})
	mux.HandleFunc("GET /api/v1/hosts/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, h := range f.currentHosts() {
			if h.ID == r.PathValue("id") {
				writeTestJSON(w, http.StatusOK, map[string]any{"id": h.ID, "status": h.Report})
				return
			}
		}
		http.NotFound(w, r)
	})
	mux.HandleFunc("GET /api/v1/hosts/{id}/desired-state", func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the CLI read the desired state of %s: it carries secret values for the agents only", r.PathValue("id"))
		http.NotFound(w, r)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	tok := pki.NewToken(pki.KindAdmin, strings.Repeat("ab", 32)).String()
	c, err := client.New(client.Config{Server: srv.URL, Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return f, c
}

// currentHosts are the hosts as of the last read of the list; mu must be
// held.
func (f *fakeAPI) currentHosts() []hostState {
	if len(f.hosts) == 0 {
		return nil
	}
	return f.hosts[min(f.hostPolls, len(f.hosts))-1]
}

func writeTestJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// testProject writes a project with a built egg and a secret read from a
// file, and loads it.
func testProject(t *testing.T) *spec.Project {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"hatch.yaml": "project: demo\neggs:\n  web:\n    build: ./web\n    secrets: [key]\n  worker:\n    build: ./web\n" +
			"secrets:\n  key: {file: ./key.txt}\n",
		"web/Dockerfile": "FROM scratch\n",
		"web/app":        "binary",
		"key.txt":        "s3cret-value",
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p, err := spec.Load(filepath.Join(dir, "hatch.yaml"), spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func testDeployer(c *client.Client, out io.Writer) *deployer {
	return &deployer{c: c, out: out, in: strings.NewReader(""), poll: time.Millisecond, noHostGrace: 50 * time.Millisecond}
}

// readyStatuses returns the statuses of default/demo going from nothing
// ready to every egg ready, on host local, beside a host that runs nothing.
func readyStatuses(eggs ...string) []api.ProjectStatus {
	var rolling, ready []api.EggStatus
	for _, e := range eggs {
		rolling = append(rolling, eggAt(e, 0, 1, "progressing", "local"))
		ready = append(ready, eggAt(e, 1, 1, "done", "local"))
	}
	return []api.ProjectStatus{demoStatus(2, rolling...), demoStatus(2, ready...)}
}

func TestDeployUploadsPlansAppliesAndFollowsTheRollout(t *testing.T) {
	f, c := newFakeAPI(t)
	f.steps = []api.Progress{{Resource: "egg/web", Action: "create", Status: "started"}, {Resource: "egg/web", Action: "create", Status: "done"},
		{Resource: "egg/worker", Action: "wait healthy", Status: "waiting", Message: "0/1 replicas healthy"}}
	f.statuses = readyStatuses("web", "worker")
	var out bytes.Buffer
	err := testDeployer(c, &out).deploy(context.Background(), testProject(t), deployOptions{namespace: "default", yes: true})
	if err != nil {
		t.Fatalf("deploy = %v\n%s", err, out.String())
	}
	if f.puts != 1 {
		t.Errorf("%d uploads, want 1: both eggs share one build context", f.puts)
	}
	if len(f.plans) != 1 || len(f.applied) != 1 || f.applied[0] != "plan-1" {
		t.Fatalf("plans %d, applied %v", len(f.plans), f.applied)
	}
	req := f.plans[0]
	if req.Secrets["key"] != "s3cret-value" {
		t.Errorf("secrets sent = %v, want the file's value", req.Secrets)
	}
	for _, r := range req.Resources {
		if r.Type == "egg" && !strings.HasPrefix(r.Source, "sha256:") {
			t.Errorf("egg %s has source %q, want the uploaded context's digest", r.Name, r.Source)
		}
	}
	for _, s := range []string{"+ egg/web created", "… egg/worker: 0/1 replicas healthy", "web: 1/1 healthy at the new spec, done", "default/demo is ready: web 1/1, worker 1/1."} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, out.String())
		}
	}
	if strings.Contains(out.String(), "s3cret-value") {
		t.Error("the secret's value was printed")
	}
}

func TestDeployUploadsNothingTheServerHas(t *testing.T) {
	f, c := newFakeAPI(t)
	f.statuses = readyStatuses("web", "worker")
	p := testProject(t)
	d := testDeployer(c, io.Discard)
	if err := d.deploy(context.Background(), p, deployOptions{namespace: "default", yes: true}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	d.out = &out
	if err := d.deploy(context.Background(), p, deployOptions{namespace: "default", yes: true, noWait: true}); err != nil {
		t.Fatal(err)
	}
	if f.puts != 1 || !strings.Contains(out.String(), "unchanged, already on the server") {
		t.Fatalf("%d uploads over two deploys of one context, output:\n%s", f.puts, out.String())
	}
}

func TestDeployWithNobodyToAskAppliesNothingWithoutYes(t *testing.T) {
	f, c := newFakeAPI(t)
	err := testDeployer(c, io.Discard).deploy(context.Background(), testProject(t), deployOptions{namespace: "default"})
	if err == nil || !strings.Contains(err.Error(), "--yes") {
		t.Fatalf("deploy = %v, want an error saying to use --yes", err)
	}
	if len(f.applied) != 0 {
		t.Fatal("a plan was applied without confirmation")
	}
}

func TestDeployOnATerminalAppliesOnlyOnYes(t *testing.T) {
	for answer, wantApplied := range map[string]bool{"n\n": false, "yes\n": true} {
		t.Run(strings.TrimSpace(answer), func(t *testing.T) {
			f, c := newFakeAPI(t)
			f.statuses = readyStatuses("web", "worker")
			d := testDeployer(c, io.Discard)
			d.interactive, d.in = true, strings.NewReader(answer)
			err := d.deploy(context.Background(), testProject(t), deployOptions{namespace: "default"})
			if applied := len(f.applied) == 1; applied != wantApplied {
				t.Fatalf("answer %q: applied %v (err %v)", answer, applied, err)
			}
			if !wantApplied && !errors.Is(err, errNotConfirmed) {
				t.Fatalf("deploy = %v, want errNotConfirmed", err)
			}
		})
	}
}

func TestDeployExplainsAFailedRollout(t *testing.T) {
	f, c := newFakeAPI(t)
	bad := eggAt("web", 0, 1, "failed", "local")
	bad.Rollout.Reason, bad.Rollout.LogTail = "on local: not healthy within the progress deadline (1m0s)", []string{"listening on :9999", "still no traffic"}
	f.statuses = []api.ProjectStatus{demoStatus(1, bad, eggAt("worker", 1, 1, "done", "local"))}
	var out bytes.Buffer
	err := testDeployer(c, &out).deploy(context.Background(), testProject(t), deployOptions{namespace: "default", yes: true})
	if !errors.Is(err, errApplyFailed) {
		t.Fatalf("deploy = %v, want errApplyFailed", err)
	}
	for _, s := range []string{"The rollout of web failed on local: not healthy within the progress deadline (1m0s)", "  | listening on :9999\n  | still no traffic\n", "hatch rollout restart demo/web"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, out.String())
		}
	}
}

func TestDeployReportsAFailedApplyAndFollowsNoRollout(t *testing.T) {
	f, c := newFakeAPI(t)
	f.outcome = "failed"
	held := api.Progress{Resource: "egg/web", Action: "create", Status: "failed", Message: "route demo.localhost is held by shop/web on local"}
	f.steps = []api.Progress{held, held, held} // retried by the server
	var out bytes.Buffer
	err := testDeployer(c, &out).deploy(context.Background(), testProject(t), deployOptions{namespace: "default", yes: true})
	if !errors.Is(err, errApplyFailed) || f.polls != 0 {
		t.Fatalf("deploy = %v after %d status polls, want errApplyFailed and none", err, f.polls)
	}
	if strings.Count(out.String(), "✗ egg/web: create failed: route demo.localhost is held") != 1 || !strings.Contains(out.String(), "Apply failed: apply failed") {
		t.Fatalf("output:\n%s", out.String())
	}
}

func TestDeployWithoutChangesAppliesNothingAndStillFollows(t *testing.T) {
	f, c := newFakeAPI(t)
	f.answer = api.Plan{ID: "plan-2", Changes: []api.Change{{Action: "=", Key: "egg/web"}}}
	f.statuses = readyStatuses("web", "worker")
	var out bytes.Buffer
	if err := testDeployer(c, &out).deploy(context.Background(), testProject(t), deployOptions{namespace: "default"}); err != nil {
		t.Fatal(err)
	}
	if len(f.applied) != 0 || !strings.Contains(out.String(), "No changes") || !strings.Contains(out.String(), "is ready") {
		t.Fatalf("applied %v, output:\n%s", f.applied, out.String())
	}
}

func TestSecretsComeFromTheirFileOrVariable(t *testing.T) {
	p := testProject(t)
	p.Secrets = append(p.Secrets, &spec.Secret{Name: "token", Env: "HATCH_TEST_TOKEN"})
	t.Setenv("HATCH_TEST_TOKEN", "from-env")
	values, err := readSecrets(p)
	if err != nil || values["key"] != "s3cret-value" || values["token"] != "from-env" {
		t.Fatalf("readSecrets = %v, %v", values, err)
	}
	p.Secrets[1].Env = "HATCH_TEST_UNSET"
	if _, err := readSecrets(p); err == nil || !strings.Contains(err.Error(), "$HATCH_TEST_UNSET is not set") {
		t.Fatalf("readSecrets = %v, want an error naming the unset variable", err)
	}
}

func TestStepLines(t *testing.T) {
	tests := map[string]api.Progress{
		"  + egg/web created":              {Resource: "egg/web", Action: "create", Status: "done"},
		"  ~ egg/web updated":              {Resource: "egg/web", Action: "update", Status: "done"},
		"  - route/a.localhost deleted":    {Resource: "route/a.localhost", Action: "delete", Status: "done"},
		"  ✓ egg/kv wait healthy":          {Resource: "egg/kv", Action: "wait healthy", Status: "done"},
		"  ✗ egg/web: update failed: boom": {Resource: "egg/web", Action: "update", Status: "failed", Message: "boom"},
		"  … egg/kv: 0/1 replicas healthy": {Resource: "egg/kv", Action: "wait healthy", Status: "waiting", Message: "0/1 replicas healthy"},
		"":                                 {Resource: "egg/web", Action: "create", Status: "started"},
	}
	for want, s := range tests {
		if got := stepLine(s); got != want {
			t.Errorf("stepLine(%+v) = %q, want %q", s, got, want)
		}
	}
	if got := stepLine(api.Progress{Status: "started", Message: "apply 3 started"}); got != "" {
		t.Errorf("the apply's own step printed %q", got)
	}
}

func TestPrintPlanShowsChangesStepsAndCounts(t *testing.T) {
	var b strings.Builder
	printPlan(&b, "default/demo", api.Plan{Changes: []api.Change{
		{Action: "+", Key: "egg/kv", Unknown: []string{"placement"}},
		{Action: "~", Key: "egg/web", Changed: []string{"env", "replicas"}},
		{Action: "-", Key: "route/old.localhost"},
		{Action: "=", Key: "network/default"},
	}, Hosts: []api.HostSteps{{Host: "h-1", Name: "local", Steps: []string{"roll web: 3 replicas, start-first, 1 at a time"}}, {Host: "h-2", Name: "idle"}}})
	want := "Plan for default/demo:\n" +
		"  + egg/kv [known after apply: placement]\n" +
		"  ~ egg/web (env, replicas)\n" +
		"  - route/old.localhost\n" +
		"On the hosts:\n" +
		"  local:\n" +
		"    roll web: 3 replicas, start-first, 1 at a time\n" +
		"1 to create, 1 to update, 1 to delete, 1 unchanged.\n"
	if b.String() != want {
		t.Fatalf("plan:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestInterruptedFollowSaysTheRolloutGoesOn(t *testing.T) {
	f, c := newFakeAPI(t)
	f.statuses = readyStatuses("web")[:1] // never ready
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := testDeployer(c, &out).waitRollouts(ctx, "default", "demo", []string{"web"})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(out.String(), "the rollouts go on; `hatch status demo` shows them") {
		t.Fatalf("waitRollouts = %v, output:\n%s", err, out.String())
	}
}

func TestFollowingWithoutAnyHostUpSaysToStartAnAgent(t *testing.T) {
	f, c := newFakeAPI(t)
	down := eggAt("web", 0, 1, "progressing", "gone")
	down.Rollout.Reason = "host gone is down"
	f.statuses = []api.ProjectStatus{demoStatus(0, down)}
	err := testDeployer(c, io.Discard).waitRollouts(context.Background(), "default", "demo", []string{"web"})
	if err == nil || !strings.Contains(err.Error(), "no host is up") || !strings.Contains(err.Error(), "hatch token create --join") {
		t.Fatalf("waitRollouts = %v, want an error saying to start an agent", err)
	}
}

func TestDestroyWaitsUntilNoHostUpReportsAContainerOfTheProject(t *testing.T) {
	f, cl := newFakeAPI(t)
	c := func(workload string, slot int) contract.ContainerStatus {
		return contract.ContainerStatus{WorkloadID: workload, Slot: slot, State: contract.StateRunning}
	}
	report := func(id, state string, cs ...contract.ContainerStatus) hostState {
		return hostState{ID: "h-" + id, Name: id, State: state, Report: &contract.StatusReport{HostID: "h-" + id, Containers: cs}}
	}
	other := c("default/demo-two/web", 0) // another project, whose name starts alike
	f.hosts = [][]hostState{
		{report("local", "up", c("default/demo/web", 0), c("default/demo/web", 1), other), report("gone", "down", c("default/demo/kv", 0))},
		{report("local", "up", c("default/demo/web", 1), other), report("gone", "down", c("default/demo/kv", 0))},
		{report("local", "up", other), report("gone", "down", c("default/demo/kv", 0))},
	}
	var out bytes.Buffer
	if err := testDeployer(cl, &out).waitGone(context.Background(), "default", "demo"); err != nil {
		t.Fatal(err)
	}
	want := "waiting for 2 containers to stop on local\nwaiting for 1 containers to stop on local\nEvery container of default/demo is gone.\n"
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestStatusPrintsTheServersViewOfTheProject(t *testing.T) {
	isolate(t)
	f, c := newFakeAPI(t)
	web := eggAt("web", 2, 3, "progressing", "b", "a")
	web.Previous = 1
	f.statuses = []api.ProjectStatus{demoStatus(2, eggAt("kv", 1, 1, "done", "a"), web)}
	t.Setenv(client.EnvServer, c.Server())
	t.Setenv(client.EnvToken, adminToken())
	for _, args := range [][]string{{"status", "demo"}, {"status"}} {
		code, stdout, stderr := run(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d, stderr %s", args, code, stderr)
		}
		for _, s := range []string{"default/demo\n", "kv   1/1    done     a", "web  2/3    rolling  a,b", "1 of an older spec running"} {
			if !strings.Contains(stdout, s) {
				t.Errorf("%v: output lacks %q:\n%s", args, s, stdout)
			}
		}
	}
	code, _, stderr := run(t, "status", "nothing", "-n", "other")
	if code != 1 || !strings.Contains(stderr, "no project other/nothing on this server") {
		t.Fatalf("status of an unknown project: exit %d, stderr %s", code, stderr)
	}
}

// An apply that does not wait names the status command of the namespace it
// applied to: `hatch status demo` alone would look in "default".
func TestDeployWithoutWaitingNamesItsNamespacesStatusCommand(t *testing.T) {
	for ns, want := range map[string]string{
		"default": "`hatch status demo` shows them",
		"staging": "`hatch status -n staging demo` shows them",
	} {
		_, c := newFakeAPI(t)
		p := testProject(t)
		var out bytes.Buffer
		if err := testDeployer(c, &out).deploy(context.Background(), p, deployOptions{namespace: ns, yes: true, noWait: true}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), want) {
			t.Errorf("-n %s: output does not say %q:\n%s", ns, want, out.String())
		}
	}
}

// A server killed during the apply request leaves its outcome unknown: the
// CLI says so and how to find out, rather than a bare connection error.
func TestAnApplyRequestNobodyAnsweredSaysItsOutcomeIsUnknown(t *testing.T) {
	f, c := newFakeAPI(t)
	f.cutApply = true
	var out bytes.Buffer
	err := testDeployer(c, &out).deploy(t.Context(), testProject(t), deployOptions{namespace: "default", yes: true})
	if err == nil {
		t.Fatalf("deploy succeeded\n%s", out.String())
	}
	for _, part := range []string{"whether the apply was recorded is not known", "hatch history -n default demo"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("the error %q does not say %q", err, part)
		}
	}
}

// An outage while following the rollouts is shown as it starts and when it
// ends, not after a minute of silence.
func TestFollowingShowsAnOutageAsItHappens(t *testing.T) {
	f, c := newFakeAPI(t)
	f.statuses = readyStatuses("web")
	f.outage = 2
	var out bytes.Buffer
	if err := testDeployer(c, &out).waitRollouts(t.Context(), "default", "demo", []string{"web"}); err != nil {
		t.Fatalf("waitRollouts = %v\n%s", err, out.String())
	}
	text := out.String()
	down, back := strings.Index(text, "the control plane does not answer"), strings.Index(text, "the control plane answers again")
	if down < 0 || back < down || !strings.Contains(text, "default/demo is ready") {
		t.Fatalf("the outage is not shown as it starts and ends:\n%s", text)
	}
	if n := strings.Count(text, "does not answer"); n != 1 {
		t.Errorf("the outage is said %d times, want once:\n%s", n, text)
	}
}
