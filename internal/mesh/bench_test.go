package mesh

import (
	"context"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"
)

// The figures the mesh is held to: at 500 requests a second, the p99 it
// adds to a request/response over an open connection is at most 1 ms, and
// over 8 connections it carries at least half the bytes a direct connection
// does. Both are measured here against a direct TCP connection to the same
// workload, in the same run, interleaved so that both see the same machine.
//
//	go test -run '^$' -bench MeshAgainstDirect ./internal/mesh
const (
	benchRate        = 500 // requests a second, for each of mesh and direct
	benchConns       = 8
	benchRequests    = 2000 // for each of mesh and direct
	benchRequestSize = 128
	benchTransfer    = 64 << 20 // bytes read by each of the 8 connections
)

const shopSource = "default/shop/source"

// source writes benchTransfer bytes and closes.
func source(c net.Conn) {
	defer c.Close()
	buf := make([]byte, copyBuffer)
	for left := benchTransfer; left > 0; left -= len(buf) {
		if _, err := c.Write(buf[:min(left, len(buf))]); err != nil {
			return
		}
	}
}

func BenchmarkMeshAgainstDirect(b *testing.B) {
	p := newPair(b, shopWeb, shopSource)
	p.dialer.add(b, shopWeb, echo)
	p.dialer.add(b, shopSource, source)
	web := Workload{"default", "shop", "web"}
	src := Workload{"default", "shop", "source"}
	dialMesh := func(w Workload) func() (net.Conn, error) {
		return func() (net.Conn, error) { return p.client.DialWorkload(context.Background(), "h-srv", w) }
	}
	dialDirect := func(w Workload) func() (net.Conn, error) {
		return func() (net.Conn, error) { return p.dialer.DialWorkload(context.Background(), w) }
	}

	for range b.N {
		// Latency: request/response on open connections, both paths at
		// 500 req/s at once.
		var direct, mesh []time.Duration
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); direct = paced(b, dialDirect(web)) }()
		go func() { defer wg.Done(); mesh = paced(b, dialMesh(web)) }()
		wg.Wait()
		// Connection setup: a new connection per request (dial, one round
		// trip, close), as a proxy opening one per client connection.
		directOpen := opens(b, dialDirect(web))
		meshOpen := opens(b, dialMesh(web))
		// Throughput over 8 connections.
		directRate := throughput(b, dialDirect(src))
		meshRate := throughput(b, dialMesh(src))

		b.ReportMetric(us(pct(direct, 50)), "direct-p50-µs")
		b.ReportMetric(us(pct(mesh, 50)), "mesh-p50-µs")
		b.ReportMetric(us(pct(direct, 99)), "direct-p99-µs")
		b.ReportMetric(us(pct(mesh, 99)), "mesh-p99-µs")
		b.ReportMetric(us(pct(mesh, 99)-pct(direct, 99)), "added-p99-µs")
		b.ReportMetric(us(pct(directOpen, 99)), "direct-open-p99-µs")
		b.ReportMetric(us(pct(meshOpen, 99)), "mesh-open-p99-µs")
		b.ReportMetric(directRate/1e6, "direct-MB/s")
		b.ReportMetric(meshRate/1e6, "mesh-MB/s")
		b.ReportMetric(meshRate/directRate, "mesh/direct-throughput")
	}
}

// paced sends benchRequests requests at benchRate a second spread over
// benchConns open connections, and returns each one's round-trip time.
func paced(b *testing.B, dial func() (net.Conn, error)) []time.Duration {
	per := benchRequests / benchConns
	interval := time.Second * benchConns / benchRate
	out := make([][]time.Duration, benchConns)
	var wg sync.WaitGroup
	for i := range benchConns {
		conn, err := dial()
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close()
			req, resp := make([]byte, benchRequestSize), make([]byte, benchRequestSize)
			// Staggered, so that the requests of all connections make an
			// even rate.
			time.Sleep(interval * time.Duration(i) / benchConns)
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for range per {
				<-tick.C
				start := time.Now()
				if _, err := conn.Write(req); err != nil {
					b.Error(err)
					return
				}
				if _, err := io.ReadFull(conn, resp); err != nil {
					b.Error(err)
					return
				}
				out[i] = append(out[i], time.Since(start))
			}
		}()
	}
	wg.Wait()
	return slices.Concat(out...)
}

// opens makes 500 connections one after the other, each carrying one round
// trip, and returns how long each took, dial included.
func opens(b *testing.B, dial func() (net.Conn, error)) []time.Duration {
	var out []time.Duration
	buf := make([]byte, benchRequestSize)
	for range 500 {
		start := time.Now()
		conn, err := dial()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := conn.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(conn, buf); err != nil {
			b.Fatal(err)
		}
		out = append(out, time.Since(start))
		conn.Close()
		time.Sleep(time.Second / benchRate)
	}
	return out
}

// throughput reads benchTransfer bytes on each of benchConns connections at
// once and returns the bytes a second of all of them.
func throughput(b *testing.B, dial func() (net.Conn, error)) float64 {
	conns := make([]net.Conn, benchConns)
	for i := range conns {
		c, err := dial()
		if err != nil {
			b.Fatal(err)
		}
		conns[i] = c
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			if n, err := io.Copy(io.Discard, c); err != nil || n != benchTransfer {
				b.Errorf("read %d bytes, %v", n, err)
			}
		}()
	}
	wg.Wait()
	return float64(benchConns*benchTransfer) / time.Since(start).Seconds()
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
