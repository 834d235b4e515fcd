package roster

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/store/sqlite"
)

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Two servers on one store list each other; one that stops is dropped at
// once, one that dies (stops renewing) once its TTL is over.
func TestServersListEachOtherAndDropOut(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "hatch.db"), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	start := func(id, url string) *Roster {
		cfg := DefaultConfig()
		cfg.ID, cfg.URL, cfg.Logger = id, url, zaptest.NewLogger(t)
		cfg.Interval, cfg.TTL = 50*time.Millisecond, 500*time.Millisecond
		r, err := New(cfg, st)
		if err != nil {
			t.Fatal(err)
		}
		r.Start(t.Context())
		return r
	}
	a := start("a", "https://a:7700")
	defer a.Close(t.Context())
	b := start("b", "https://b:7700")
	c := start("c", "https://c:7700")
	aList, aChanged := a.Servers()
	if got, _ := c.Servers(); !slices.Equal(got, []string{"https://a:7700", "https://b:7700", "https://c:7700"}) {
		t.Fatalf("c's first list = %v: a server lists those registered before it at once", got)
	}
	eventually(t, "a lists all three", func() bool { got, _ := a.Servers(); return len(got) == 3 })
	select {
	case <-aChanged:
	default:
		t.Fatalf("a's list changed from %v without a signal", aList)
	}
	if err := b.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a drops b, which stopped", func() bool {
		got, _ := a.Servers()
		return slices.Equal(got, []string{"https://a:7700", "https://c:7700"})
	})
	// c dies: it stops renewing without unregistering.
	c.cancel()
	<-c.done
	eventually(t, "a drops c once its registration expired", func() bool {
		got, _ := a.Servers()
		return slices.Equal(got, []string{"https://a:7700"})
	})
}

func TestConfigIsChecked(t *testing.T) {
	cfg := DefaultConfig()
	cfg.TTL = cfg.Interval
	if _, err := New(cfg, nil); err == nil {
		t.Fatal("a roster without an ID, a logger, a registry and with a TTL no longer than its interval was made")
	}
}
