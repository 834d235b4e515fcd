package ingress

import (
	"crypto/tls"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/testutil/testca"
)

// tlsBenchSetup is benchSetup with an HTTPS listener serving a certificate
// for bench.localhost, and a client config trusting it.
func tlsBenchSetup(b *testing.B) (direct, plain, secure string, cfg *tls.Config) {
	b.Helper()
	ca := testca.New(b, "ingress test CA")
	in := startIngress(b, func(c *Config) { c.Logger = zap.NewNop(); c.AdminAddr = ""; c.HTTPSAddr = "127.0.0.1:0" })
	be := newTestBackend(b, "a")
	chain, key := ca.Leaf(b, 2, "bench.localhost")
	mustUpdate(b, in, Table{Eggs: []Egg{{Name: "bench", Routes: []Route{{Host: "bench.localhost"}},
		Backends: []Backend{{ContainerID: "a", Addr: be.addr(), Healthy: true}}}},
		Certificates: []Certificate{{Host: "bench.localhost", Chain: chain, Key: key}}})
	return "http://" + be.addr() + "/", "http://" + in.HTTPAddr().String() + "/", "https://" + in.HTTPSAddr().String() + "/",
		&tls.Config{ServerName: "bench.localhost", RootCAs: ca.Pool}
}

// BenchmarkHTTPSAddedLatencyAt500RPS is BenchmarkAddedLatencyAt500RPS with
// a third path, HTTPS (HTTP/2) through the ingress, all three at 500
// requests per second on one interleaved schedule over reused
// connections. It reports each path's p99, what each ingress path adds to
// the direct one, and the HTTPS figure's ratio to its bound (1 ms).
func BenchmarkHTTPSAddedLatencyAt500RPS(b *testing.B) {
	direct, plain, secure, cfg := tlsBenchSetup(b)
	const perSecond = 500
	const paths = 3
	const interval = time.Second / (paths * perSecond)
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 64}
	b.Cleanup(tr.CloseIdleConnections)
	clients := [paths]*http.Client{benchClient(b, 64), benchClient(b, 64), {Transport: tr}}
	urls := [paths]string{direct, plain, secure}
	for range 50 {
		for p := range paths {
			if err := fetch(clients[p], urls[p]); err != nil {
				b.Fatal(err)
			}
		}
	}
	var lat [paths][]time.Duration
	var mu sync.Mutex // guards lat
	var failures atomic.Int64
	b.ResetTimer()
	for range b.N {
		var wg sync.WaitGroup
		start := time.Now()
		for i := range paths * perSecond {
			time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
			p := i % paths
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				if err := fetch(clients[p], urls[p]); err != nil {
					failures.Add(1)
					return
				}
				d := time.Since(t0)
				mu.Lock()
				lat[p] = append(lat[p], d)
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	b.StopTimer()
	if failures.Load() != 0 {
		b.Fatalf("%d requests failed", failures.Load())
	}
	for p := range paths {
		slices.Sort(lat[p])
	}
	p99 := func(p int) time.Duration { return percentile(lat[p], .99) }
	b.ReportMetric(ms(p99(0)), "direct-p99-ms")
	b.ReportMetric(ms(p99(1)), "http-p99-ms")
	b.ReportMetric(ms(p99(2)), "https-p99-ms")
	b.ReportMetric(ms(p99(1)-p99(0)), "http-added-p99-ms")
	b.ReportMetric(ms(p99(2)-p99(0)), "https-added-p99-ms")
	b.ReportMetric(ms(p99(2)-p99(0))/1.0, "https-added/bound")
	b.ReportMetric(0, "ns/op") // one iteration is a second of schedule: meaningless
}

// BenchmarkHTTPSHandshakeRate opens a new connection for every request,
// from 8 goroutines for one second on each path: plain HTTP through the
// ingress (a TCP handshake each) and HTTPS (a full TLS handshake each, no
// session resumption). It reports requests per second on both and their
// ratio.
func BenchmarkHTTPSHandshakeRate(b *testing.B) {
	_, plain, secure, cfg := tlsBenchSetup(b)
	cfg.ClientSessionCache = nil
	run := func(url string, tlsCfg *tls.Config) float64 {
		var n, failures atomic.Int64
		deadline := time.Now().Add(time.Second)
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					tr := &http.Transport{TLSClientConfig: tlsCfg, DisableKeepAlives: true}
					if err := fetch(&http.Client{Transport: tr}, url); err != nil {
						failures.Add(1)
					} else {
						n.Add(1)
					}
					tr.CloseIdleConnections()
				}
			}()
		}
		wg.Wait()
		if failures.Load() != 0 {
			b.Fatalf("%d requests to %s failed", failures.Load(), url)
		}
		return float64(n.Load())
	}
	var rates [2]float64
	b.ResetTimer()
	for range b.N {
		rates[0] += run(plain, nil)
		rates[1] += run(secure, cfg)
	}
	b.StopTimer()
	b.ReportMetric(rates[0]/float64(b.N), "http-new-conn-req/s")
	b.ReportMetric(rates[1]/float64(b.N), "https-handshakes/s")
	b.ReportMetric(rates[1]/rates[0], "https/http")
	b.ReportMetric(0, "ns/op") // one iteration is two seconds of load: meaningless
}
