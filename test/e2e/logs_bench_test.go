//go:build docker

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// logLatencyReplicas write logLatencyRate lines a second each, the rate of
// the figure (1,000 lines/s per replica).
const (
	logLatencyReplicas = 2
	logLatencyRate     = 1000
	logLatencyWindow   = 5 * time.Second
)

// BenchmarkLogLatency is the time from a container writing a line to `hatch
// logs -f` printing it (container → Docker → agent → server → CLI), p99 at
// 1,000 lines/s per replica, beside the same for Docker's own follow of the
// same containers' logs (what `docker logs -f` does, read in this process),
// measured in the same run: hatch/docker is the price of the path through
// the agent and the control plane. Each line carries its write time; both
// readers stamp its arrival on the same clock.
func BenchmarkLogLatency(b *testing.B) {
	c := newCluster(b, clusterOptions{agents: []string{"a"}})
	a := c.agents["a"]
	bin, err := dockertest.Binary("./test/app")
	if err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		b.Fatal(err)
	}
	dir := writeProject(b, map[string]string{
		"hatch.yaml": fmt.Sprintf(`project: lat
eggs:
  app:
    build: ./app
    replicas: %d
    port: 8080
    env: {APP_VERSION: v1, APP_TICK: %s, APP_TICK_STAMP: "1"}
    health: {http: /healthz, interval: 1s, timeout: 1s}
    stop_timeout: 2s
`, logLatencyReplicas, time.Second/logLatencyRate),
		"app/Dockerfile": netAppImage.Dockerfile(),
	})
	if err := os.WriteFile(filepath.Join(dir, "app", "app"), data, 0o755); err != nil {
		b.Fatal(err)
	}
	c.mustHatch(nil, "apply", "-f", filepath.Join(dir, "hatch.yaml"), "--yes")
	running := c.projectContainers("default", "lat", "app", a.hostID)
	if len(running) != logLatencyReplicas {
		b.Fatalf("%d replicas run, want %d", len(running), logLatencyReplicas)
	}

	for range b.N {
		logs := c.start("logs", []string{"logs", "lat", "-f", "--tail", "0"}, nil)
		ctx, cancel := context.WithCancel(b.Context())
		direct := &stampedLines{}
		var wg sync.WaitGroup
		for _, ct := range running {
			wg.Go(func() { direct.follow(ctx, b, c, ct.ID) })
		}
		logs.waitLine(b, "tick v1", 30*time.Second)
		from := time.Now().Add(time.Second) // past both readers' start
		time.Sleep(time.Second + logLatencyWindow)
		to := time.Now()
		cancel()
		wg.Wait()
		logs.stop(b)

		var viaHatch []time.Duration
		logs.mu.Lock()
		for _, l := range logs.lines {
			if d, ok := lineLatency(l.text, l.at, from, to); ok {
				viaHatch = append(viaHatch, d)
			}
		}
		logs.mu.Unlock()
		viaDocker := direct.latencies(from, to)
		// The replicas' tickers fall behind 1 ms on a loaded machine: half
		// the rate still measures something; fewer lines would not. Every
		// line Docker gave must have come through hatch logs too.
		want := int(float64(logLatencyReplicas*logLatencyRate) * logLatencyWindow.Seconds() / 2)
		if len(viaDocker) < want || len(viaHatch) < len(viaDocker) {
			b.Fatalf("%d lines through hatch logs and %d through Docker in %v, want at least %d, and as many through hatch",
				len(viaHatch), len(viaDocker), logLatencyWindow, want)
		}
		h, d := p99(viaHatch), p99(viaDocker)
		b.Logf("log latency p99 over %v, %d replicas each ticking every %v: hatch logs -f %v (%d lines, median %v), docker's follow %v (%d lines, median %v)",
			logLatencyWindow, logLatencyReplicas, time.Second/logLatencyRate, h, len(viaHatch), median(viaHatch), d, len(viaDocker), median(viaDocker))
		b.ReportMetric(float64(h.Microseconds())/1000, "hatch-p99-ms")
		b.ReportMetric(float64(d.Microseconds())/1000, "docker-p99-ms")
		b.ReportMetric(float64(h)/float64(max(d, time.Microsecond)), "hatch/docker")
		b.ReportMetric(float64(len(viaHatch))/logLatencyWindow.Seconds(), "lines/s")
	}
}

// lineLatency reads a tick line's write time (its last field, Unix
// nanoseconds) and returns how long it took to arrive at at, for lines
// written within [from, to).
func lineLatency(text string, at, from, to time.Time) (time.Duration, bool) {
	i := strings.Index(text, "tick v1 ")
	if i < 0 {
		return 0, false
	}
	fields := strings.Fields(text[i:])
	if len(fields) != 4 {
		return 0, false
	}
	ns, err := strconv.ParseInt(fields[3], 10, 64)
	if err != nil {
		return 0, false
	}
	written := time.Unix(0, ns)
	if written.Before(from) || !written.Before(to) {
		return 0, false
	}
	return at.Sub(written), true
}

// stampedLines are lines read from Docker, with the time each arrived.
type stampedLines struct {
	mu    sync.Mutex // guards lines
	lines []clLine
}

// follow reads a container's log from now on, as `docker logs -f --tail 0`
// does, until ctx ends.
func (s *stampedLines) follow(ctx context.Context, b *testing.B, c *cluster, id string) {
	rc, err := c.scope.Client.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Follow: true, Tail: "0"})
	if err != nil {
		b.Errorf("docker logs of %s: %v", id[:12], err)
		return
	}
	defer rc.Close()
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, pw, rc)
		pw.CloseWithError(err)
	}()
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		at := time.Now()
		s.mu.Lock()
		s.lines = append(s.lines, clLine{at: at, text: sc.Text()})
		s.mu.Unlock()
	}
}

func (s *stampedLines) latencies(from, to time.Time) []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []time.Duration
	for _, l := range s.lines {
		if d, ok := lineLatency(l.text, l.at, from, to); ok {
			out = append(out, d)
		}
	}
	return out
}

func p99(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)*99/100]
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
