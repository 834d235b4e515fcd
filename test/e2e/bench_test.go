//go:build docker

package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// The figures of the agent's closing note (`make bench`, not CI). Each
// benchmark is one measurement; run with -benchtime 1x.

// BenchmarkKillToHealthy: median over 10 fresh eggs of `docker kill` to
// running and healthy again (target ≤ 2 s), with the timer converge off so
// only the events stream and the health monitor drive it.
func BenchmarkKillToHealthy(b *testing.B) {
	for range b.N {
		e := newEnv(b, envOptions{convergeInterval: 10 * time.Minute, noForeign: true})
		e.startJoined()
		var eggs []contract.WorkloadSpec
		var took []time.Duration
		for i := range 10 {
			w := e.workload(fmt.Sprintf("k%d", i), 1, "v1")
			eggs = append(eggs, w)
			e.set(eggs...)
			took = append(took, e.killToHealthy(w, 30*time.Second))
		}
		slices.Sort(took)
		median := (took[4] + took[5]) / 2
		b.ReportMetric(median.Seconds(), "median-s")
		b.ReportMetric(took[len(took)-1].Seconds(), "max-s")
		b.ReportMetric(median.Seconds()/2, "median/target")
	}
}

// BenchmarkRollThreeReplicas: the time to roll 3 replicas (from the new
// desired state to every slot serving the new version; the median of 3
// rolls), against the bound 3 × one container's start-to-healthy time
// measured in the same run (the median of 3 starts). Target ratio ≤ 1.2.
func BenchmarkRollThreeReplicas(b *testing.B) {
	for range b.N {
		e := newEnv(b, envOptions{noForeign: true})
		e.startJoined()
		var starts []time.Duration
		var solos []contract.WorkloadSpec
		for i := range 3 {
			solo := e.workload(fmt.Sprintf("solo%d", i), 1, "v1")
			began := time.Now()
			e.set(append(slices.Clone(solos), solo)...)
			e.waitAllSlotsServe(solo, "v1", time.Minute) // polled as the rolls are
			starts = append(starts, time.Since(began))
			e.waitServing(solo, "v1", time.Minute)
			solos = append(solos, solo)
		}
		slices.Sort(starts)
		start := starts[1]

		// Three rolls, v1 to v2 to v3 to v4: the median is the figure.
		w := e.workload("web", 3, "v1")
		e.set(append(slices.Clone(solos), w)...)
		e.waitServing(w, "v1", time.Minute)
		var rolls []time.Duration
		for v := 2; v <= 4; v++ {
			version := fmt.Sprintf("v%d", v)
			w = withEnv(w, "APP_VERSION", version)
			began := time.Now()
			e.set(append(slices.Clone(solos), w)...)
			e.waitAllSlotsServe(w, version, 2*time.Minute)
			rolls = append(rolls, time.Since(began))
			e.waitServing(w, version, time.Minute) // and the old ones are gone
		}
		slices.Sort(rolls)
		roll := rolls[1]

		b.ReportMetric(start.Seconds(), "start-to-healthy-s")
		b.ReportMetric(roll.Seconds(), "roll-3-s")
		b.ReportMetric(roll.Seconds()/(3*start.Seconds()), "roll/3xstart")
	}
}

// waitAllSlotsServe waits until every slot of w has a healthy container of
// w's spec answering version (old containers may still be draining).
func (e *env) waitAllSlotsServe(w contract.WorkloadSpec, version string, timeout time.Duration) {
	e.t.Helper()
	hash := contract.SpecHash(w)
	dockertest.Eventually(e.t, timeout, 20*time.Millisecond, func() error {
		ctx := context.Background()
		cs, err := e.containers(ctx, &w)
		if err != nil {
			return err
		}
		for slot := range w.Replicas {
			ok := slices.ContainsFunc(cs, func(c observed) bool {
				if c.Slot != slot || c.SpecHash != hash || !healthy(ctx, c) {
					return false
				}
				_, v, err := get(ctx, c.IP, "/version")
				return err == nil && v == version
			})
			if !ok {
				return fmt.Errorf("slot %d does not serve %s yet", slot, version)
			}
		}
		return nil
	})
}

// BenchmarkIdleAgent: the agent's resident memory and CPU with 30 containers
// under management, idle (default timer, probes every 2 s), measured over
// 20 s. Target RSS ≤ 40 MB.
func BenchmarkIdleAgent(b *testing.B) {
	for range b.N {
		e := newEnv(b, envOptions{convergeInterval: 30 * time.Second, noForeign: true})
		e.startJoined()
		var ws []contract.WorkloadSpec
		for i := range 10 {
			w := e.workload(fmt.Sprintf("idle%d", i), 3, "v1")
			w.Health.Interval, w.Health.Timeout = 2*time.Second, time.Second
			ws = append(ws, w)
		}
		e.set(ws...)
		for _, w := range ws {
			e.waitServing(w, "v1", 3*time.Minute)
		}
		time.Sleep(5 * time.Second) // let the converges after the starts settle
		pid := e.agent.pid()
		cpu0, err := cpuTime(pid)
		if err != nil {
			b.Fatal(err)
		}
		const window = 20 * time.Second
		var peak int64
		for deadline := time.Now().Add(window); time.Now().Before(deadline); time.Sleep(time.Second) {
			rss, err := rssBytes(pid)
			if err != nil {
				b.Fatal(err)
			}
			peak = max(peak, rss)
		}
		cpu1, err := cpuTime(pid)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(peak)/(1<<20), "rss-MB")
		b.ReportMetric(100*(cpu1-cpu0).Seconds()/window.Seconds(), "cpu-%")
		b.ReportMetric(float64(peak)/(40<<20), "rss/target")
	}
}

// rssBytes reads a process's resident set size from /proc.
func rssBytes(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// cpuTime reads a process's user plus system CPU time from /proc (in clock
// ticks of 1/100 s, as Linux reports them on these machines).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces; fields start after its ')'.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat: %v %v", pid, err1, err2)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}
