package agent

import (
	"slices"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
)

func TestFenceOut(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	const after = time.Minute
	for _, tc := range []struct {
		name     string
		v        fenceView
		now      time.Time
		out      bool
		wantWake time.Time
	}{
		{"no fencing", fenceView{Since: t0}, t0.Add(time.Hour), false, time.Time{}},
		{"reported recently", fenceView{FenceAfter: after, Since: t0, LastOK: t0.Add(time.Hour)}, t0.Add(time.Hour + 59*time.Second), false, t0.Add(time.Hour + after)},
		{"silent for fence_after", fenceView{FenceAfter: after, Since: t0, LastOK: t0.Add(time.Hour)}, t0.Add(time.Hour + after), true, time.Time{}},
		{"no report since start, within fence_after", fenceView{FenceAfter: after, Since: t0}, t0.Add(30 * time.Second), false, t0.Add(after)},
		{"no report since start, past fence_after", fenceView{FenceAfter: after, Since: t0}, t0.Add(2 * after), true, time.Time{}},
	} {
		out, wake := fenceOut(tc.v, tc.now)
		if out != tc.out || !wake.Equal(tc.wantWake) {
			t.Errorf("%s: fenceOut = %v, %v; want %v, %v", tc.name, out, wake, tc.out, tc.wantWake)
		}
	}
}

func TestFenceHoldsStarts(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		v    fenceView
		hold bool
	}{
		{"no fencing", fenceView{Since: t0}, false},
		{"from the cache, no report", fenceView{FenceAfter: time.Minute, Since: t0}, true},
		{"report answered, state still the cache's", fenceView{FenceAfter: time.Minute, Since: t0, LastOK: t0}, true},
		{"state fetched, no report yet", fenceView{FenceAfter: time.Minute, Since: t0, Heard: true}, true},
		{"confirmed", fenceView{FenceAfter: time.Minute, Since: t0, LastOK: t0, Heard: true}, false},
	} {
		if got := fenceHoldsStarts(tc.v); got != tc.hold {
			t.Errorf("%s: fenceHoldsStarts = %v, want %v", tc.name, got, tc.hold)
		}
	}
}

func TestWithoutFenced(t *testing.T) {
	db := contract.WorkloadSpec{Namespace: "n", Project: "p", Egg: "db", Fenced: true}
	web := contract.WorkloadSpec{Namespace: "n", Project: "p", Egg: "web"}
	d := contract.DesiredState{HostID: "h", Workloads: []contract.WorkloadSpec{db, web}}
	db.Replicas, web.Replicas = 1, 2
	d.Workloads = []contract.WorkloadSpec{db, web}
	got, ids := withoutFenced(d)
	if !slices.Equal(ids, []string{db.ID()}) || len(got.Workloads) != 2 || got.Workloads[0].Replicas != 0 || got.Workloads[1].Replicas != 2 {
		t.Errorf("withoutFenced = %+v, %v; want db at 0 replicas (its own timeouts stop it), web kept", got.Workloads, ids)
	}
	if d.Workloads[0].Replicas != 1 {
		t.Error("withoutFenced changed its argument")
	}
	if h := fenceHolds(d); len(h) != 1 || h[db.ID()] == "" {
		t.Errorf("fenceHolds = %v, want db only", h)
	}
}

func TestFenceReported(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	var f fenceWatch
	f.start(t0)
	if !f.reported(t0.Add(time.Second), time.Minute) {
		t.Error("the first 2xx report since start wants no converge: fenced starts stay held")
	}
	if f.reported(t0.Add(10*time.Second), time.Minute) {
		t.Error("a report 9s after the last wants a converge")
	}
	if !f.reported(t0.Add(10*time.Second+time.Minute), time.Minute) {
		t.Error("a report after a silence of fence_after wants no converge: fenced workloads stay out")
	}
	if f.reported(t0.Add(time.Hour), 0) {
		t.Error("without fencing a report wants a converge")
	}
}

func TestFencedAtIsKeptUntilAReportIsAnswered(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	var f fenceWatch
	f.start(t0)
	if !f.fenced(t0.Add(time.Minute)) {
		t.Error("the first fence since the start is not new")
	}
	if f.fenced(t0.Add(2 * time.Minute)) {
		t.Error("a second converge of the same fence counts as a new one")
	}
	if got := f.fencedSince(); !got.Equal(t0.Add(time.Minute)) {
		t.Fatalf("fencedSince = %v, want the fence's first time %v", got, t0.Add(time.Minute))
	}
	f.reported(t0.Add(3*time.Minute), time.Minute)
	if got := f.fencedSince(); !got.IsZero() {
		t.Fatalf("fencedSince = %v after an answered report, want zero", got)
	}
}

func TestFenceLeaseCoversTheFencedWorkloadsUntilTheAgentWouldHaveDrainedThem(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	db := contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: "db", Fenced: true, StopTimeout: 30 * time.Second}
	db.Rollout.DrainTimeout = 20 * time.Second
	web := contract.WorkloadSpec{Namespace: "default", Project: "shop", Egg: "web", StopTimeout: time.Minute}
	d := contract.DesiredState{Workloads: []contract.WorkloadSpec{web, db}, FenceAfter: time.Minute}
	until, ids, stop := fenceLease(d, t0)
	if want := t0.Add(time.Minute + 20*time.Second); !until.Equal(want) || len(ids) != 1 || ids[0] != db.ID() || stop != 30*time.Second {
		t.Fatalf("lease = %v %v %v; want until %v for db only, stop 30s", until, ids, stop, want)
	}
	d.FenceAfter = 0
	if _, ids, _ := fenceLease(d, t0); ids != nil {
		t.Fatalf("without fencing the lease names %v", ids)
	}
	d.FenceAfter, d.Workloads = time.Minute, []contract.WorkloadSpec{web}
	if _, ids, _ := fenceLease(d, t0); ids != nil {
		t.Fatalf("with no fenced workload the lease names %v", ids)
	}
}
