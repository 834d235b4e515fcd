package ingress

import (
	"context"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
)

// benchSetup starts a backend and an ingress routing bench.localhost to it,
// and returns the two URLs to compare: direct and through the ingress.
func benchSetup(b testing.TB) (direct, proxied string) {
	b.Helper()
	in := startIngress(b, func(c *Config) { c.Logger = zap.NewNop(); c.AdminAddr = "" })
	be := newTestBackend(b, "a")
	mustUpdate(b, in, Table{Eggs: []Egg{{Name: "bench", Routes: []Route{{Host: "bench.localhost"}},
		Backends: []Backend{{ContainerID: "a", Addr: be.addr(), Healthy: true}}}}})
	return "http://" + be.addr() + "/", "http://" + in.HTTPAddr().String() + "/"
}

// benchClient returns a client of at most conns connections, closed when
// the benchmark ends (before the ingress, whose Close would otherwise wait
// for connections that never sent a request).
func benchClient(b *testing.B, conns int) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}
	b.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// fetch sends one GET for bench.localhost and reads the whole answer.
func fetch(c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Host = "bench.localhost"
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return &statusError{resp.StatusCode}
	}
	return nil
}

type statusError struct{ code int }

func (e *statusError) Error() string { return http.StatusText(e.code) }

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkAddedLatencyAt500RPS sends 500 requests per second direct to a
// backend and 500 per second through the ingress to the same backend,
// interleaved on one schedule so that both see the same machine, each
// request on its own goroutine at its scheduled time (an open loop). One
// iteration is one second of that schedule. It reports p50 and p99 of both
// paths and the p99 the ingress adds.
func BenchmarkAddedLatencyAt500RPS(b *testing.B) {
	direct, proxied := benchSetup(b)
	const perSecond = 500
	const interval = time.Second / (2 * perSecond) // two paths share the schedule
	clients := [2]*http.Client{benchClient(b, 64), benchClient(b, 64)}
	urls := [2]string{direct, proxied}
	for range 50 { // warm the connection pools
		for p := range 2 {
			if err := fetch(clients[p], urls[p]); err != nil {
				b.Fatal(err)
			}
		}
	}
	var lat [2][]time.Duration
	var mu sync.Mutex // guards lat
	var failures atomic.Int64
	b.ResetTimer()
	for range b.N {
		var wg sync.WaitGroup
		start := time.Now()
		for i := range 2 * perSecond {
			time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
			p := i % 2
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
	slices.Sort(lat[0])
	slices.Sort(lat[1])
	b.ReportMetric(ms(percentile(lat[0], .50)), "direct-p50-ms")
	b.ReportMetric(ms(percentile(lat[0], .99)), "direct-p99-ms")
	b.ReportMetric(ms(percentile(lat[1], .50)), "ingress-p50-ms")
	b.ReportMetric(ms(percentile(lat[1], .99)), "ingress-p99-ms")
	b.ReportMetric(ms(percentile(lat[1], .99)-percentile(lat[0], .99)), "added-p99-ms")
	b.ReportMetric(float64(len(lat[1])), "requests-per-path")
	b.ReportMetric(0, "ns/op") // one iteration is a second of schedule: meaningless
}

// BenchmarkSaturationThroughput drives the backend as hard as 8 keep-alive
// connections can, for one second direct and one second through the ingress
// per iteration (the order alternates), and reports requests per second on
// each path and their ratio, ingress over direct.
func BenchmarkSaturationThroughput(b *testing.B) {
	direct, proxied := benchSetup(b)
	const conns = 8
	const phase = time.Second
	urls := [2]string{direct, proxied}
	var done [2]int64
	var took [2]time.Duration
	b.ResetTimer()
	for iter := range b.N {
		for k := range 2 {
			p := (iter + k) % 2
			c := benchClient(b, conns)
			var n, failures atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			deadline := start.Add(phase)
			for range conns {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(deadline) {
						if err := fetch(c, urls[p]); err != nil {
							failures.Add(1)
							return
						}
						n.Add(1)
					}
				}()
			}
			wg.Wait()
			took[p] += time.Since(start)
			done[p] += n.Load()
			c.CloseIdleConnections()
			if failures.Load() != 0 {
				b.Fatalf("%d requests failed on %s", failures.Load(), urls[p])
			}
		}
	}
	b.StopTimer()
	rps := [2]float64{float64(done[0]) / took[0].Seconds(), float64(done[1]) / took[1].Seconds()}
	b.ReportMetric(rps[0], "direct-req/s")
	b.ReportMetric(rps[1], "ingress-req/s")
	b.ReportMetric(rps[1]/rps[0], "ingress/direct")
	b.ReportMetric(0, "ns/op") // one iteration is two seconds of load: meaningless
}
