package postgres

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/testutil/pgtest"
)

// PostgreSQL killed: reads and writes fail with store.ErrUnavailable (the
// API answers 503), nothing hangs; once it is back the store works again
// without being reopened, and its listening connection, back too, wakes the
// waiters that may have missed a change.
func TestADatabaseKilledIsUnavailableThenServesAgain(t *testing.T) {
	pgtest.Shared(t) // skips without PostgreSQL, as every test here
	c, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	s, err := Open(t.Context(), c.URL("postgres"), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.PutStatus(t.Context(), "h1", []byte(`{}`), time.UnixMilli(1)); err != nil {
		t.Fatal(err)
	}
	waiter := s.WatchDesiredState("h1")
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ListHosts(t.Context()); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("ListHosts with the database down: %v, want ErrUnavailable", err)
	}
	if _, err := s.PutStatus(t.Context(), "h1", []byte(`{}`), time.UnixMilli(2)); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("PutStatus with the database down: %v, want ErrUnavailable", err)
	}
	if err := c.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := s.PutStatus(t.Context(), "h1", []byte(`{}`), time.UnixMilli(3))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store did not come back: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if h, err := s.Host(t.Context(), "h1"); err != nil || h.LastSeen != time.UnixMilli(3).UTC() {
		t.Fatalf("after the restart: %+v, %v", h, err)
	}
	select {
	case <-waiter:
	case <-time.After(20 * time.Second):
		t.Fatal("the listening connection, back, did not wake the waiter")
	}
}
