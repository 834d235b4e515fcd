package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

// NotifyCursorStore is what the notifications' cursor suite exercises: the
// cursor, the event log it points into and the loops' lease that fences it.
type NotifyCursorStore interface {
	store.NotifyCursor
	store.Events
	store.Leases
}

// RunNotifyCursor checks the notifications' cursor: it starts at the log's
// end, keeps what was set, and a move made under the loops' lease lost is
// refused.
func RunNotifyCursor(t *testing.T, open func(t *testing.T) NotifyCursorStore) {
	t.Run("a cursor never set is the newest event's seq, 0 for an empty log", func(t *testing.T) {
		s := open(t)
		if got, err := s.NotifyCursor(ctx(t)); err != nil || got != 0 {
			t.Fatalf("NotifyCursor of an empty log = %d, %v; want 0", got, err)
		}
		var last int64
		for range 3 {
			seq, err := s.AppendEvent(ctx(t), store.Event{Time: t0, Type: store.EventRolloutDone})
			if err != nil {
				t.Fatal(err)
			}
			last = seq
		}
		if got, err := s.NotifyCursor(ctx(t)); err != nil || got != last {
			t.Fatalf("NotifyCursor = %d, %v; want the newest seq %d", got, err, last)
		}
	})
	t.Run("a cursor set is kept, whatever is recorded after it", func(t *testing.T) {
		s := open(t)
		first, err := s.AppendEvent(ctx(t), store.Event{Time: t0, Type: store.EventRolloutDone})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SetNotifyCursor(ctx(t), first); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AppendEvent(ctx(t), store.Event{Time: t0, Type: store.EventRolloutDone}); err != nil {
			t.Fatal(err)
		}
		if got, err := s.NotifyCursor(ctx(t)); err != nil || got != first {
			t.Fatalf("NotifyCursor = %d, %v; want %d as set", got, err, first)
		}
	})
	t.Run("a move under the loops' lease taken over is refused and changes nothing", func(t *testing.T) {
		s := open(t)
		now := time.Now()
		if _, err := s.AcquireLease(ctx(t), lease(store.LoopsLease, "loops-a", "background loops", "srv-a", now, time.Minute)); err != nil {
			t.Fatal(err)
		}
		fenced := store.WithFence(ctx(t), store.Fence{Project: store.LoopsLease, Token: "loops-a"})
		if err := s.SetNotifyCursor(fenced, 5); err != nil {
			t.Fatalf("a move under the loops' lease held: %v", err)
		}
		if _, err := s.AcquireLease(ctx(t), lease(store.LoopsLease, "loops-b", "background loops", "srv-b", now.Add(2*time.Minute), time.Minute)); err != nil {
			t.Fatal(err)
		}
		if err := s.SetNotifyCursor(fenced, 9); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("a move under the loops' lease lost: %v, want ErrFenced", err)
		}
		if got, err := s.NotifyCursor(ctx(t)); err != nil || got != 5 {
			t.Fatalf("NotifyCursor = %d, %v; want 5, the refused move not kept", got, err)
		}
	})
}
