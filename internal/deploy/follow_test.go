package deploy_test

import (
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/deploy"
	"github.com/hatchery/hatchery/internal/store"
)

// onlyStep returns the one step of a job that is already over.
func onlyStep(t *testing.T, j *deploy.Job) api.Progress {
	t.Helper()
	steps, over, _ := j.Since(0)
	if !over || len(steps) != 1 {
		t.Fatalf("job over %v with steps %+v, want an ended job of one step", over, steps)
	}
	return steps[0]
}

// A server that no longer holds an apply in memory (restarted since, or
// not the one that ran it) follows it from its record: a job already over
// whose one step is where the record stands, finished with its outcome or
// still running.
func TestFollowingAnApplyThisServerDoesNotHoldGivesItsRecordedOutcome(t *testing.T) {
	s, st := newService(t)
	ctx := t.Context()
	plan, err := s.Plan(ctx, "default/shop", request("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	j, err := s.Apply(ctx, "default/shop", plan.ID)
	if err != nil {
		t.Fatal(err)
	}
	follow(t, j)
	// Another server runs the next apply: it holds the project's lease.
	now := time.Now()
	if _, err := st.AcquireLease(ctx, store.Lease{Project: "default/shop", Token: "t", Holder: "apply of plan-2",
		Server: "srv-other", Since: now, Expires: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	running, err := st.StartApply(ctx, store.NewApply{Project: "default/shop", Actor: "ops", At: now})
	if err != nil {
		t.Fatal(err)
	}

	restarted := startService(t, st)
	finished, err := restarted.Follow(ctx, "default/shop", j.ID())
	if err != nil {
		t.Fatal(err)
	}
	if p := onlyStep(t, finished); p.Status != api.StatusFinished || p.Outcome != string(store.ApplySucceeded) {
		t.Fatalf("a finished apply followed after a restart: %+v, want finished, succeeded", p)
	}
	elsewhere, err := restarted.Follow(ctx, "default/shop", running.ID)
	if err != nil {
		t.Fatal(err)
	}
	if p := onlyStep(t, elsewhere); p.Status != api.StatusRunning || p.Outcome != string(store.ApplyRunning) {
		t.Fatalf("an apply another server runs: %+v, want running", p)
	}
	_, err = restarted.Follow(ctx, "default/shop", running.ID+1)
	wantCode(t, err, api.CodeNotFound)
}
