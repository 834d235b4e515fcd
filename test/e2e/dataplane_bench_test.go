//go:build docker

package e2e

import (
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// restartFigures is what the timed load saw in one phase.
type restartFigures struct {
	ok, failed int
	latencies  []time.Duration // sorted
	problems   []string        // the first failures
}

// timedLoad runs loadClients keep-alive clients, each a GET /version through
// the ingress after the other (loadPause apart), while action runs, and
// returns their latencies and failures.
func timedLoad(addr string, action func()) restartFigures {
	var (
		mu  sync.Mutex // guards out
		out restartFigures
		wg  sync.WaitGroup
	)
	stop := make(chan struct{})
	for range loadClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newLoadClient()
			defer c.CloseIdleConnections()
			for {
				select {
				case <-stop:
					return
				default:
				}
				began := time.Now()
				_, err := getThroughIngress(c, addr, "/version")
				took := time.Since(began)
				mu.Lock()
				if err != nil {
					out.failed++
					if len(out.problems) < 5 {
						out.problems = append(out.problems, fmt.Sprintf("%s %v", began.Format("15:04:05.000"), err))
					}
				} else {
					out.ok++
					out.latencies = append(out.latencies, took)
				}
				mu.Unlock()
				time.Sleep(loadPause)
			}
		}()
	}
	action()
	close(stop)
	wg.Wait()
	slices.Sort(out.latencies)
	return out
}

// BenchmarkAgentRestartUnderLoad is the data plane's figures (`make bench`):
// 8 keep-alive clients through the host's ingress while the agent is killed
// (SIGKILL) and started again 5 times, then the same load for as long again
// with nothing happening, in one run. Reports the requests failed in each
// phase and the ratio of their p99 latencies (restarts over none): the
// ingress runs in the data plane, apart from the agent, so a restart should
// cost the load nothing but the restarted agent's CPU. Run with
// -benchtime 1x.
func BenchmarkAgentRestartUnderLoad(b *testing.B) {
	e := newEnv(b, envOptions{noForeign: true})
	e.startJoined()
	addr := e.ingressAddr()
	w := e.routedWorkload(3, "v1", freePort(b))
	e.set(w)
	e.waitIngressServes(ingressTarget{http: addr, tcp: e.publishedAddr(w)}, e.waitServing(w, "v1", time.Minute))
	var restarts, calm restartFigures
	for range b.N {
		began := time.Now()
		restarts = timedLoad(addr, func() {
			for range 5 {
				e.restartAgent(syscall.SIGKILL)
			}
		})
		took := time.Since(began)
		calm = timedLoad(addr, func() { time.Sleep(took) })
	}
	for _, p := range append(restarts.problems, calm.problems...) {
		b.Log(p)
	}
	p99 := func(f restartFigures) float64 { return millis(percentile(f.latencies, .99)) }
	b.ReportMetric(float64(restarts.ok+restarts.failed), "requests-restarts")
	b.ReportMetric(float64(restarts.failed), "failed-restarts")
	b.ReportMetric(float64(calm.ok+calm.failed), "requests-no-restart")
	b.ReportMetric(float64(calm.failed), "failed-no-restart")
	b.ReportMetric(p99(restarts), "restarts-p99-ms")
	b.ReportMetric(p99(calm), "no-restart-p99-ms")
	if p99(calm) > 0 {
		b.ReportMetric(p99(restarts)/p99(calm), "p99-ratio")
	}
	b.ReportMetric(0, "ns/op") // an iteration is two timed phases: its time says nothing
}
