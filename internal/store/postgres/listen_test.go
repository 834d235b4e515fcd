package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/testutil/pgtest"
)

// twoServers opens two stores on one database, as two servers have them.
func twoServers(t *testing.T) (a, b *Store) {
	t.Helper()
	url := pgtest.Shared(t).NewSchema(t)
	open := func() *Store {
		s, err := Open(t.Context(), url, zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	return open(), open()
}

func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// A desired state written through server A wakes the long-poll waiting on
// server B, and only that host's; an event recorded through A wakes B's
// event streams; a status report that records no event wakes nobody.
func TestChangesThroughOneServerWakeTheOthersWaiters(t *testing.T) {
	a, b := twoServers(t)
	mine, theirs := b.WatchDesiredState("h1"), b.WatchDesiredState("h2")
	if _, err := a.PutDesiredStates(t.Context(), []store.DesiredState{{HostID: "h1", Version: "v1", Doc: []byte(`{}`), UpdatedAt: time.UnixMilli(1)}}, nil); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(mine, 5*time.Second) {
		t.Fatal("a desired state written through A did not wake B's waiter")
	}
	if d, err := b.DesiredState(t.Context(), "h1"); err != nil || d.Version != "v1" {
		t.Fatalf("B reads %+v, %v", d, err)
	}
	if closedWithin(theirs, 100*time.Millisecond) {
		t.Fatal("another host's waiter on B was woken")
	}

	events := b.WatchEvents()
	if _, err := a.PutStatus(t.Context(), "h1", []byte(`{}`), time.UnixMilli(2)); err != nil { // host.up
		t.Fatal(err)
	}
	if !closedWithin(events, 5*time.Second) {
		t.Fatal("an event recorded through A did not wake B's event watcher")
	}
	events = b.WatchEvents()
	if _, err := a.PutStatus(t.Context(), "h1", []byte(`{}`), time.UnixMilli(3)); err != nil { // no event
		t.Fatal(err)
	}
	if closedWithin(events, 200*time.Millisecond) {
		t.Fatal("a status report without an event woke B's event watcher")
	}
}

// One write of many hosts' states through A (more than one notification's
// payload holds) wakes each of those hosts' waiters on B, and no other; a
// new peer list through A wakes every waiter on B.
func TestAnApplyOfManyHostsThroughOneServerWakesEachOnTheOther(t *testing.T) {
	a, b := twoServers(t)
	const n = 1500 // host IDs of 12 bytes: about 19,500 bytes of IDs, three notifications
	var states []store.DesiredState
	waits := make([]<-chan struct{}, n)
	for i := range n {
		host := fmt.Sprintf("host-%07d", i)
		waits[i] = b.WatchDesiredState(host)
		states = append(states, store.DesiredState{HostID: host, Version: "v1", Doc: []byte(`{}`), UpdatedAt: time.UnixMilli(1)})
	}
	other := b.WatchDesiredState("host-other")
	if _, err := a.PutDesiredStates(t.Context(), states, nil); err != nil {
		t.Fatal(err)
	}
	for i, w := range waits {
		if !closedWithin(w, 5*time.Second) {
			t.Fatalf("%s's waiter on B was not woken", states[i].HostID)
		}
	}
	if closedWithin(other, 100*time.Millisecond) {
		t.Fatal("a host outside the write was woken on B")
	}
	if _, err := a.PutDesiredStates(t.Context(), nil, &store.PeerList{Version: "p1", Doc: []byte(`[]`)}); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(other, 5*time.Second) {
		t.Fatal("a new peer list through A did not wake every waiter on B")
	}
}

// The listening connection killed (pg_terminate_backend) while a change is
// made: the notification is lost, and the reconnect wakes every waiter, so
// the long-poll still learns of the change.
func TestAKilledListeningConnectionLosesNoWakeUp(t *testing.T) {
	a, b := twoServers(t)
	for round := range 3 {
		w := b.WatchDesiredState("h1")
		var killed int
		if err := a.pool.QueryRow(t.Context(), `SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = $1 AND datname = current_database()`, listenAppName).Scan(&killed); err != nil || killed != 2 {
			t.Fatalf("terminated %d listening connections (%v), want A's and B's", killed, err)
		}
		if _, err := a.PutDesiredStates(t.Context(), []store.DesiredState{{HostID: "h1", Version: "v" + string(rune('1'+round)),
			Doc: []byte(`{}`), UpdatedAt: time.UnixMilli(1)}}, nil); err != nil {
			t.Fatal(err)
		}
		if !closedWithin(w, 10*time.Second) {
			t.Fatalf("round %d: the waiter on B was never woken after its listening connection was killed", round)
		}
		// Wait for both to listen again before the next round.
		deadline := time.Now().Add(10 * time.Second)
		for {
			var n int
			if err := a.pool.QueryRow(t.Context(), `SELECT COUNT(*) FROM pg_stat_activity
				WHERE application_name = $1 AND datname = current_database()`, listenAppName).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d listening connections came back, want 2", n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// A server paused in the middle of a transaction (here: one that takes a
// row lock and then waits) loses its session after IdleInTransaction, and
// with it the lock: another server's write to that row goes through instead
// of waiting for as long as the first is paused.
func TestAServerIdleInATransactionReleasesItsLocks(t *testing.T) {
	url := pgtest.Shared(t).NewSchema(t)
	paused, err := OpenWith(t.Context(), url, zaptest.NewLogger(t), Options{IdleInTransaction: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer paused.Close()
	other, err := Open(t.Context(), url, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := paused.PutDesiredStates(t.Context(), nil, &store.PeerList{Version: "p1", Doc: []byte(`[]`)}); err != nil {
		t.Fatal(err)
	}
	tx, err := paused.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(t.Context(), `SELECT 1 FROM desired_peers WHERE id = 1 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	// The paused server sends nothing more; the other writes the locked row.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := other.PutDesiredStates(ctx, nil, &store.PeerList{Version: "p2", Doc: []byte(`[]`)}); err != nil {
		t.Fatalf("the other server's write behind the paused one's lock: %v", err)
	}
	t.Logf("the other server's write went through after %v", time.Since(start))
	if err := tx.Commit(t.Context()); err == nil {
		t.Fatal("the paused server's transaction committed after its session should have ended")
	}
	if l, err := other.DesiredPeers(t.Context()); err != nil || l.Version != "p2" {
		t.Fatalf("peers %+v, %v; want the other server's p2", l, err)
	}
}
