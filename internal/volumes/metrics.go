package volumes

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

// lastSuccessDesc is the metric of each volume's last good backup: an
// alert on its age sees a backup that fails for a day.
var lastSuccessDesc = prometheus.NewDesc("hatch_volume_backup_last_success_timestamp_seconds",
	"When the last good backup of each volume ended (Unix seconds).", []string{"namespace", "project", "volume"}, nil)

// lastSuccessMetric reads the records at each scrape.
type lastSuccessMetric struct{ s *Service }

// Collector is the service's metrics, served on /metrics.
func (s *Service) Collector() prometheus.Collector { return s.metrics }

func (m *lastSuccessMetric) Describe(ch chan<- *prometheus.Desc) { ch <- lastSuccessDesc }

func (m *lastSuccessMetric) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := m.s.deps.Tasks.ListVolumeTasks(ctx, store.VolumeTaskFilter{Kind: string(contract.TaskBackup), Forgotten: true})
	if err != nil {
		m.s.log.Sugar().Warnw("volume backup metric not read", "error", err)
		return
	}
	last := map[[2]string]time.Time{}
	for _, t := range list {
		k := [2]string{t.Project, t.Volume}
		if t.State == store.TaskDone && t.EndedAt.After(last[k]) {
			last[k] = t.EndedAt
		}
	}
	for k, at := range last {
		ns, proj, err := resource.SplitProject(k[0])
		if err != nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(lastSuccessDesc, prometheus.GaugeValue, float64(at.UnixMilli())/1000, ns, proj, k[1])
	}
}
