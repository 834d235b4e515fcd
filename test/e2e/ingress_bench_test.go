//go:build docker

package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The ingress's figures on the real Docker Engine (`make bench`, not CI):
// the same container, in the same run, asked directly on its bridge address
// and through the agent's ingress on loopback, so that the difference is
// what the ingress costs. Run with -benchtime 1x: one iteration is a whole
// measurement.

// ingressPaths are the two ways to the same container's GET /version.
type ingressPaths [2]struct {
	name string
	url  string
	host string // the Host header; empty for the URL's own
}

// pathDirect is the baseline; pathVia the path under test (through the
// ingress here, through the mesh in netcluster_bench_test.go).
const (
	pathDirect = 0
	pathVia    = 1
)

// ingressBenchEnv starts an agent running one replica of the routed test
// app and returns the direct and ingress paths to it. The agent converges on
// the production default timer (30 s), not the tests' 2 s: a timer converge
// is a burst of Docker calls whose tail would land on both paths, but more
// on the one through the agent's process.
func ingressBenchEnv(b *testing.B) ingressPaths {
	b.Helper()
	e := newEnv(b, envOptions{noForeign: true, convergeInterval: 30 * time.Second})
	e.startJoined()
	addr := e.ingressAddr()
	w := e.routedWorkload(1, "v1", freePort(b))
	e.set(w)
	c := e.waitServing(w, "v1", time.Minute)[0]
	e.waitIngressServes(ingressTarget{http: addr, tcp: e.publishedAddr(w)}, []observed{c})
	var p ingressPaths
	p[pathDirect].name, p[pathDirect].url = "direct", "http://"+c.IP+":8080/version"
	p[pathVia].name, p[pathVia].url, p[pathVia].host = "ingress", "http://"+addr+"/version", routeHost
	return p
}

// benchClient is a client of up to conns keep-alive connections, closed
// when the benchmark ends.
func benchClient(b *testing.B, conns int) *http.Client {
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true}
	b.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Timeout: loadTimeout, Transport: tr}
}

// percentile of sorted durations, by the nearest-rank method.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(float64(len(sorted))*p+0.999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkIngressAddedLatencyAt500RPS sends 500 requests per second to the
// container directly and 500 per second through the ingress, interleaved on
// one schedule (a request every millisecond, alternating) so both paths see
// the same machine at the same moments; each request starts at its
// scheduled time on its own goroutine, whatever the others do (an open
// loop, so a slow answer cannot hide the ones queued behind it). One
// iteration is 5 windows of 2 s (1,000 requests per path each). Reports p50
// and p99 of each path over all windows; the p99 the ingress adds (target
// ≤ 1 ms), ingress p99 minus direct p99 over all windows; and the median
// over the windows of each window's added p99 (added-p99-window-median-ms),
// which one burst of someone else's work on a shared machine cannot own the
// way it can own the pooled tail.
func BenchmarkIngressAddedLatencyAt500RPS(b *testing.B) {
	measureAddedLatency(b, ingressBenchEnv(b), 500).report(b)
}

// latencyFigures are measureAddedLatency's: each path's latencies over all
// windows, sorted, and each window's added p99, sorted.
type latencyFigures struct {
	via   string // paths[pathVia].name, which names the metrics
	all   [2][]time.Duration
	added []time.Duration
}

// measureAddedLatency is BenchmarkIngressAddedLatencyAt500RPS's
// measurement on any two paths, at perSecond requests a second on each. It
// resets the benchmark's timer, and with it the metrics reported so far:
// report them after.
func measureAddedLatency(b *testing.B, paths ingressPaths, perSecond int) latencyFigures {
	const window = 2 * time.Second
	const windows = 5
	clients := [2]*http.Client{benchClient(b, 64), benchClient(b, 64)}
	warmUp(b, paths, clients)
	f := latencyFigures{via: paths[pathVia].name}
	b.ResetTimer()
	for range b.N {
		for range windows {
			lat, err := openLoop(paths, clients, perSecond, window)
			if err != nil {
				b.Fatal(err)
			}
			for p := range paths {
				slices.Sort(lat[p])
				f.all[p] = append(f.all[p], lat[p]...)
			}
			f.added = append(f.added, percentile(lat[pathVia], .99)-percentile(lat[pathDirect], .99))
		}
	}
	b.StopTimer()
	slices.Sort(f.all[pathDirect])
	slices.Sort(f.all[pathVia])
	slices.Sort(f.added)
	return f
}

// addedP99 is the via path's p99 minus direct's, over all windows.
func (f latencyFigures) addedP99() time.Duration {
	return percentile(f.all[pathVia], .99) - percentile(f.all[pathDirect], .99)
}

func (f latencyFigures) report(b *testing.B) {
	d, in := f.all[pathDirect], f.all[pathVia]
	b.ReportMetric(float64(len(in)), "requests/path")
	b.ReportMetric(millis(percentile(d, .50)), "direct-p50-ms")
	b.ReportMetric(millis(percentile(d, .99)), "direct-p99-ms")
	b.ReportMetric(millis(percentile(in, .50)), f.via+"-p50-ms")
	b.ReportMetric(millis(percentile(in, .99)), f.via+"-p99-ms")
	b.ReportMetric(millis(f.addedP99()), "added-p99-ms")
	b.ReportMetric(millis(percentile(f.added, .50)), "added-p99-window-median-ms")
	b.ReportMetric(0, "ns/op") // an iteration is 10 s of schedule: its time says nothing
}

// warmUp opens connections on both paths, several at once, so that the
// measurement does not pay for the handshakes its concurrency needs.
func warmUp(b *testing.B, paths ingressPaths, clients [2]*http.Client) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 8 {
		for p := range paths {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					if _, err := send(clients[p], http.MethodGet, paths[p].url, paths[p].host, ""); err != nil {
						errs <- fmt.Errorf("warm-up %s: %w", paths[p].name, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// openLoop sends perSecond requests a second on each path for d, as
// described at BenchmarkIngressAddedLatencyAt500RPS, and returns each
// path's latencies; any failed request is an error.
func openLoop(paths ingressPaths, clients [2]*http.Client, perSecond int, d time.Duration) ([2][]time.Duration, error) {
	interval := time.Second / time.Duration(2*perSecond)
	var mu sync.Mutex // guards lat
	var lat [2][]time.Duration
	var failed [2]atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range int(d / interval) {
		time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
		p := i % 2
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			if _, err := send(clients[p], http.MethodGet, paths[p].url, paths[p].host, ""); err != nil {
				failed[p].Add(1)
				return
			}
			took := time.Since(t0)
			mu.Lock()
			lat[p] = append(lat[p], took)
			mu.Unlock()
		}()
	}
	wg.Wait()
	for p := range paths {
		if n := failed[p].Load(); n != 0 {
			return lat, fmt.Errorf("%d of %d requests failed on the %s path", n, int64(len(lat[p]))+n, paths[p].name)
		}
	}
	return lat, nil
}

// BenchmarkIngressSaturationThroughput drives the container as hard as 8
// keep-alive connections can, each sending its next request as soon as the
// last one is answered: 2 s directly, 2 s through the ingress, twice, the
// order swapped the second time so that a drift of the machine's load
// weighs on both paths alike. Reports requests per second on each path and
// ingress over direct (target ≥ 0.25).
func BenchmarkIngressSaturationThroughput(b *testing.B) {
	measureThroughput(b, ingressBenchEnv(b)).report(b)
}

// throughputFigures are measureThroughput's: requests answered on each
// path, and the time they took.
type throughputFigures struct {
	via  string // paths[pathVia].name, which names the metrics
	done [2]int64
	took [2]time.Duration
}

// measureThroughput is BenchmarkIngressSaturationThroughput's measurement
// on any two paths. It resets the benchmark's timer, and with it the
// metrics reported so far: report them after.
func measureThroughput(b *testing.B, paths ingressPaths) throughputFigures {
	const conns = 8
	const phase = 2 * time.Second
	f := throughputFigures{via: paths[pathVia].name}
	b.ResetTimer()
	for range b.N {
		for round := range 2 {
			for k := range 2 {
				p := (round + k) % 2
				n, d, err := saturate(b, paths[p].url, paths[p].host, conns, phase)
				if err != nil {
					b.Fatalf("%s path: %v", paths[p].name, err)
				}
				f.done[p] += n
				f.took[p] += d
			}
		}
	}
	b.StopTimer()
	return f
}

func (f throughputFigures) rate(p int) float64 { return float64(f.done[p]) / f.took[p].Seconds() }

// ratio is the via path's requests a second over direct's.
func (f throughputFigures) ratio() float64 { return f.rate(pathVia) / f.rate(pathDirect) }

func (f throughputFigures) report(b *testing.B) {
	b.ReportMetric(float64(f.done[pathVia]), f.via+"-requests")
	b.ReportMetric(f.rate(pathDirect), "direct-req/s")
	b.ReportMetric(f.rate(pathVia), f.via+"-req/s")
	b.ReportMetric(f.ratio(), f.via+"/direct")
	b.ReportMetric(0, "ns/op") // an iteration is 8 s of load: its time says nothing
}

// saturate runs conns closed-loop clients against url for d and returns the
// requests answered and the time they took; any failure is an error.
func saturate(b *testing.B, url, host string, conns int, d time.Duration) (int64, time.Duration, error) {
	c := benchClient(b, conns)
	defer c.CloseIdleConnections()
	var n atomic.Int64
	var mu sync.Mutex // guards firstErr
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if _, err := send(c, http.MethodGet, url, host, ""); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	return n.Load(), time.Since(start), firstErr
}
