//go:build docker

package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// The figures of the CLI's closing note (`make bench`, not CI): each
// benchmark is one measurement on the real binary and Docker Engine; run
// with -benchtime 1x.

// BenchmarkApplyConfirmToConverge: the median over 20 applies of the time
// from the confirmation (the plan's last line, after which `apply --yes`
// goes on at once) to the agent taking the new desired state to converge to
// it (its "new desired state" log line), both seen by the test as they
// arrive. Target ≤ 100 ms.
func BenchmarkApplyConfirmToConverge(b *testing.B) {
	for range b.N {
		c := newCluster(b, clusterOptions{agents: []string{"a"}})
		file := filepath.Join(spreadProject(b, "bench", 1, "    labels: {n: \"${env.BENCH_N}\"}\n"), "hatch.yaml")
		c.mustHatch([]string{"BENCH_N=0"}, "apply", "-f", file, "--yes")
		agent := c.agents["a"].proc
		var took []time.Duration
		for i := 1; i <= 20; i++ {
			p := c.start(fmt.Sprintf("apply-%d", i), []string{"apply", "-f", file, "--yes", "--no-wait"}, []string{"BENCH_N=" + strconv.Itoa(i)})
			confirmed, err := p.waitLineAfter(" to create, ", time.Time{}, time.Minute)
			if err != nil {
				b.Fatalf("apply %d: %v\n%s", i, err, p.stdout())
			}
			converging, err := agent.waitLineAfter(`"new desired state"`, confirmed.at, time.Minute)
			if err != nil {
				b.Fatalf("apply %d: %v", i, err)
			}
			<-p.done
			if !p.cmd.ProcessState.Success() {
				b.Fatalf("apply %d failed:\n%s", i, p.stdout())
			}
			took = append(took, converging.at.Sub(confirmed.at))
		}
		slices.Sort(took)
		median := (took[9] + took[10]) / 2
		b.ReportMetric(float64(median.Microseconds())/1000, "median-ms")
		b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "max-ms")
		b.ReportMetric(median.Seconds()/0.1, "median/target")
	}
}

// BenchmarkUpToFirstAnswer: `hatch up` of the demo, with the binaries built
// (the apps' contexts never built by this Engine before), to its first
// answer through the ingress. Target ≤ 60 s.
func BenchmarkUpToFirstAnswer(b *testing.B) {
	for range b.N {
		u := newUpRun(b, demoProject(b, "nonce "+randomWord()))
		took, up := u.upToFirstAnswer(3 * time.Minute)
		b.ReportMetric(took.Seconds(), "s")
		b.ReportMetric(took.Seconds()/60, "s/target")
		u.hatch("destroy", "demo", "--yes", "--volumes")
		interrupt(b, up)
	}
}
