package server

import (
	"context"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the server's own Prometheus collectors, on a registry of its
// own (no global state: two servers in one test process do not meet).
type metrics struct {
	registry *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	waiters  prometheus.Gauge
	// authFailures counts tokens refused (401); authLimited failed attempts
	// answered 429 because their address failed too often.
	authFailures prometheus.Counter
	authLimited  prometheus.Counter
}

// newMetrics makes the server's collectors, with the services' own.
func newMetrics(blobs BlobStore, services ...prometheus.Collector) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hatch_http_requests_total",
			Help: "API requests by route and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hatch_http_request_duration_seconds",
			Help:    "API request durations by route (long-polls and streams included).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"route"}),
		waiters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hatch_longpoll_waiters",
			Help: "Desired-state long-polls waiting for a change.",
		}),
		authFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hatch_auth_failures_total",
			Help: "Requests refused for a missing or invalid token (401).",
		}),
		authLimited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hatch_auth_rate_limited_total",
			Help: "Failed authentications answered 429 because their address failed too often.",
		}),
	}
	m.registry.MustRegister(services...)
	m.registry.MustRegister(m.requests, m.duration, m.waiters, m.authFailures, m.authLimited,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "hatch_blob_bytes",
			Help: "Bytes of stored blobs.",
		}, func() float64 { return blobBytes(blobs) }),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// blobBytes sizes the stored blobs for a scrape, which waits for it: a store
// in a database that does not answer within a second reports NaN (unknown).
func blobBytes(blobs BlobStore) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	n, err := blobs.Bytes(ctx)
	if err != nil {
		return math.NaN()
	}
	return float64(n)
}
