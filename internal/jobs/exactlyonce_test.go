package jobs

import (
	"context"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/leader"
	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/testutil/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// frozen is a store's leases whose renewals can be held, as those of a
// server paused (SIGSTOP, a long GC) or cut off from the database, while
// its loops go on trying to write.
type frozen struct {
	store.Leases
	mu   sync.Mutex
	stop chan struct{} // non-nil while frozen; closed on thaw
}

func (f *frozen) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stop = make(chan struct{})
}

func (f *frozen) thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stop != nil {
		close(f.stop)
		f.stop = nil
	}
}

func (f *frozen) RenewLease(ctx context.Context, project, token string, expires time.Time) error {
	f.mu.Lock()
	wait := f.stop
	f.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return f.Leases.RenewLease(ctx, project, token, expires)
}

// server is one control plane server's jobs service and loops' elector
// over its own connection to the shared database.
type server struct {
	h       *harness
	elector *leader.Elector
	leases  *frozen
	stop    context.CancelFunc
	done    chan struct{}
}

func startServer(t *testing.T, url, id string, ttl time.Duration) *server {
	t.Helper()
	st := newPostgres(t, url)
	h := harnessOn(t, st, id, &clock{})
	leases := &frozen{Leases: st}
	el, err := leader.New(ttl, leader.Deps{Leases: leases, ServerID: id, Logger: zaptest.NewLogger(t).Named(id)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{h: h, elector: el, leases: leases, stop: cancel, done: make(chan struct{})}
	go func() { defer close(s.done); el.Run(ctx, h.svc.BeginLoops) }()
	t.Cleanup(func() { s.leases.thaw(); s.stop(); <-s.done })
	return s
}

// waitFor polls cond until it holds, or fails after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Two servers on one PostgreSQL run the scheduler of an every-1s schedule;
// the loops' holder is frozen mid-run (its lease renewals held, its loops
// still trying to write), and the other takes over within 1.33 terms.
// Every tick from the first to the last is recorded exactly once, none
// missed, and each is delivered once into its host's desired state.
func TestEveryTickIsRecordedOnceAcrossATakeover(t *testing.T) {
	const ttl = 1500 * time.Millisecond
	url := pgtest.Shared(t).NewSchema(t)
	a := startServer(t, url, "srv-a", ttl)
	waitFor(t, 5*time.Second, "srv-a takes the loops", a.elector.Leading)
	b := startServer(t, url, "srv-b", ttl)

	a.h.egg(t, "report", scheduled(map[string]any{"every": "1s", "starting_deadline": "10s", "concurrency": "allow", "keep_runs": 1000}))
	heartbeat, stopHeartbeat := context.WithCancel(t.Context())
	defer stopHeartbeat()
	go func() { // h1 stays up, as its agent reports every 2 s
		for heartbeat.Err() == nil {
			a.h.report(t, "h1")
			time.Sleep(500 * time.Millisecond)
		}
	}()

	time.Sleep(4 * time.Second)
	a.leases.freeze() // srv-a is paused: its loops go on, their writes are refused once its lease expires
	frozenAt := time.Now()
	waitFor(t, 3*ttl, "srv-b takes the loops over", b.elector.Leading)
	t.Logf("srv-b took over %v after srv-a froze", time.Since(frozenAt).Round(time.Millisecond))
	time.Sleep(4 * time.Second)
	a.stop() // srv-a dies, its lease never renewed again
	time.Sleep(2 * time.Second)
	stopHeartbeat()
	b.stop()
	<-b.done
	<-a.done

	runs := a.h.runs(t)
	var ticks []time.Time
	for _, r := range runs {
		if r.State == store.RunMissed || r.State == store.RunSkipped {
			t.Fatalf("run %+v: no tick may be missed or skipped within its deadline", r)
		}
		ticks = append(ticks, r.ScheduledAt)
	}
	slices.SortFunc(ticks, time.Time.Compare)
	slices.SortFunc(runs, func(x, y store.Run) int { return x.ScheduledAt.Compare(y.ScheduledAt) })
	if len(ticks) < 8 {
		t.Fatalf("only %d ticks recorded in about 10 s: %v", len(ticks), ticks)
	}
	for i := 1; i < len(ticks); i++ {
		if gap := ticks[i].Sub(ticks[i-1]); gap != time.Second {
			t.Fatalf("ticks %v then %v: a gap of %v (every tick once, in order, none left out)", ticks[i-1], ticks[i], gap)
		}
	}
	delivered := a.h.desiredRuns(t, "h1")
	var inState []string
	for _, r := range delivered {
		inState = append(inState, r.ID)
	}
	for _, r := range runs {
		if r.DeliveredAt.IsZero() && !r.ScheduledAt.Before(runs[len(runs)-1].ScheduledAt) {
			continue // the last tick may have been recorded as the servers stopped
		}
		if r.DeliveredAt.IsZero() || r.Host != "h1" {
			t.Fatalf("run %+v was not delivered to h1", r)
		}
		if n := countOf(inState, r.ID); n != 1 {
			t.Fatalf("run %s is %d times in h1's desired state", r.ID, n)
		}
	}
	var late []time.Duration
	for _, r := range runs {
		late = append(late, r.CreatedAt.Sub(r.ScheduledAt).Round(time.Millisecond))
	}
	t.Logf("%d ticks %v .. %v, recorded late by %v", len(ticks), ticks[0], ticks[len(ticks)-1], late)
}

func countOf(list []string, s string) int {
	n := 0
	for _, v := range list {
		if v == s {
			n++
		}
	}
	return n
}
