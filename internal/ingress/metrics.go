package ingress

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the ingress's Prometheus series. Per-request accounting goes to
// children resolved once per egg (eggMetrics), so a request costs a few
// atomic adds, not label lookups; gauges are computed when scraped.
type metrics struct {
	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	retries      *prometheus.CounterVec
	dialFailures *prometheus.CounterVec
	tcpConns     *prometheus.CounterVec
	tcpRejected  *prometheus.CounterVec
	unrouted     prometheus.Counter
	redirects    prometheus.Counter
	challenges   prometheus.Counter
	tlsUnknown   prometheus.Counter
}

// Status classes counted per egg: the response's class, or aborted when the
// client went away before a response.
const (
	class1xx = iota
	class2xx
	class3xx
	class4xx
	class5xx
	classAborted
	numClasses
)

var classNames = [numClasses]string{"1xx", "2xx", "3xx", "4xx", "5xx", "aborted"}

// eggMetrics are one egg's children of the metrics' vectors.
type eggMetrics struct {
	requests     [numClasses]prometheus.Counter
	duration     prometheus.Observer
	retries      prometheus.Counter
	dialFailures prometheus.Counter
	tcpConns     prometheus.Counter
	tcpRejected  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, in *Ingress) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hatch_ingress_http_requests_total",
			Help: "HTTP requests routed to an egg, by response class (aborted: the client left first).",
		}, []string{"egg", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hatch_ingress_http_request_duration_seconds",
			Help:    "Time from routing an HTTP request to the end of its response.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"egg"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hatch_ingress_http_retries_total",
			Help: "HTTP requests sent again to another backend after the first one gave no response.",
		}, []string{"egg"}),
		dialFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hatch_ingress_backend_dial_failures_total",
			Help: "Failed connection attempts to an egg's backends (each ejects the backend).",
		}, []string{"egg"}),
		tcpConns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hatch_ingress_tcp_connections_total",
			Help: "Connections on published ports forwarded to a backend.",
		}, []string{"egg"}),
		tcpRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hatch_ingress_tcp_rejected_total",
			Help: "Connections on published ports closed because no backend could take them.",
		}, []string{"egg"}),
		unrouted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hatch_ingress_unrouted_requests_total",
			Help: "HTTP requests for a host and path no egg serves (answered 404).",
		}),
		redirects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hatch_ingress_https_redirects_total",
			Help: "Plain HTTP requests for TLS routes redirected to HTTPS.",
		}),
		challenges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hatch_ingress_acme_challenges_total",
			Help: "ACME HTTP-01 challenge requests answered.",
		}),
		tlsUnknown: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hatch_ingress_tls_unknown_name_total",
			Help: "TLS handshakes for a name without a certificate (refused).",
		}),
	}
	reg.MustRegister(m.requests, m.duration, m.retries, m.dialFailures, m.tcpConns, m.tcpRejected, m.unrouted,
		m.redirects, m.challenges, m.tlsUnknown,
		&stateCollector{in: in})
	return m
}

func (m *metrics) forEgg(name string) *eggMetrics {
	em := &eggMetrics{
		duration:     m.duration.WithLabelValues(name),
		retries:      m.retries.WithLabelValues(name),
		dialFailures: m.dialFailures.WithLabelValues(name),
		tcpConns:     m.tcpConns.WithLabelValues(name),
		tcpRejected:  m.tcpRejected.WithLabelValues(name),
	}
	for c, class := range classNames {
		em.requests[c] = m.requests.WithLabelValues(name, class)
	}
	return em
}

// dropEgg removes a removed egg's series so that gone eggs do not pile up.
func (m *metrics) dropEgg(name string) {
	match := prometheus.Labels{"egg": name}
	m.requests.DeletePartialMatch(match)
	m.duration.DeletePartialMatch(match)
	m.retries.DeletePartialMatch(match)
	m.dialFailures.DeletePartialMatch(match)
	m.tcpConns.DeletePartialMatch(match)
	m.tcpRejected.DeletePartialMatch(match)
}

func (em *eggMetrics) countStatus(code int) {
	c := code/100 - 1
	if c < class1xx || c > class5xx {
		c = class5xx
	}
	em.requests[c].Inc()
}

var (
	backendsDesc = prometheus.NewDesc("hatch_ingress_backends",
		"Backends of an egg by state: ready (in the pool), ejected (a dial failed), draining, unhealthy; remote_ready and remote_ejected count the other hosts running it.",
		[]string{"egg", "state"}, nil)
	inflightDesc = prometheus.NewDesc("hatch_ingress_in_flight",
		"Requests and TCP connections open to an egg's backends.",
		[]string{"egg"}, nil)
	heldDesc = prometheus.NewDesc("hatch_ingress_held",
		"Requests and TCP connections waiting for a stateful egg's replica to come back (a roll's or a restart's gap).",
		[]string{"egg"}, nil)
)

// stateCollector reports the pool's state at scrape time.
type stateCollector struct{ in *Ingress }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- backendsDesc
	ch <- inflightDesc
	ch <- heldDesc
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.in.Status() {
		for _, st := range []struct {
			name string
			n    int
		}{{"ready", s.Ready}, {"ejected", s.Ejected}, {"draining", s.Draining}, {"unhealthy", s.Unhealthy},
			{"remote_ready", s.RemoteReady}, {"remote_ejected", s.RemoteEjected}} {
			ch <- prometheus.MustNewConstMetric(backendsDesc, prometheus.GaugeValue, float64(st.n), s.Egg, st.name)
		}
		ch <- prometheus.MustNewConstMetric(inflightDesc, prometheus.GaugeValue, float64(s.InFlight), s.Egg)
		ch <- prometheus.MustNewConstMetric(heldDesc, prometheus.GaugeValue, float64(s.Held), s.Egg)
	}
}
