package deploy_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/blob"
	"github.com/hatchery/hatchery/internal/deploy"
	"github.com/hatchery/hatchery/internal/desired"
	"github.com/hatchery/hatchery/internal/imageref/imagereftest"
	"github.com/hatchery/hatchery/internal/provider"
	"github.com/hatchery/hatchery/internal/seal"
	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/store/sqlite"
	"github.com/hatchery/hatchery/internal/testutil/pgtest"
)

// newService is a started apply protocol over a real SQLite store, as a
// caller without HTTP (hatch up, the dashboard) has it.
func newService(t *testing.T) (*deploy.Service, *sqlite.Store) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "hatch.db"), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return startService(t, st), st
}

// startService is a started apply protocol over st: a second one over the
// same store is the server restarted, or another server.
func startService(t *testing.T, st *sqlite.Store) *deploy.Service {
	t.Helper()
	log := zaptest.NewLogger(t)
	blobs, err := blob.Open(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	box, err := seal.New(bytes.Repeat([]byte{1}, 32))
	if err != nil {
		t.Fatal(err)
	}
	set, err := provider.New(provider.Deps{Deps: desired.Deps{Desired: st, Statuses: st, Records: st, Events: st, Secrets: st,
		Fleet: desired.StoreFleet{List: st, Identities: st, Reports: st}, Box: box, Logger: log, Now: time.Now}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := deploy.New(deploy.DefaultConfig(), deploy.Deps{Resources: st, Plans: st, Leases: st, Applies: st,
		Projects: st, Events: st, Reports: st, Sources: blobs, Providers: set, Images: imagereftest.New(), ServerID: "srv-unit", Logger: log, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// request is a project of a network and a secret: no egg, so no host is
// needed for it to be applied.
func request(secret string) api.PlanRequest {
	return api.PlanRequest{
		Resources: []api.DesiredResource{{Type: "network", Name: "backend"}, {Type: "secret", Name: "api_key"}},
		Secrets:   map[string]string{"api_key": secret},
	}
}

// follow waits for the job's finished step.
func follow(t *testing.T, j *deploy.Job) api.Progress {
	t.Helper()
	var seq int64
	deadline := time.After(10 * time.Second)
	for {
		steps, over, changed := j.Since(seq)
		for _, p := range steps {
			seq = p.Seq
			if p.Status == api.StatusFinished {
				return p
			}
		}
		if over {
			t.Fatalf("the job ended without a finished step")
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatal("the apply did not finish")
		}
	}
}

func wantCode(t *testing.T, err error, code api.Code) {
	t.Helper()
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.Code != code {
		t.Fatalf("error %v, want an *api.Error with code %s", err, code)
	}
}

func TestServicePlansAppliesAndFollowsWithoutHTTP(t *testing.T) {
	s, _ := newService(t)
	ctx := t.Context()
	plan, err := s.Plan(ctx, "default/shop", request("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	if !plan.HasChanges || plan.Summary["create"] != 2 {
		t.Fatalf("plan %+v, want two creates", plan)
	}
	for _, c := range plan.Changes {
		if c.Key == "secret/api_key" && c.Inputs["value"] != api.Sensitive {
			t.Fatalf("the plan shows the secret as %+v", c.Inputs)
		}
	}
	j, err := s.Apply(ctx, "default/shop", plan.ID)
	if err != nil {
		t.Fatal(err)
	}
	if last := follow(t, j); last.Outcome != string(store.ApplySucceeded) {
		t.Fatalf("apply finished %+v, want succeeded", last)
	}
	st, err := s.ApplyStatus(ctx, "default/shop", j.ID())
	if err != nil || st.Apply.Outcome != string(store.ApplySucceeded) || len(st.Progress) == 0 {
		t.Fatalf("ApplyStatus = %+v, %v", st, err)
	}
	_, err = s.Apply(ctx, "default/shop", plan.ID)
	wantCode(t, err, api.CodeNotFound) // a plan is used once
	again, err := s.Plan(ctx, "default/shop", request("s3cret"))
	if err != nil || again.HasChanges {
		t.Fatalf("the same request planned again: %+v, %v; want no change", again, err)
	}
	p, err := s.Project(ctx, "default", "shop")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range p.Resources {
		for k, v := range r.Outputs {
			if r.Type == "secret" && v != api.Redacted {
				t.Fatalf("project shows secret output %s as %v", k, v)
			}
		}
	}
}

func TestServiceRefusesStaleLockedAndBadPlans(t *testing.T) {
	s, st := newService(t)
	ctx := t.Context()
	stale, err := s.Plan(ctx, "default/shop", request("one"))
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := s.Plan(ctx, "default/shop", request("one"))
	if err != nil {
		t.Fatal(err)
	}
	j, err := s.Apply(ctx, "default/shop", fresh.ID)
	if err != nil {
		t.Fatal(err)
	}
	follow(t, j)
	_, err = s.Apply(ctx, "default/shop", stale.ID)
	wantCode(t, err, api.CodeStalePlan)

	next, err := s.Plan(ctx, "default/shop", request("two"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := st.AcquireLease(ctx, store.Lease{Project: "default/shop", Token: "t", Holder: "another apply",
		Server: "srv-other", Since: now, Expires: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Apply(ctx, "default/shop", next.ID)
	wantCode(t, err, api.CodeLocked)
	_, err = s.RestartEgg(ctx, "default/shop", "web")
	wantCode(t, err, api.CodeLocked)

	_, err = s.Plan(ctx, "default/shop", api.PlanRequest{Resources: []api.DesiredResource{{Type: "secret", Name: "x"}}})
	wantCode(t, err, api.CodeBadRequest) // no value sent for the secret
	_, err = s.Apply(ctx, "default/other", next.ID)
	wantCode(t, err, api.CodeBadRequest) // a plan of another project
}

// A server that died mid-apply holds its project's lock until its lease
// expires; before, every retry in that time failed with "try again when it
// is done". Now the lock is taken over once the server has left the live
// server list, and until then the refusal says the holder stopped renewing
// it and when it expires.
func TestALockOfAServerThatStoppedSaysSoAndIsTakenOverOnceItLeftTheServerList(t *testing.T) {
	s, st := newService(t)
	ctx := t.Context()
	ttl := deploy.DefaultConfig().LeaseTTL
	now := time.Now()
	// The holder took the lock a term ago and last renewed it 25 s ago.
	if err := st.RegisterServer(ctx, "srv-gone", "https://gone", 15*time.Second, now.Add(-ttl)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AcquireLease(ctx, store.Lease{Project: "default/shop", Token: "t", Holder: "apply of plan-1",
		Server: "srv-gone", Since: now.Add(-ttl), Expires: now.Add(5 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	// While its registration lasts, the refusal says what is known.
	if err := st.RegisterServer(ctx, "srv-gone", "https://gone", 15*time.Second, now.Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	plan, err := s.Plan(ctx, "default/shop", request("one"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Apply(ctx, "default/shop", plan.ID)
	wantCode(t, err, api.CodeLocked)
	for _, part := range []string{"apply of plan-1", "has not renewed the lock", "leaves the live server list", "expires at "} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("the refusal %q does not say %q", err, part)
		}
	}
	// Once its registration ran out, the next apply takes the lock over.
	if err := st.RegisterServer(ctx, "srv-gone", "https://gone", time.Millisecond, now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	j, err := s.Apply(ctx, "default/shop", plan.ID)
	if err != nil {
		t.Fatalf("apply after the holder left the server list: %v", err)
	}
	if p := follow(t, j); p.Outcome != "succeeded" {
		t.Fatalf("the apply ended %+v", p)
	}
}

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
