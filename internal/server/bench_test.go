package server

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"
)

// BenchmarkLongPollWakeup measures how long a waiting host takes to learn of
// a change: 100 hosts long-poll their desired state, then each host's state
// changes once (one after the other, as an apply touching every host does),
// and each waiter's latency runs from the moment its change is written until
// its response is read. Beside it, in the same run, the round trip of a plain
// request (a desired-state GET answered at once) on the same server and
// client. The target is a wake-up p99 of at most 50 ms.
func BenchmarkLongPollWakeup(b *testing.B) {
	const hosts = 100
	h := newHarness(b, DefaultConfig(), nil)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * hosts}}
	get := func(path string) (int, error) {
		req, _ := http.NewRequest("GET", h.http.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+h.token)
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, err
	}
	versions := make([]string, hosts)
	for i := range hosts {
		versions[i] = h.publish(fmt.Sprintf("h%03d", i), 1, "v0").Version
	}

	var wake, plain []time.Duration
	round := 0
	for b.Loop() {
		round++
		type result struct {
			host int
			at   time.Time
			code int
			err  error
		}
		results := make(chan result, hosts)
		for i := range hosts {
			go func() {
				code, err := get(fmt.Sprintf("/api/v1/hosts/h%03d/desired-state?version=%s&wait=30s", i, versions[i]))
				results <- result{host: i, at: time.Now(), code: code, err: err}
			}()
		}
		for gaugeValue(b, h.srv.metrics.waiters) < hosts {
			time.Sleep(time.Millisecond)
		}
		changedAt := make([]time.Time, hosts)
		for i := range hosts {
			changedAt[i] = time.Now()
			versions[i] = h.publish(fmt.Sprintf("h%03d", i), 1+round, "v").Version
		}
		for range hosts {
			r := <-results
			if r.err != nil || r.code != http.StatusOK {
				b.Fatalf("host %d: %d %v", r.host, r.code, r.err)
			}
			wake = append(wake, r.at.Sub(changedAt[r.host]))
		}
		for i := range hosts {
			start := time.Now()
			if code, err := get(fmt.Sprintf("/api/v1/hosts/h%03d/desired-state?version=old", i)); err != nil || code != 200 {
				b.Fatalf("plain request: %d %v", code, err)
			}
			plain = append(plain, time.Since(start))
		}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	wp50, wp99 := percentile(wake, 50), percentile(wake, 99)
	pp50, pp99 := percentile(plain, 50), percentile(plain, 99)
	b.ReportMetric(ms(wp50), "wake-p50-ms")
	b.ReportMetric(ms(wp99), "wake-p99-ms")
	b.ReportMetric(ms(pp50), "plain-p50-ms")
	b.ReportMetric(ms(pp99), "plain-p99-ms")
	b.ReportMetric(float64(wp99)/float64(pp50), "wake-p99/plain-p50")
	b.ReportMetric(0, "ns/op") // one op is a whole round of 100 changes: the latencies above are the figures
}

// percentile returns the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := (p*len(s) + 99) / 100 // ceil(p/100 * n)
	return s[max(rank, 1)-1]
}
