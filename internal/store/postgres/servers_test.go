package postgres

import (
	"slices"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/store/storetest"
)

func TestServerRegistryConformance(t *testing.T) {
	storetest.RunServerRegistry(t, func(t *testing.T) store.ServerRegistry { return openCallerClock(t) })
}

// Servers register by the database's clock: a server whose own clock is an
// hour behind (or a day ahead) still registers for the term asked from the
// database's now, and its registration still expires.
func TestServerRegistrationsAreMeasuredByTheDatabaseClock(t *testing.T) {
	s := openTemp(t)
	ctx := t.Context()
	behind := time.Now().Add(-time.Hour)
	if err := s.RegisterServer(ctx, "a", "https://a:7700", 30*time.Second, behind); err != nil {
		t.Fatal(err)
	}
	if err := s.RegisterServer(ctx, "b", "https://b:7700", 300*time.Millisecond, time.Now().Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	got, err := s.LiveServers(ctx, time.Now().Add(48*time.Hour)) // a caller's clock far ahead changes nothing
	if err != nil || !slices.Equal(got, []string{"https://a:7700", "https://b:7700"}) {
		t.Fatalf("LiveServers = %v, %v; want both, by the database's clock", got, err)
	}
	time.Sleep(time.Second)
	got, err = s.LiveServers(ctx, behind)
	if err != nil || !slices.Equal(got, []string{"https://a:7700"}) {
		t.Fatalf("LiveServers a second later = %v, %v; want a only (b's 300 ms are over)", got, err)
	}
}
