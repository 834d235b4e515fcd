package storetest

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

// FullStore is every interface a store implements, for copies between
// stores (`hatch server migrate`).
type FullStore interface {
	Store
	ApplyStore
}

// Fill writes one or more of everything a store keeps into s: records of
// several projects, hosts with reports and desired states, events, more
// applies than the history keeps (so the apply counter is above the highest
// ID kept) by named actors, retained blobs, admin tokens (one revoked),
// join tokens, joined and removed hosts, a lease, a plan and secret values.
func Fill(t *testing.T, s FullStore) {
	t.Helper()
	c := ctx(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"default/shop", "staging/blog"} {
		put(t, s, p, &resource.Deployed{ID: "n1", Type: "network", Name: "default", Outputs: map[string]any{"name": "hatch-net"}})
		put(t, s, p, &resource.Deployed{ID: "v1", Type: "volume", Name: "data", Inputs: map[string]any{"host": "a"}})
		put(t, s, p, &resource.Deployed{ID: "s1", Type: "secret", Name: "key", Inputs: map[string]any{"handle": "s1:fp"}})
		put(t, s, p, &resource.Deployed{ID: "e1", Type: "egg", Name: "web", Source: digest("a"),
			Inputs:  map[string]any{"replicas": 2.0, "env": map[string]any{"A": "1"}},
			Outputs: map[string]any{"address": "web:80", "hosts": []any{"h1"}}, Parents: []string{"network/default", "secret/key"}})
		put(t, s, p, &resource.Deployed{ID: "r1", Type: "route", Name: "shop", Inputs: map[string]any{"host": "shop.example"}})
	}
	put(t, s, "default/shop", &resource.Deployed{ID: "e2", Type: "egg", Name: "db", Pending: true})
	must(s.CreateJoinToken(c, store.JoinToken{ID: "jt1", Hash: "hash-jt1", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour), MaxUses: 3}))
	must(s.CreateJoinToken(c, store.JoinToken{ID: "jt2", Hash: "hash-jt2", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour), MaxUses: 1}))
	if _, err := s.RevokeJoinToken(c, "jt2", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"a", "b", "c"} {
		must(s.JoinHost(c, "hash-jt1", store.HostIdentity{ID: fmt.Sprint("h", i+1), Name: name,
			TokenHash: "host-hash-" + name, JoinedAt: t0.Add(time.Duration(i) * time.Second)}))
	}
	if _, err := s.RemoveHost(c, "h3", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	putStatus(t, s, "h1", `{"host_id":"h1","containers":[]}`, t0.Add(time.Minute))
	putStatus(t, s, "h2", `{"host_id":"h2"}`, t0.Add(time.Minute))
	if _, err := s.MarkHostDown(c, "h2", t0.Add(2*time.Minute), t0.Add(3*time.Minute)); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"h1", "h2"} {
		if _, err := s.PutDesiredStates(c, []store.DesiredState{{HostID: h, Version: "v-" + h, Doc: []byte(`{"host_id":"` + h + `"}`), UpdatedAt: t0}},
			&store.PeerList{Version: "p1", Doc: []byte(`[{"host_id":"h1"},{"host_id":"h2"}]`), UpdatedAt: t0}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range store.DefaultKeepApplies + 2 {
		a, err := s.StartApply(c, store.NewApply{Project: "default/shop", Actor: "alice", Blobs: []string{digest("b"), digest(fmt.Sprint(i % 2))},
			At: t0.Add(time.Duration(i) * time.Second), Inputs: []byte(fmt.Sprintf(`{"n":%d}`, i)), Summary: "~ egg/web [env]",
			Digest: digest(fmt.Sprint(i)), RollbackOf: int64(i / 2)})
		must(err)
		must(s.FinishApply(c, a.ID, store.ApplySucceeded, "", t0.Add(time.Duration(i)*time.Second+time.Millisecond)))
	}
	a, err := s.StartApply(c, store.NewApply{Project: "staging/blog", At: t0})
	must(err)
	must(s.FinishApply(c, a.ID, store.ApplyFailed, "egg/web: boom", t0.Add(time.Second)))
	must(s.RetainBlobs(c, "upload:x", []string{digest("c")}))
	must(s.CreateTokenHash(c, "admin", "admin-hash", t0))
	must(s.CreateAdminToken(c, store.AdminToken{Name: "alice", Hash: "alice-hash", CreatedAt: t0.Add(time.Second)}, "admin"))
	must(s.CreateAdminToken(c, store.AdminToken{Name: "bob", Hash: "bob-hash", CreatedAt: t0.Add(2 * time.Second)}, "admin"))
	if _, err := s.RevokeAdminToken(c, "bob", "alice", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireLease(c, lease("default/shop", "tok", "apply 12", "srv-a", t0, time.Hour)); err != nil {
		t.Fatal(err)
	}
	must(s.PutPlan(c, store.StoredPlan{ID: "p1", Project: "default/shop", Created: t0, Expires: t0.Add(time.Hour),
		Blobs: []string{digest("d")}, Doc: []byte(`{"steps":[]}`)}))
	must(s.PutSecretValue(c, store.SecretValue{Project: "default/shop", Name: "key", Fingerprint: "fp", Sealed: "sealed-1", Created: t0}))
	if _, err := s.RecordCapacityBaseline(c, "h1", store.Capacity{Memory: 8 << 30, MilliCPU: 4000}, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	must(s.PinCapacity(store.WithActor(c, "alice"), "h1", store.Capacity{Memory: 16 << 30, MilliCPU: 8000}, t0.Add(2*time.Minute)))
	if _, err := s.AppendEvent(store.WithActor(c, "alice"), store.Event{Time: t0, Type: store.EventRolloutRestarted, Project: "default/shop",
		Resource: "egg/web", Message: "web restarted"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendEvent(c, store.Event{Time: t0, Type: store.EventRolloutDone, Project: "default/shop",
		Host: "h1", Resource: "egg/web", Message: "web is at its spec on h1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.InitSchedule(c, store.ScheduleState{Project: "default/shop", Egg: "report", LastTick: t0, UpdatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	must(s.CreateRuns(c, []store.Run{
		{ID: "run1", Project: "default/shop", Egg: "report", Trigger: "schedule", ScheduledAt: t0.Add(time.Minute), CreatedAt: t0.Add(time.Minute),
			State: store.RunPending, Timeout: time.Minute, Kept: true},
		{ID: "run2", Project: "default/shop", Egg: "web", Trigger: "manual", Actor: "alice", CreatedAt: t0, State: store.RunPending,
			Command: []string{"migrate", "--up"}, StopEgg: true},
	}, &store.ScheduleState{Project: "default/shop", Egg: "report", LastTick: t0.Add(time.Minute), UpdatedAt: t0.Add(time.Minute)}))
	must(s.DeliverRun(c, "run2", "h1", t0.Add(time.Second), time.Second))
	if _, err := s.RecordRunProgress(c, "run2", store.RunProgress{State: store.RunExited, ExitCode: 3, StartedAt: t0.Add(2 * time.Second),
		EndedAt: t0.Add(3 * time.Second), Error: "exit 3"}); err != nil {
		t.Fatal(err)
	}
	must(s.ReleaseRun(c, "run2", t0.Add(4*time.Second)))
}

// AssertSameContents checks that got reads back everything Fill wrote to
// want, as want reads it, and that got's counters continue after want's: its
// next event and apply have higher numbers than any want gave.
func AssertSameContents(t *testing.T, want, got FullStore) {
	t.Helper()
	c := ctx(t)
	same := func(what string, w, g any, werr, gerr error) {
		t.Helper()
		if werr != nil || gerr != nil {
			t.Fatalf("%s: %v / %v", what, werr, gerr)
		}
		if !reflect.DeepEqual(w, g) {
			t.Fatalf("%s differs:\nwant %+v\ngot  %+v", what, w, g)
		}
	}
	wruns, werr := want.ListRuns(c, store.RunFilter{})
	gruns, gerr := got.ListRuns(c, store.RunFilter{})
	same("runs", wruns, gruns, werr, gerr)
	wsched, werr := want.ListScheduleStates(c, "")
	gsched, gerr := got.ListScheduleStates(c, "")
	same("schedule states", wsched, gsched, werr, gerr)
	wp, werr := want.ListProjects(c)
	gp, gerr := got.ListProjects(c)
	same("projects", wp, gp, werr, gerr)
	for _, p := range wp {
		wr, werr := want.ListResources(c, p)
		gr, gerr := got.ListResources(c, p)
		same("resources of "+p, wr, gr, werr, gerr)
		wa, werr := want.Applies(c, p)
		ga, gerr := got.Applies(c, p)
		same("applies of "+p, wa, ga, werr, gerr)
		for _, a := range wa {
			wi, werr := want.ApplyInputs(c, p, a.ID)
			gi, gerr := got.ApplyInputs(c, p, a.ID)
			same(fmt.Sprintf("inputs of apply %d", a.ID), string(wi), string(gi), werr, gerr)
		}
	}
	wh, werr := want.ListHosts(c)
	gh, gerr := got.ListHosts(c)
	same("hosts", wh, gh, werr, gerr)
	for _, h := range wh {
		ws, werr := want.Status(c, h.ID)
		gs, gerr := got.Status(c, h.ID)
		if werr == nil || gerr == nil {
			same("status of "+h.ID, ws, gs, werr, gerr)
		}
		wd, werr := want.DesiredState(c, h.ID)
		gd, gerr := got.DesiredState(c, h.ID)
		same("desired state of "+h.ID, wd, gd, werr, gerr)
	}
	wpeers, werr := want.DesiredPeers(c)
	gpeers, gerr := got.DesiredPeers(c)
	same("peer list", wpeers, gpeers, werr, gerr)
	if wpeers.Version == "" {
		t.Fatal("the store filled has no peer list to compare")
	}
	wi, werr := want.ListHostIdentities(c)
	gi, gerr := got.ListHostIdentities(c)
	same("host identities", wi, gi, werr, gerr)
	wj, werr := want.ListJoinTokens(c)
	gj, gerr := got.ListJoinTokens(c)
	same("join tokens", wj, gj, werr, gerr)
	wt, werr := want.TokenHash(c, "admin")
	gt, gerr := got.TokenHash(c, "admin")
	same("admin token", wt, gt, werr, gerr)
	wat, werr := want.ListAdminTokens(c)
	gat, gerr := got.ListAdminTokens(c)
	same("admin tokens", wat, gat, werr, gerr)
	wb, werr := want.ReferencedBlobs(c)
	gb, gerr := got.ReferencedBlobs(c)
	same("referenced blobs", wb, gb, werr, gerr)
	wpl, werr := want.Plan(c, "p1")
	gpl, gerr := got.Plan(c, "p1")
	same("plan", wpl, gpl, werr, gerr)
	wv, werr := want.SecretValue(c, "default/shop", "key", "fp")
	gv, gerr := got.SecretValue(c, "default/shop", "key", "fp")
	same("secret value", wv, gv, werr, gerr)
	wcap, werr := want.AllHostCapacities(c)
	gcap, gerr := got.AllHostCapacities(c)
	same("host capacities", wcap, gcap, werr, gerr)
	if len(wcap) == 0 {
		t.Fatal("the store filled has no host capacity to compare")
	}
	we := eventsSince(t, want, 0)
	ge := eventsSince(t, got, 0)
	same("events", we, ge, nil, nil)
	_, werr = want.AcquireLease(c, lease("default/shop", "other", "apply 13", "srv-b", t0.Add(time.Minute), time.Hour))
	_, gerr = got.AcquireLease(c, lease("default/shop", "other", "apply 13", "srv-b", t0.Add(time.Minute), time.Hour))
	same("the held lease", werr.Error(), gerr.Error(), nil, nil)

	// The counters continue: no number is handed out twice.
	lastApply := int64(0)
	for _, p := range wp {
		as, _ := want.Applies(c, p)
		for _, a := range as {
			lastApply = max(lastApply, a.ID)
		}
	}
	wNext, err := want.StartApply(c, store.NewApply{Project: "default/other", At: t0})
	if err != nil {
		t.Fatal(err)
	}
	gNext, err := got.StartApply(c, store.NewApply{Project: "default/other", At: t0})
	if err != nil {
		t.Fatal(err)
	}
	if gNext.ID != wNext.ID || gNext.ID <= lastApply {
		t.Fatalf("the copy's next apply is %d, the original's %d (highest kept %d)", gNext.ID, wNext.ID, lastApply)
	}
	wSeq, err := want.AppendEvent(c, store.Event{Time: t0, Type: store.EventRolloutDone})
	if err != nil {
		t.Fatal(err)
	}
	gSeq, err := got.AppendEvent(c, store.Event{Time: t0, Type: store.EventRolloutDone})
	if err != nil || gSeq != wSeq {
		t.Fatalf("the copy's next event is %d (%v), the original's %d", gSeq, err, wSeq)
	}
}
