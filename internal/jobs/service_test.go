package jobs

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/api"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/desired"
	"github.com/hatchery/hatchery/internal/store"
)

// tickAhead moves the clock past the next 1 s mark of an every-1s schedule.
func (h *harness) tickAhead() { h.clock.advance(time.Second) }

func TestAScheduledTickIsRecordedDeliveredAndItsEndRecordedFromTheReport(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		h.report(t, "h1")
		h.egg(t, "report", scheduled(map[string]any{"every": "1s", "timeout": "30s", "keep_runs": 1}))
		h.pass(t) // the schedule is seen first: its ticks count from now
		if runs := h.runs(t); len(runs) != 0 {
			t.Fatalf("runs on the first sight of a schedule: %+v", runs)
		}
		h.tickAhead()
		h.pass(t)
		runs := h.runs(t)
		if len(runs) != 1 || runs[0].Trigger != api.TriggerSchedule || runs[0].Host != "h1" || runs[0].DeliveredAt.IsZero() {
			t.Fatalf("runs after a tick: %+v, want one delivered to h1", runs)
		}
		first := runs[0]
		got := h.desiredRuns(t, "h1")
		if len(got) != 1 || got[0].ID != first.ID || got[0].Timeout != 30*time.Second {
			t.Fatalf("h1's desired runs: %+v", got)
		}
		if w := got[0].Workload; w.Replicas != 1 || w.Restart != contract.RestartNo || !slices.Equal(w.Command, []string{"report"}) ||
			w.Image != "app:1" || w.Egg != "report" {
			t.Fatalf("the run's workload: %+v", w)
		}

		// h1 reports it running, then exited 3.
		started := h.clock.now().Truncate(time.Millisecond)
		h.report(t, "h1", contract.RunStatus{ID: first.ID, State: contract.RunRunning, StartedAt: started})
		h.pass(t)
		if r, _ := h.st.Run(t.Context(), first.ID); r.State != store.RunRunning || !r.StartedAt.Equal(started) {
			t.Fatalf("after the running report: %+v", r)
		}
		h.report(t, "h1", contract.RunStatus{ID: first.ID, State: contract.RunExited, ExitCode: 3, StartedAt: started, EndedAt: started.Add(time.Second)})
		h.pass(t)
		r, _ := h.st.Run(t.Context(), first.ID)
		if r.State != store.RunExited || r.ExitCode != 3 || !r.Kept {
			t.Fatalf("after the end: %+v, want exited 3 and kept (keep_runs 1)", r)
		}
		if !hasEvent(h.events(t), store.EventRunFailed) {
			t.Fatal("no run.failed event for an exit code of 3")
		}
		if got := h.desiredRuns(t, "h1"); len(got) != 1 {
			t.Fatalf("a kept run left the desired state: %+v", got)
		}

		// The next tick's run ends too: keep_runs 1 prunes the first.
		h.tickAhead()
		h.pass(t)
		runs = h.runs(t)
		second := runs[len(runs)-1]
		if second.ID == first.ID || second.DeliveredAt.IsZero() {
			t.Fatalf("runs after the second tick: %+v", runs)
		}
		h.report(t, "h1", contract.RunStatus{ID: second.ID, State: contract.RunExited}) // an end without its time
		h.pass(t)
		if r, _ := h.st.Run(t.Context(), second.ID); r.State != store.RunExited || r.EndedAt.IsZero() {
			t.Fatalf("an end reported without its time: %+v, want the report's time", r)
		}
		got = h.desiredRuns(t, "h1")
		if len(got) != 1 || got[0].ID != second.ID {
			t.Fatalf("h1's desired runs after the second end: %+v, want the second only", got)
		}
		if r, _ := h.st.Run(t.Context(), first.ID); r.ReleasedAt.IsZero() {
			t.Fatalf("the pruned run is not recorded released: %+v", r)
		}
	})
}

func TestAHostsClaimsAboutRunsNotDeliveredToItAreIgnored(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		h.report(t, "h1")
		h.report(t, "h2")
		h.egg(t, "web", map[string]any{"image": "app:1", "placement": map[string]any{"hosts": []any{"h1"}}})
		run, err := h.svc.Start(t.Context(), project, "web", api.RunRequest{Command: []string{"migrate"}}, "alice")
		if err != nil {
			t.Fatal(err)
		}
		// h2 claims the run ended; it was not delivered to h2.
		h.report(t, "h2", contract.RunStatus{ID: run.ID, State: contract.RunExited, ExitCode: 0})
		h.report(t, "h1", contract.RunStatus{ID: run.ID, State: "exploded"})
		h.pass(t)
		if r, _ := h.st.Run(t.Context(), run.ID); r.State != store.RunPending {
			t.Fatalf("a claim of another host, or an unknown state, was recorded: %+v", r)
		}
	})
}

func TestAManualRunIsRecordedAndDeliveredWithItsActor(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		h.report(t, "h1")
		h.egg(t, "web", map[string]any{"image": "app:1", "replicas": 2, "command": []any{"serve"}})
		if _, err := h.states.PlaceEgg(t.Context(), project, mustEgg(t, h, "web"), nil); err != nil {
			t.Fatal(err)
		}
		run, err := h.svc.Start(t.Context(), project, "web", api.RunRequest{Command: []string{"migrate", "--up"}, Keep: true, Timeout: "1m",
			Stop: true}, "alice") // --stop means nothing to a stateless egg
		if err != nil {
			t.Fatal(err)
		}
		if n := replicas(t, h, "h1", "web"); n != 2 {
			t.Fatalf("web has %d replicas on h1 beside its run, want its 2 left alone", n)
		}
		if err != nil {
			t.Fatal(err)
		}
		if run.Trigger != api.TriggerManual || run.Actor != "alice" || run.Host != "h1" || run.Namespace != "default" || run.Project != "shop" ||
			!run.Kept || run.State != store.RunPending {
			t.Fatalf("the run: %+v", run)
		}
		got := h.desiredRuns(t, "h1")
		if len(got) != 1 || got[0].ID != run.ID || !slices.Equal(got[0].Workload.Command, []string{"migrate", "--up"}) || got[0].Timeout != time.Minute {
			t.Fatalf("h1's desired runs: %+v", got)
		}
		evs := h.events(t)
		i := slices.IndexFunc(evs, func(e store.Event) bool { return e.Type == store.EventRunManual })
		if i < 0 || evs[i].Actor != "alice" || !strings.Contains(evs[i].Message, run.ID) {
			t.Fatalf("events: %+v, want run.manual by alice", evs)
		}
		if list, err := h.svc.List(t.Context(), project, "web"); err != nil || len(list) != 1 || list[0].ID != run.ID {
			t.Fatalf("List: %+v, %v", list, err)
		}
		// Ctrl-C: its host is asked to stop it; its end comes from the report.
		if _, err := h.svc.Stop(t.Context(), project, run.ID, "alice"); err != nil {
			t.Fatal(err)
		}
		if got := h.desiredRuns(t, "h1"); len(got) != 1 || !got[0].Stop {
			t.Fatalf("after Stop: %+v, want the run asked to stop", got)
		}
		h.report(t, "h1", contract.RunStatus{ID: run.ID, State: contract.RunStopped, ExitCode: 143, EndedAt: h.clock.now()})
		h.pass(t)
		ended, err := h.svc.Wait(t.Context(), project, run.ID, store.RunPending)
		if err != nil || ended.State != store.RunStopped || ended.ExitCode != 143 {
			t.Fatalf("Wait: %+v, %v", ended, err)
		}
	})
}

func TestRunsRefusedAreNotRecorded(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		h.egg(t, "web", map[string]any{"image": "app:1"})
		h.egg(t, "db", map[string]any{"image": "db:1", "replicas": 1,
			"volumes":   []any{map[string]any{"type": "volume", "source": "data", "target": "/data"}},
			"placement": map[string]any{"volume": "data", "volume_host": "h1"}})
		if _, err := h.svc.Start(t.Context(), project, "web", api.RunRequest{}, "alice"); !errors.Is(err, ErrNoHost) {
			t.Fatalf("no host up: %v, want ErrNoHost", err)
		}
		h.report(t, "h1")
		if _, err := h.svc.Start(t.Context(), project, "web", api.RunRequest{Host: "nowhere"}, "alice"); !errors.Is(err, ErrRefused) {
			t.Fatalf("an unknown host: %v, want ErrRefused", err)
		}
		if _, err := h.svc.Start(t.Context(), project, "nope", api.RunRequest{}, "alice"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("an unknown egg: %v, want ErrNotFound", err)
		}
		if _, err := h.svc.Start(t.Context(), project, "web", api.RunRequest{Timeout: "soon"}, "alice"); !errors.Is(err, ErrRefused) {
			t.Fatalf("a bad timeout: %v, want ErrRefused", err)
		}
		// db runs on h1, its volume's host.
		if _, err := h.states.PlaceEgg(t.Context(), project, mustEgg(t, h, "db"), nil); err != nil {
			t.Fatal(err)
		}
		_, err := h.svc.Start(t.Context(), project, "db", api.RunRequest{Command: []string{"dump"}}, "alice")
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "--stop") {
			t.Fatalf("a run beside a running stateful egg: %v, want ErrRefused naming --stop", err)
		}
		if runs := h.runs(t); len(runs) != 0 {
			t.Fatalf("refused runs were recorded: %+v", runs)
		}
		if err := h.svc.Pause(t.Context(), project, "web", "alice"); !errors.Is(err, ErrRefused) {
			t.Fatalf("pausing an egg with no schedule: %v, want ErrRefused", err)
		}
	})
}

func TestARunWithStopStopsTheStatefulEggForItsRunAndStartsItAgain(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		h.report(t, "h1")
		h.egg(t, "db", map[string]any{"image": "db:1", "replicas": 1,
			"volumes":   []any{map[string]any{"type": "volume", "source": "data", "target": "/data"}},
			"placement": map[string]any{"volume": "data", "volume_host": "h1"}})
		if _, err := h.states.PlaceEgg(t.Context(), project, mustEgg(t, h, "db"), nil); err != nil {
			t.Fatal(err)
		}
		run, err := h.svc.Start(t.Context(), project, "db", api.RunRequest{Command: []string{"dump"}, Stop: true, Keep: true}, "alice")
		if err != nil {
			t.Fatal(err)
		}
		if n := replicas(t, h, "h1", "db"); n != 0 {
			t.Fatalf("db has %d replicas on h1 during its --stop run, want 0", n)
		}
		if len(h.desiredRuns(t, "h1")) != 1 {
			t.Fatal("the run is not in h1's desired state")
		}
		// An apply placing db meanwhile keeps its replica stopped for the run.
		if _, err := h.states.PlaceEgg(t.Context(), project, mustEgg(t, h, "db"), nil); err != nil {
			t.Fatal(err)
		}
		if n := replicas(t, h, "h1", "db"); n != 0 {
			t.Fatalf("db placed again during its --stop run has %d replicas on h1, want 0", n)
		}
		h.report(t, "h1", contract.RunStatus{ID: run.ID, State: contract.RunExited, EndedAt: h.clock.now()})
		h.pass(t)
		// Its container stays for the output's grace: `hatch run` follows
		// the output through a session that may reach h1 after the end.
		if len(h.desiredRuns(t, "h1")) != 1 {
			t.Fatal("the ended run left h1's desired state before its output's grace")
		}
		h.clock.advance(h.svc.cfg.OutputGrace)
		h.pass(t)
		if n := replicas(t, h, "h1", "db"); n != 1 {
			t.Fatalf("db has %d replicas on h1 after its run ended, want 1 again", n)
		}
		if got := h.desiredRuns(t, "h1"); len(got) != 0 {
			t.Fatalf("the run stays in h1's desired state: %+v", got)
		}
	})
}

func TestARunOfAHostThatWentDownIsLostAndNeverRunAgain(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		h.report(t, "h1")
		h.egg(t, "web", map[string]any{"image": "app:1"})
		run, err := h.svc.Start(t.Context(), project, "web", api.RunRequest{}, "alice")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.st.MarkHostDown(t.Context(), "h1", h.clock.now().Add(time.Second), h.clock.now()); err != nil {
			t.Fatal(err)
		}
		h.pass(t)
		r, _ := h.st.Run(t.Context(), run.ID)
		if r.State != store.RunLost || r.ReleasedAt.IsZero() {
			t.Fatalf("the run of a host down: %+v, want lost and released", r)
		}
		if got := h.desiredRuns(t, "h1"); len(got) != 0 {
			t.Fatalf("a lost run stays in its host's desired state: %+v", got)
		}
		if !hasEvent(h.events(t), store.EventRunLost) {
			t.Fatal("no run.lost event")
		}
		// The host comes back and reports the run ended: the first end stands.
		h.report(t, "h1", contract.RunStatus{ID: run.ID, State: contract.RunExited})
		h.pass(t)
		if r, _ := h.st.Run(t.Context(), run.ID); r.State != store.RunLost {
			t.Fatalf("a lost run's end was replaced: %+v", r)
		}
	})
}

func TestARunWaitsForAnApplyHoldingItsProjectAndRecordsTheDelay(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		apply, runs := tickWhileLocked(t, h)
		h.clock.advance(50 * time.Millisecond) // the apply runs a while
		if err := h.st.ReleaseLease(t.Context(), project, apply.Token); err != nil {
			t.Fatal(err)
		}
		h.pass(t)
		r, _ := h.st.Run(t.Context(), runs[0].ID)
		if r.DeliveredAt.IsZero() || r.Delay < 50*time.Millisecond {
			t.Fatalf("after the apply: %+v, want delivered with the delay recorded", r)
		}
	})
}

func TestPauseResumeFireAndSchedules(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		h.report(t, "h1")
		h.egg(t, "report", scheduled(map[string]any{"every": "1s"}))
		h.pass(t)
		if err := h.svc.Pause(t.Context(), project, "report", "alice"); err != nil {
			t.Fatal(err)
		}
		h.tickAhead()
		h.pass(t)
		if runs := h.runs(t); len(runs) != 0 {
			t.Fatalf("a paused schedule ran: %+v", runs)
		}
		scheds, err := h.svc.Schedules(t.Context(), project)
		if err != nil || len(scheds) != 1 || !scheds[0].Paused || scheds[0].Spec != "every 1s" || !scheds[0].Next.IsZero() {
			t.Fatalf("Schedules while paused: %+v, %v", scheds, err)
		}
		fired, err := h.svc.Fire(t.Context(), project, "report", "alice")
		if err != nil || fired.Trigger != api.TriggerFire || fired.Actor != "alice" {
			t.Fatalf("Fire: %+v, %v", fired, err)
		}
		h.clock.advance(5 * time.Second)
		if err := h.svc.Resume(t.Context(), project, "report", "alice"); err != nil {
			t.Fatal(err)
		}
		h.pass(t)
		if runs := h.runs(t); len(runs) != 1 {
			t.Fatalf("the pause's ticks ran after the resume: %+v", runs)
		}
		scheds, err = h.svc.Schedules(t.Context(), project)
		if err != nil || len(scheds) != 1 || scheds[0].Paused || scheds[0].Next.IsZero() || scheds[0].LastRun != fired.ID {
			t.Fatalf("Schedules after the resume: %+v, %v", scheds, err)
		}
		evs := h.events(t)
		for _, typ := range []store.EventType{store.EventSchedulePaused, store.EventScheduleResumed, store.EventScheduleFired} {
			i := slices.IndexFunc(evs, func(e store.Event) bool { return e.Type == typ })
			if i < 0 || evs[i].Actor != "alice" {
				t.Errorf("no %s event by alice in %+v", typ, evs)
			}
		}
	})
}

func TestTicksPastTheirDeadlineAreRecordedMissedOnce(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		h.report(t, "h1")
		h.egg(t, "report", scheduled(map[string]any{"every": "1s", "starting_deadline": "2s"}))
		h.pass(t)
		h.clock.advance(time.Minute) // the control plane was away
		h.pass(t)
		runs := h.runs(t)
		var missed, pending int
		for _, r := range runs {
			switch r.State {
			case store.RunMissed:
				missed += r.Missed
			case store.RunPending:
				pending++
			}
		}
		if missed < 55 || pending < 1 || pending > 3 || len(runs) > 4 {
			t.Fatalf("runs after a minute away: %+v; want one missed record of ~57 ticks and a catch-up within 2 s", runs)
		}
		if !hasEvent(h.events(t), store.EventRunMissed) {
			t.Fatal("no run.missed event")
		}
	})
}

// mustEgg is the egg's desired.Egg from its record.
func mustEgg(t *testing.T, h *harness, name string) desired.Egg {
	t.Helper()
	recs, err := h.st.ListResources(t.Context(), project)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Name == name {
			e, err := desired.NewEgg(project, r.Name, r.Inputs, r.Source, 0)
			if err != nil {
				t.Fatal(err)
			}
			return e
		}
	}
	t.Fatalf("no egg %s", name)
	return desired.Egg{}
}

// replicas returns the egg's replicas in host's desired state.
func replicas(t *testing.T, h *harness, host, egg string) int {
	t.Helper()
	w, _ := h.desiredState(t, host).Workload(contract.WorkloadID("default", "shop", egg))
	return w.Replicas
}

// tickWhileLocked has a tick of an every-1s schedule recorded while an
// apply holds the project: the run is recorded and not delivered. It
// returns the apply's lease and the runs.
func tickWhileLocked(t *testing.T, h *harness) (store.Lease, []store.Run) {
	t.Helper()
	h.report(t, "h1")
	h.egg(t, "report", scheduled(map[string]any{"every": "1s", "starting_deadline": "1m"}))
	h.pass(t)
	now := h.clock.now()
	apply, err := h.st.AcquireLease(t.Context(), store.Lease{Project: project, Token: "apply-token", Holder: "apply 7", Server: "srv-b",
		Since: now, Expires: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	h.tickAhead()
	h.pass(t)
	runs := h.runs(t)
	if len(runs) != 1 || !runs[0].DeliveredAt.IsZero() {
		t.Fatalf("runs while an apply holds the project: %+v, want one recorded, not delivered", runs)
	}
	return apply, runs
}

func TestARunStoppedBeforeItsDeliveryNeverRuns(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		apply, runs := tickWhileLocked(t, h)
		// Ctrl-C while the apply holds the project: the stop is recorded, and
		// carried out once the lease is free.
		stopped, err := h.svc.Stop(t.Context(), project, runs[0].ID, "alice")
		if err != nil || stopped.State != store.RunPending {
			t.Fatalf("Stop while locked: %+v, %v; want the run as it is", stopped, err)
		}
		if err := h.st.ReleaseLease(t.Context(), project, apply.Token); err != nil {
			t.Fatal(err)
		}
		h.pass(t)
		r, _ := h.st.Run(t.Context(), runs[0].ID)
		if r.State != store.RunStopped || !r.DeliveredAt.IsZero() || r.ReleasedAt.IsZero() {
			t.Fatalf("a run stopped before its delivery: %+v, want stopped, never delivered", r)
		}
		if got := h.desiredRuns(t, "h1"); len(got) != 0 {
			t.Fatalf("h1's desired runs: %+v, want none", got)
		}
	})
}

// The loop wakes at each tick, not only every Tick: each run is recorded
// and delivered well within a second of its tick (the figure: p50 and the
// worst of the ticks, logged).
func TestTheLoopDeliversEachTickOnTime(t *testing.T) {
	h := harnessOn(t, newSQLite(t), "srv-a", &clock{})
	h.svc.cfg.Tick = time.Second // as configured by default: the wake-up at the tick is what keeps it on time
	h.report(t, "h1")
	h.egg(t, "report", scheduled(map[string]any{"every": "1s", "concurrency": "allow", "keep_runs": 100}))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); h.svc.loop(ctx) }()
	time.Sleep(6500 * time.Millisecond)
	cancel()
	<-done
	var late []time.Duration
	for _, r := range h.runs(t) {
		if r.DeliveredAt.IsZero() {
			continue // the last tick, as the loop stopped
		}
		late = append(late, r.DeliveredAt.Sub(r.ScheduledAt))
	}
	slices.Sort(late)
	if len(late) < 4 {
		t.Fatalf("%d runs delivered in 6.5 s of an every-1s schedule: %v", len(late), late)
	}
	t.Logf("tick to delivery over %d ticks: p50 %v, worst %v", len(late), late[len(late)/2], late[len(late)-1])
	if worst := late[len(late)-1]; worst > time.Second {
		t.Fatalf("a run delivered %v after its tick (%v), want within 1 s", worst, late)
	}
}

// The scheduler keeps a copy of the scheduled eggs, read again when the
// event log moves: an egg applied with a schedule (or its schedule
// changed) is seen at the next pass, not after the copy's refresh.
func TestAScheduleAppliedLaterIsSeenAtTheNextPass(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		h.report(t, "h1")
		h.egg(t, "report", scheduled(map[string]any{"every": "1s"}))
		h.pass(t)
		h.egg(t, "clean", scheduled(map[string]any{"every": "1s"}))
		h.egg(t, "report", scheduled(map[string]any{"cron": "0 0 1 1 *"})) // its schedule changed: yearly
		h.pass(t)
		h.tickAhead()
		h.pass(t)
		var eggs []string
		for _, r := range h.runs(t) {
			eggs = append(eggs, r.Egg)
		}
		if !slices.Equal(eggs, []string{"clean"}) {
			t.Fatalf("runs of %v after a tick, want clean's only (report's schedule is yearly now)", eggs)
		}
	})
}

// A tick of concurrency forbid is decided on the runs' ends the hosts
// reported by then, not on what the last pass recorded: a run that ended
// (and was reported) since does not make the next tick skip. Found by
// TestJobsExactlyOnceAcrossATakeover (test/e2e): across a takeover the
// agent's report of a late run's end reached the store a moment before
// the next tick, and the tick was skipped.
func TestAForbidTickIsDecidedOnTheEndsReportedSinceTheLastPass(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		h.report(t, "h1")
		h.egg(t, "report", scheduled(map[string]any{"every": "1s"}))
		h.svc.pass(t.Context(), time.Time{}) // the schedule is seen first
		h.tickAhead()
		h.svc.pass(t.Context(), time.Time{})
		runs := h.runs(t)
		if len(runs) != 1 || runs[0].DeliveredAt.IsZero() {
			t.Fatalf("runs after a tick: %+v, want one delivered", runs)
		}
		h.report(t, "h1", contract.RunStatus{ID: runs[0].ID, State: contract.RunExited, StartedAt: h.clock.now(), EndedAt: h.clock.now()})
		h.tickAhead()
		h.svc.pass(t.Context(), time.Time{})
		runs = h.runs(t)
		if len(runs) != 2 || runs[0].State != store.RunExited || runs[1].State == store.RunSkipped || runs[1].DeliveredAt.IsZero() {
			t.Fatalf("runs after the next tick: %+v, want the first exited and the second delivered, not skipped", runs)
		}
	})
}

// A scheduler that has just begun (a restart) decides a forbid tick only
// once the host of the egg's open run has reported since: the run ended
// while no server could hear of it, and the tick runs. A host silent for
// hearFirst gets its tick decided on what is known: skipped.
func TestAForbidTickAfterARestartWaitsForTheRunsHostToReport(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		h.report(t, "h1")
		h.egg(t, "report", scheduled(map[string]any{"every": "1m"}))
		h.pass(t) // the schedule is seen first
		h.clock.advance(time.Minute)
		h.pass(t)
		first := h.runs(t)[0]
		h.report(t, "h1", contract.RunStatus{ID: first.ID, State: contract.RunRunning, StartedAt: h.clock.now()})
		h.pass(t)

		// The server is down across the run's end and the next tick (one
		// tick: 5 s past it, wherever in the minute the test runs).
		h.clock.advance(untilAfterNextTick(h.clock.now(), 5*time.Second))
		began := h.clock.now()
		h.svc.pass(t.Context(), began)
		if runs := h.runs(t); len(runs) != 1 {
			t.Fatalf("runs before h1 reported since the restart: %+v, want the tick left undecided", runs)
		}
		h.clock.advance(time.Second)
		h.report(t, "h1", contract.RunStatus{ID: first.ID, State: contract.RunExited, StartedAt: began, EndedAt: began})
		h.svc.pass(t.Context(), began)
		runs := h.runs(t)
		if len(runs) != 2 || runs[0].State != store.RunExited || runs[1].State != store.RunPending || runs[1].Trigger != api.TriggerMissed ||
			runs[1].DeliveredAt.IsZero() {
			t.Fatalf("runs once h1 reported the end: %+v, want the first exited and the late tick delivered (trigger missed)", runs)
		}

		// The second run's host falls silent across the next restart, just
		// after the next tick: the tick waits hearFirst, no longer, and is
		// skipped.
		h.clock.advance(untilAfterNextTick(h.clock.now(), time.Second))
		began = h.clock.now()
		h.svc.pass(t.Context(), began)
		if runs := h.runs(t); len(runs) != 2 {
			t.Fatalf("runs right after the second restart: %+v, want the tick left undecided", runs)
		}
		h.clock.advance(hearFirst)
		h.svc.pass(t.Context(), began)
		runs = h.runs(t)
		if len(runs) != 3 || runs[2].State != store.RunSkipped {
			t.Fatalf("runs %v after the restart with h1 silent: %+v, want the tick skipped", hearFirst, runs)
		}
	})
}

// untilAfterNextTick is how far to advance a clock at now to be d past the
// next tick of an every-1m schedule (ticks on the minute).
func untilAfterNextTick(now time.Time, d time.Duration) time.Duration {
	return now.Truncate(time.Minute).Add(time.Minute + d).Sub(now)
}
