package jobs

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/resource"
)

// metricsReadTimeout bounds the store read behind a scrape.
const metricsReadTimeout = 5 * time.Second

// lastSuccessMetric is hatch_job_last_success_timestamp_seconds: when
// each scheduled egg's last run that exited 0 ended, read from the store
// when scraped, so every server gives the same figure whichever runs the
// scheduler. An alert on "too long ago" catches a schedule that stopped
// succeeding or stopped running.
type lastSuccessMetric struct {
	desc *prometheus.Desc
	s    *Service
}

// Collector returns the jobs' metrics, for the server's /metrics.
func (s *Service) Collector() prometheus.Collector {
	return &lastSuccessMetric{s: s, desc: prometheus.NewDesc("hatch_job_last_success_timestamp_seconds",
		"When the last scheduled (or fired) run of each egg that exited 0 ended, in Unix seconds.",
		[]string{"namespace", "project", "egg"}, nil)}
}

func (m *lastSuccessMetric) Describe(ch chan<- *prometheus.Desc) { ch <- m.desc }

// Collect gives one gauge per egg, none while the store cannot be read.
func (m *lastSuccessMetric) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), metricsReadTimeout)
	defer cancel()
	last, err := m.s.deps.Runs.LastSuccesses(ctx)
	if err != nil {
		m.s.log.Warn("hatch_job_last_success_timestamp_seconds not read", zap.Error(err))
		return
	}
	for project, eggs := range last {
		ns, name, err := resource.SplitProject(project)
		if err != nil {
			continue
		}
		for egg, at := range eggs {
			ch <- prometheus.MustNewConstMetric(m.desc, prometheus.GaugeValue, float64(at.UnixMilli())/1000, ns, name, egg)
		}
	}
}
