package server

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/apiclient"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

// runsWorld is a server with default/shop's egg web deployed (no
// schedule) and one run r1 of it recorded, pending.
func runsWorld(t *testing.T) *secureHarness {
	sh := newSecureHarness(t, DefaultConfig())
	if err := sh.store.PutResource(t.Context(), "default/shop", &resource.Deployed{ID: "w1", Type: resource.Egg, Name: "web"}); err != nil {
		t.Fatal(err)
	}
	run := store.Run{ID: "r1", Project: "default/shop", Egg: "web", Trigger: api.TriggerManual, Actor: "admin",
		CreatedAt: sh.clock.Now(), State: store.RunPending}
	if err := sh.store.CreateRuns(t.Context(), []store.Run{run}, nil); err != nil {
		t.Fatal(err)
	}
	return sh
}

func TestRunRequestsAreCheckedAndTheJobsErrorsMappedWithTheirReason(t *testing.T) {
	sh := runsWorld(t)
	const p = "/api/v1/projects/default/shop"
	for _, c := range []struct {
		method, path, body string
		status             int
		mentions           string
	}{
		{"POST", p + "/eggs/web/runs", `{"timeout": "soon"}`, 400, "timeout"},
		{"POST", p + "/eggs/web/runs", `{"timeout": "-1s"}`, 400, "timeout"},
		{"POST", p + "/eggs/web/runs", `{"command": [""]}`, 400, "command"},
		{"POST", p + "/eggs/web/runs", `{"commands": ["sh"]}`, 400, "commands"},
		{"POST", p + "/eggs/web/runs", `{"keep": "yes"}`, 400, "keep"},
		{"POST", p + "/eggs/Web!/runs", `{}`, 400, "egg"},
		{"POST", p + "/eggs/db/runs", `{}`, 404, "db"},
		{"GET", p + "/runs?egg=No", "", 400, "egg"},
		{"GET", p + "/runs/r9", "", 404, "r9"},
		{"GET", p + "/runs/..%2Fx", "", 400, "run ID"},
		{"GET", p + "/runs/r1?wait=2h&state=pending", "", 400, "wait"},
		{"POST", p + "/runs/r9/stop", "", 404, "r9"},
		{"POST", p + "/schedules/web/pause", "", 409, "no schedule"},
		{"POST", p + "/schedules/web/run", "", 409, "no schedule"},
		{"POST", p + "/schedules/db/resume", "", 404, "db"},
	} {
		var body *strings.Reader
		if c.body != "" {
			body = strings.NewReader(c.body)
		} else {
			body = strings.NewReader("")
		}
		resp := sh.do(c.method, c.path, body)
		got := readAll(t, resp.Body)
		if resp.StatusCode != c.status || !strings.Contains(got, c.mentions) {
			t.Errorf("%s %s %s: %d %s, want %d mentioning %q", c.method, c.path, c.body, resp.StatusCode, got, c.status, c.mentions)
		}
	}
}

func TestARunIsListedAndItsLongPollAnswersAtItsEnd(t *testing.T) {
	sh := runsWorld(t)
	const p = "/api/v1/projects/default/shop"
	runs := decode[api.Runs](t, sh.do("GET", p+"/runs?egg=web", nil), http.StatusOK)
	if len(runs.Runs) != 1 || runs.Runs[0].ID != "r1" || runs.Runs[0].State != store.RunPending {
		t.Fatalf("runs %+v, want r1 pending", runs.Runs)
	}
	if none := decode[api.Runs](t, sh.do("GET", p+"/runs?egg=api", nil), http.StatusOK); none.Runs == nil || len(none.Runs) != 0 {
		t.Fatalf("runs of an egg without any: %+v, want an empty list", none)
	}

	// A wait with nothing happening answers the run as it is, after the wait.
	start := time.Now()
	same := decode[api.Run](t, sh.do("GET", p+"/runs/r1?wait=300ms&state=pending", nil), http.StatusOK)
	if same.State != store.RunPending || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("run %+v after %v, want pending after the wait", same, time.Since(start))
	}

	// Its end, recorded meanwhile, answers the wait before it is over.
	go func() {
		time.Sleep(200 * time.Millisecond)
		_, err := sh.store.RecordRunProgress(t.Context(), "r1", store.RunProgress{State: store.RunExited, ExitCode: 3,
			StartedAt: sh.clock.Now(), EndedAt: sh.clock.Now()})
		if err != nil {
			t.Error(err)
		}
	}()
	start = time.Now()
	ended := decode[api.Run](t, sh.do("GET", p+"/runs/r1?wait=20s&state=pending", nil), http.StatusOK)
	if ended.State != store.RunExited || ended.ExitCode != 3 || time.Since(start) > 10*time.Second {
		t.Fatalf("run %+v after %v, want exited 3 at once", ended, time.Since(start))
	}
	if n := sh.srv.holds.Holders(endpointRunWait); n != 0 {
		t.Fatalf("%d run waits held after they answered", n)
	}
}

func TestARunOnAHostThatRefusesExecIsRefusedBeforeItIsRecorded(t *testing.T) {
	sh := runsWorld(t)
	joinTok, _ := sh.createJoinToken(time.Hour, 1)
	id, tok := sh.join(joinTok, "locked")
	report := `{"host_id": "` + id + `", "no_exec": true, "containers": []}`
	if resp := sh.doAs(tok, "POST", "/api/v1/hosts/"+id+"/status", strings.NewReader(report)); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("report: %d", resp.StatusCode)
	}
	resp := sh.do("POST", "/api/v1/projects/default/shop/eggs/web/runs", strings.NewReader(`{"host": "locked", "command": ["true"]}`))
	body := readAll(t, resp.Body)
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "--no-exec") {
		t.Fatalf("a run on a --no-exec host: %d %s, want 409 naming --no-exec", resp.StatusCode, body)
	}
	runs := decode[api.Runs](t, sh.do("GET", "/api/v1/projects/default/shop/runs", nil), http.StatusOK)
	if len(runs.Runs) != 1 {
		t.Fatalf("runs %+v, want r1 only: the refused run recorded nothing", runs.Runs)
	}
}

func TestARunsLogsAreRefusedWhenNoHostWouldEverServeThem(t *testing.T) {
	w := newSessionWorld(t, DefaultConfig())
	ctx := t.Context()
	if err := w.sh.store.PutResource(ctx, "default/shop", &resource.Deployed{ID: "w1", Type: resource.Egg, Name: "web"}); err != nil {
		t.Fatal(err)
	}
	now := w.sh.clock.Now()
	runs := []store.Run{
		{ID: "gone", Project: "default/shop", Egg: "web", Trigger: api.TriggerManual, CreatedAt: now, State: store.RunPending},
		{ID: "kept", Project: "default/shop", Egg: "web", Trigger: api.TriggerManual, CreatedAt: now, State: store.RunPending, Kept: true},
	}
	if err := w.sh.store.CreateRuns(ctx, runs, nil); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"gone", "kept"} {
		if _, err := w.sh.store.RecordRunProgress(ctx, id, store.RunProgress{State: store.RunExited, StartedAt: now, EndedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		query, mentions string
		status          int
	}{
		{"egg=web&run=nope", "nope", 404},
		{"egg=db&run=kept", "not of db", 404},
		{"egg=web&run=gone", "--keep", 410},
		{"egg=web&run=a%20b", "run", 400},
	} {
		_, err := w.admin.Dial(ctx, "/api/v1/projects/default/shop/logs?"+c.query)
		var apiErr *apiclient.APIError
		if !errors.As(err, &apiErr) || apiErr.StatusCode != c.status || !strings.Contains(apiErr.Message, c.mentions) {
			t.Errorf("logs?%s: %v, want %d mentioning %q", c.query, err, c.status, c.mentions)
		}
	}
	// A kept run's logs are a stream (no host holds it here: it ends at once).
	conn, err := w.admin.Dial(ctx, "/api/v1/projects/default/shop/logs?egg=web&run=kept")
	if err != nil {
		t.Fatalf("a kept run's logs: %v", err)
	}
	conn.CloseNow()
}

// A scheduled egg's last success is on the server's /metrics (the jobs'
// collector registered with the others).
func TestAScheduledEggsLastSuccessIsAMetric(t *testing.T) {
	sh := runsWorld(t)
	ended := sh.clock.Now().Truncate(time.Second)
	run := store.Run{ID: "r2", Project: "default/shop", Egg: "web", Trigger: api.TriggerSchedule,
		ScheduledAt: ended, CreatedAt: ended, State: store.RunPending}
	if err := sh.store.CreateRuns(t.Context(), []store.Run{run}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := sh.store.RecordRunProgress(t.Context(), "r2", store.RunProgress{State: store.RunExited,
		StartedAt: ended, EndedAt: ended}); err != nil {
		t.Fatal(err)
	}
	families, err := sh.srv.metrics.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "hatch_job_last_success_timestamp_seconds" && len(f.GetMetric()) == 1 {
			if got := f.GetMetric()[0].GetGauge().GetValue(); got != float64(ended.Unix()) {
				t.Fatalf("last success %v, want %d", got, ended.Unix())
			}
			return
		}
	}
	t.Fatal("no hatch_job_last_success_timestamp_seconds series among the server's metrics")
}
