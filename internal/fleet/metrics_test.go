package fleet

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/store"
)

// countingHosts is a host list that counts its reads and can fail them.
type countingHosts struct {
	reads atomic.Int32
	hosts []store.Host
	err   error
}

func (c *countingHosts) ListHosts(context.Context) ([]store.Host, error) {
	c.reads.Add(1)
	time.Sleep(10 * time.Millisecond) // a read long enough for scrapes to meet
	return c.hosts, c.err
}

// hatch_hosts is read from the store at most every hostsCacheFor, however
// many scrapes come at once, and is missing (not stale) while the store
// cannot be read.
func TestHostsMetricReadsTheStoreOnceForAStormOfScrapes(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	hosts := &countingHosts{hosts: []store.Host{{ID: "a", State: store.HostUp}, {ID: "b", State: store.HostUp}, {ID: "c", State: store.HostDown}}}
	m := newHostsMetric(hosts, clock, zaptest.NewLogger(t))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)

	var scrapes sync.WaitGroup
	for range 20 {
		scrapes.Go(func() {
			if got := hostCounts(t, reg); len(got) != 3 || got["up"] != 2 || got["down"] != 1 || got["unknown"] != 0 {
				t.Errorf("a scrape gave %v, want 2 up, 1 down, 0 unknown", got)
			}
		})
	}
	scrapes.Wait()
	if n := hosts.reads.Load(); n != 1 {
		t.Fatalf("20 scrapes at once read the store %d times, want once", n)
	}

	mu.Lock()
	now = now.Add(hostsCacheFor)
	mu.Unlock()
	hosts.err = errors.New("connection refused")
	if got := hostCounts(t, reg); len(got) != 0 {
		t.Fatalf("with the store unreadable: %v, want no figure", got)
	}
	if n := hosts.reads.Load(); n != 2 {
		t.Fatalf("the store was read %d times, want again once the count aged", n)
	}
}

// hostCounts is hatch_hosts by state, as reg gathers it.
func hostCounts(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Error(err)
		return nil
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if f.GetName() == "hatch_hosts" {
				out[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}
