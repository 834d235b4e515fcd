package jobs

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hatchery/hatchery/internal/contract"
)

func TestTheLastSuccessOfAScheduledEggIsAGauge(t *testing.T) {
	onStores(t, func(t *testing.T, h *harness) {
		h.report(t, "h1")
		h.egg(t, "report", scheduled(map[string]any{"every": "1s"}))
		h.pass(t)
		if got := gauges(t, h.svc.Collector()); len(got) != 0 {
			t.Fatalf("gauges before any run: %v", got)
		}
		h.tickAhead()
		h.pass(t)
		runs := h.runs(t)
		if len(runs) != 1 {
			t.Fatalf("runs: %+v", runs)
		}
		ended := time.UnixMilli(1_800_000_000_000).UTC()
		h.report(t, "h1", contract.RunStatus{ID: runs[0].ID, State: contract.RunExited, EndedAt: ended})
		h.pass(t)
		got := gauges(t, h.svc.Collector())
		if len(got) != 1 || got["default/shop/report"] != 1.8e9 {
			t.Fatalf("gauges %v, want default/shop/report at 1.8e9", got)
		}
	})
}

// gauges gathers hatch_job_last_success_timestamp_seconds by
// namespace/project/egg.
func gauges(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "hatch_job_last_success_timestamp_seconds" {
			t.Fatalf("metric %s", f.GetName())
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out[labels["namespace"]+"/"+labels["project"]+"/"+labels["egg"]] = m.GetGauge().GetValue()
		}
	}
	return out
}
