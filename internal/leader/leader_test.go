package leader

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/store/postgres"
	"github.com/hatchery/hatchery/internal/store/sqlite"
	"github.com/hatchery/hatchery/internal/testutil/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// leaseStore is what these tests need of a store: the leases, and a write
// that a fence guards (a status report stands for any loop write).
type leaseStore interface {
	store.Leases
	PutStatus(ctx context.Context, hostID string, report []byte, at time.Time) ([]byte, error)
}

// stores runs test against SQLite and PostgreSQL alike, side by side: the
// tests mostly wait for lease terms.
func stores(t *testing.T, test func(t *testing.T, st leaseStore)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "hatch.db"), zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		test(t, st)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		st, err := postgres.Open(t.Context(), pgtest.Shared(t).NewSchema(t), zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		test(t, st)
	})
}

// pausable is a store whose lease renewals can be held, as a server's are
// when its process is paused (SIGSTOP, a long GC), while its loops go on.
type pausable struct {
	store.Leases
	mu     sync.Mutex
	paused chan struct{} // non-nil while paused; closed on resume
}

func (p *pausable) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = make(chan struct{})
}

func (p *pausable) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.paused)
	p.paused = nil
}

func (p *pausable) RenewLease(ctx context.Context, project, token string, expires time.Time) error {
	p.mu.Lock()
	wait := p.paused
	p.mu.Unlock()
	if wait != nil {
		<-wait
	}
	return p.Leases.RenewLease(ctx, project, token, expires)
}

// refusals is a server's store recording when its tries at the loops'
// lease were refused: what a test waits for to know another server kept
// it through a time.
type refusals struct {
	store.Leases
	mu sync.Mutex  // guards at
	at []time.Time // the time (Since) of each refused try
}

func (r *refusals) AcquireLease(ctx context.Context, l store.Lease) (store.Lease, error) {
	held, err := r.Leases.AcquireLease(ctx, l)
	if errors.Is(err, store.ErrLocked) {
		r.mu.Lock()
		r.at = append(r.at, l.Since)
		r.mu.Unlock()
	}
	return held, err
}

// since counts the refused tries made at t or later.
func (r *refusals) since(t time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, at := range r.at {
		if !at.Before(t) {
			n++
		}
	}
	return n
}

// server is one elector running loops that write every 50 ms, as the
// liveness monitor does, counting what lands and what is refused.
type server struct {
	e               *Elector
	landed, refused atomic.Int64
	cancel          context.CancelFunc
	done            chan struct{}
}

func startServer(t *testing.T, st leaseStore, leases store.Leases, id string, running *atomic.Int32, overlap *atomic.Bool) *server {
	t.Helper()
	e, err := New(time.Second, Deps{Leases: leases, ServerID: id, Logger: zaptest.NewLogger(t).Named(id)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{e: e, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		e.Run(ctx, func(ctx context.Context) (func(context.Context), error) {
			return func(ctx context.Context) {
				if running.Add(1) > 1 {
					overlap.Store(true)
				}
				defer running.Add(-1)
				for ctx.Err() == nil {
					_, err := st.PutStatus(ctx, "h-"+id, []byte(`{}`), time.Now())
					switch {
					case err == nil:
						s.landed.Add(1)
					case errors.Is(err, store.ErrFenced):
						s.refused.Add(1)
					}
					time.Sleep(50 * time.Millisecond)
				}
			}, nil
		})
	}()
	t.Cleanup(s.stop)
	return s
}

func (s *server) stop() {
	s.cancel()
	<-s.done
}

func (s *server) leading() bool { return s.e.Leading() }

func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// One of two servers runs the loops; a clean stop hands them over at once.
func TestOneServerRunsTheLoopsAndAStopHandsThemOver(t *testing.T) {
	stores(t, func(t *testing.T, st leaseStore) {
		var running atomic.Int32
		var overlap atomic.Bool
		a := startServer(t, st, st, "a", &running, &overlap)
		<-a.e.FirstTry()
		if !a.leading() {
			t.Fatal("the first server did not take the free loops at its first try")
		}
		aLed := time.Now() // A's first term ends a second after this at the latest
		bTries := &refusals{Leases: st}
		b := startServer(t, st, bTries, "b", &running, &overlap)
		<-b.e.FirstTry()
		eventually(t, 5*time.Second, "B refused a try begun past A's first term (A renewed)",
			func() bool { return bTries.since(aLed.Add(time.Second)) > 0 })
		if b.leading() || !a.leading() {
			t.Fatalf("leading: a %v, b %v; want a only", a.leading(), b.leading())
		}
		a.stop()
		// Released at the stop: taken at B's next try, a third of a term.
		eventually(t, 5*time.Second, "B takes over the loops A released", b.leading)
		if overlap.Load() {
			t.Fatal("both servers ran the loops at once")
		}
	})
}

// A server paused past its lease (its renewals held) is replaced within a
// term and a retry; its loops' writes are refused from the lease's expiry
// by the store's clock, before and after the takeover; once it resumes it
// finds the lease gone and stops its loops, and never runs them beside the
// new holder.
func TestAPausedHolderIsReplacedAndItsWritesAreRefused(t *testing.T) {
	stores(t, func(t *testing.T, st leaseStore) {
		// A's loops go on while its renewals are held (refused), so they
		// overlap B's: only the writes count here.
		var running atomic.Int32
		var overlap atomic.Bool
		pa := &pausable{Leases: st}
		aTries := &refusals{Leases: pa}
		a := startServer(t, st, aTries, "a", &running, &overlap)
		<-a.e.FirstTry()
		b := startServer(t, st, st, "b", &running, &overlap)
		eventually(t, 2*time.Second, "A's loops write", func() bool { return a.landed.Load() > 0 })

		pa.pause()
		start := time.Now()
		eventually(t, 5*time.Second, "A's loop writes are refused once its lease expired", func() bool { return a.refused.Load() > 0 })
		if took := time.Since(start); took < 500*time.Millisecond {
			t.Fatalf("A's writes were refused %v after its last renewal, within its 1 s term", took)
		}
		landedBefore := a.landed.Load()
		eventually(t, 5*time.Second, "B takes the loops over", b.leading)
		t.Logf("B took over %v after A's renewals stopped", time.Since(start).Round(time.Millisecond))
		refusedBefore := a.refused.Load()
		eventually(t, 5*time.Second, "three more of A's writes refused", func() bool { return a.refused.Load() >= refusedBefore+3 })
		if a.landed.Load() != landedBefore {
			t.Fatal("a write of A's loops landed after its lease expired")
		}
		pa.resume()
		eventually(t, 5*time.Second, "A finds its lease gone and stops its loops", func() bool { return !a.leading() })
		stopped := time.Now()
		eventually(t, 5*time.Second, "A retries twice, refused: the loops stay B's", func() bool { return aTries.since(stopped) >= 2 })
		if a.leading() || !b.leading() || a.landed.Load() != landedBefore {
			t.Fatalf("after A resumed: leading a %v b %v, A's writes landed %d (before %d)", a.leading(), b.leading(), a.landed.Load(), landedBefore)
		}
		if b.landed.Load() == 0 {
			t.Fatal("B's loops wrote nothing")
		}
	})
}
