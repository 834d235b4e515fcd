package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/store"
)

// OpenRegistry returns a new, empty store for one test of RunServerRegistry.
type OpenRegistry func(t *testing.T) store.ServerRegistry

// RunServerRegistry is the suite of store.ServerRegistry, on the caller's
// clock.
func RunServerRegistry(t *testing.T, open OpenRegistry) {
	t0 := time.UnixMilli(1_700_000_000_000)
	live := func(t *testing.T, s store.ServerRegistry, at time.Time, want ...string) {
		t.Helper()
		got, err := s.LiveServers(t.Context(), at)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("LiveServers at %v = %v, want %v", at.Sub(t0), got, want)
		}
	}
	t.Run("registrations live for their term, renewed from each registration", func(t *testing.T) {
		s := open(t)
		live(t, s, t0)
		must(t, s.RegisterServer(t.Context(), "b", "https://b:7700", 10*time.Second, t0))
		must(t, s.RegisterServer(t.Context(), "a", "https://a:7700", 10*time.Second, t0))
		live(t, s, t0, "https://a:7700", "https://b:7700")
		must(t, s.RegisterServer(t.Context(), "a", "https://a:7700", 10*time.Second, t0.Add(5*time.Second)))
		live(t, s, t0.Add(10*time.Second), "https://a:7700") // b's term ended; a renewed
		live(t, s, t0.Add(15*time.Second))
	})
	t.Run("a server registering again may change its URL; two at one URL are listed once", func(t *testing.T) {
		s := open(t)
		must(t, s.RegisterServer(t.Context(), "a", "https://old:7700", time.Minute, t0))
		must(t, s.RegisterServer(t.Context(), "a", "https://a:7700", time.Minute, t0))
		must(t, s.RegisterServer(t.Context(), "a2", "https://a:7700", time.Minute, t0))
		live(t, s, t0, "https://a:7700")
	})
	t.Run("an unregistered server is gone at once", func(t *testing.T) {
		s := open(t)
		must(t, s.RegisterServer(t.Context(), "a", "https://a:7700", time.Minute, t0))
		must(t, s.RegisterServer(t.Context(), "b", "https://b:7700", time.Minute, t0))
		must(t, s.UnregisterServer(t.Context(), "a"))
		must(t, s.UnregisterServer(t.Context(), "nobody"))
		live(t, s, t0, "https://b:7700")
	})
	t.Run("a registration needs an ID, a URL and a term", func(t *testing.T) {
		s := open(t)
		for _, c := range []struct {
			id, url string
			ttl     time.Duration
		}{{"", "https://a", time.Second}, {"a", "", time.Second}, {"a", "https://a", 0}} {
			if err := s.RegisterServer(t.Context(), c.id, c.url, c.ttl, t0); err == nil {
				t.Errorf("RegisterServer(%q, %q, %v) = nil, want an error", c.id, c.url, c.ttl)
			}
		}
		live(t, s, t0)
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
