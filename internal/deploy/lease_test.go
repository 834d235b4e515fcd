package deploy

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/store/sqlite"
)

// flakyLeases holds leases in memory and answers each renewal with the next
// of its scripted errors (nil once they run out).
type flakyLeases struct {
	mu       sync.Mutex // guards the fields below
	renewals []error    // what the next renewals return, in order
	renewed  int
	released []string // tokens released
	changed  chan struct{}
}

func newFlakyLeases(renewals ...error) *flakyLeases {
	return &flakyLeases{renewals: renewals, changed: make(chan struct{}, 1)}
}

func (f *flakyLeases) AcquireLease(_ context.Context, l store.Lease) (store.Lease, error) {
	return l, nil
}

func (f *flakyLeases) RenewLease(context.Context, string, string, time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.renewed++
	select {
	case f.changed <- struct{}{}:
	default:
	}
	if len(f.renewals) == 0 {
		return nil
	}
	err := f.renewals[0]
	f.renewals = f.renewals[1:]
	return err
}

func (f *flakyLeases) ReleaseLease(_ context.Context, _, token string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, token)
	return nil
}

func (f *flakyLeases) ReleaseServerLeases(context.Context, string) ([]store.Lease, error) {
	return nil, nil
}

func (f *flakyLeases) renewCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.renewed
}

// leaseService is just enough of a Service to hold leases renewed every
// 10 ms.
func leaseService(t *testing.T, leases store.Leases) *Service {
	s := &Service{cfg: Config{LeaseTTL: 30 * time.Millisecond}, deps: Deps{Leases: leases, ServerID: "srv-unit"},
		log: zaptest.NewLogger(t), now: time.Now}
	s.life, s.cancel = context.WithCancel(context.Background())
	t.Cleanup(s.cancel)
	return s
}

// A renewal that finds the lease gone (expired and taken over) says so at
// once: the apply holding it is cancelled rather than writing on.
func TestALeaseFoundGoneAtARenewalIsLost(t *testing.T) {
	leases := newFlakyLeases(errors.New("database is locked"), store.ErrNotFound)
	s := leaseService(t, leases)
	l, err := s.acquire(t.Context(), "default/shop", "apply 1")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.lost:
	case <-time.After(10 * time.Second):
		t.Fatalf("the lease is not lost 10 s after a renewal found it gone (%d renewals)", leases.renewCount())
	}
	l.release()
	if n := leases.renewCount(); n != 2 {
		t.Errorf("%d renewals, want 2 (none after the lease was found gone)", n)
	}
}

// A renewal that fails for another reason (the database busy, a network
// blip) is retried at the next tick, and the lease is kept.
func TestAFailedRenewalIsRetriedAndTheLeaseKept(t *testing.T) {
	leases := newFlakyLeases(errors.New("database is locked"), context.DeadlineExceeded)
	s := leaseService(t, leases)
	l, err := s.acquire(t.Context(), "default/shop", "apply 1")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for leases.renewCount() < 4 {
		select {
		case <-leases.changed:
		case <-l.lost:
			t.Fatal("a failed renewal lost the lease")
		case <-deadline:
			t.Fatalf("%d renewals in 10 s, want them retried after two failures", leases.renewCount())
		}
	}
	l.release()
	select {
	case <-l.lost:
		t.Fatal("a failed renewal lost the lease")
	default:
	}
	n := leases.renewCount()
	if len(leases.released) != 1 || leases.released[0] != l.held.Token {
		t.Errorf("released %v, want the lease's token once", leases.released)
	}
	l.release()
	if leases.renewCount() != n || len(leases.released) != 1 {
		t.Error("a second release renewed or released again")
	}
}

// A project's lease held for a moment (the jobs scheduler delivering a
// run) is waited for, so the apply that met that moment goes on; one held
// for longer than lockedWait (another apply) is refused with who holds it.
func TestALeaseHeldForAMomentIsWaitedFor(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "hatch.db"), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	s := leaseService(t, st)
	s.cfg.LeaseTTL = time.Minute
	now := time.Now()
	brief, err := st.AcquireLease(t.Context(), store.Lease{Project: "default/shop", Token: "runs-token", Holder: "runs",
		Server: "srv-b", Since: now, Expires: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = st.ReleaseLease(context.Background(), brief.Project, brief.Token)
	}()
	l, err := s.acquire(t.Context(), "default/shop", "apply 1")
	if err != nil {
		t.Fatalf("an apply meeting a lease held for 300 ms: %v", err)
	}

	start := time.Now()
	_, err = s.acquire(t.Context(), "default/shop", "apply 2")
	var locked *store.LockedError
	if !errors.As(err, &locked) || locked.Held.Holder != "apply 1" {
		t.Fatalf("a second apply while the first holds the lease: %v, want the *store.LockedError of apply 1", err)
	}
	if waited := time.Since(start); waited < lockedWait {
		t.Errorf("refused after %s, before lockedWait (%s)", waited, lockedWait)
	}
	l.release()
}
