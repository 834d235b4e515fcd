package fleet

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/store"
)

// hostsCacheFor is how long a count of the hosts by state serves scrapes:
// a storm of them reads the store once a while, not once each.
const hostsCacheFor = 2 * time.Second

// hostsReadTimeout bounds the store read behind a scrape.
const hostsReadTimeout = 5 * time.Second

// hostsMetric is hatch_hosts, the hosts by liveness state, counted from the
// store when scraped: the states are the store's (reports and the liveness
// monitor write them), so every server's /metrics gives the same figures,
// whichever of them runs the loops.
type hostsMetric struct {
	desc  *prometheus.Desc
	hosts store.HostList
	now   func() time.Time
	log   *zap.Logger

	// mu guards read and counts, and is held while the store is read, so
	// that scrapes arriving meanwhile wait for that one read.
	mu   sync.Mutex
	read time.Time
	// counts are the hosts by state as of read; nil if that read failed.
	counts map[store.HostState]int
}

func newHostsMetric(hosts store.HostList, now func() time.Time, log *zap.Logger) *hostsMetric {
	return &hostsMetric{
		desc: prometheus.NewDesc("hatch_hosts",
			"Hosts by liveness state, as the store has them (read at most every 2 s); the same on every server.",
			[]string{"state"}, nil),
		hosts: hosts, now: now, log: log,
	}
}

func (m *hostsMetric) Describe(ch chan<- *prometheus.Desc) { ch <- m.desc }

// Collect gives one gauge per state, none while the store cannot be read
// (a figure missing rather than a stale one).
func (m *hostsMetric) Collect(ch chan<- prometheus.Metric) {
	for state, n := range m.count() {
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.GaugeValue, float64(n), string(state))
	}
}

// count returns the hosts by state, read again once the last read is older
// than hostsCacheFor.
func (m *hostsMetric) count() map[store.HostState]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if age := now.Sub(m.read); !m.read.IsZero() && age >= 0 && age < hostsCacheFor {
		return m.counts
	}
	ctx, cancel := context.WithTimeout(context.Background(), hostsReadTimeout)
	defer cancel()
	m.read, m.counts = now, nil
	hosts, err := m.hosts.ListHosts(ctx)
	if err != nil {
		m.log.Warn("hatch_hosts not counted: the hosts were not read", zap.Error(err))
		return nil
	}
	m.counts = map[store.HostState]int{store.HostUp: 0, store.HostDown: 0, store.HostUnknown: 0}
	for _, h := range hosts {
		m.counts[h.State]++
	}
	return m.counts
}
