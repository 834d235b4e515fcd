//go:build docker

package e2e

import (
	"slices"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/testutil/dockertest"
	"github.com/hatchery/hatchery/internal/testutil/registrytest"
)

// movedTagRounds is how many moves of the tag are timed.
const movedTagRounds = 5

// BenchmarkMovedTagToEveryHost is issue 29's figure of pinned images: the
// time from `hatch apply` of a tag just pushed anew (two images taking
// turns under it, each host already having both) to every host of two
// running the new digest, median and worst over movedTagRounds; and the
// time of `hatch plan` alone, the registry asked for the digest included.
func BenchmarkMovedTagToEveryHost(b *testing.B) {
	c := newCluster(b, clusterOptions{})
	reg := registrytest.Start(b)
	c.keepSecret(reg.Password)
	env := []string{"REG_USER=" + reg.Username, "REG_PASS=" + reg.Password}
	images := []string{
		dockertest.Image(b, dockertest.ImageSpec{Env: map[string]string{"APP_VERSION": "pin-1"}}),
		dockertest.Image(b, dockertest.ImageSpec{Env: map[string]string{"APP_VERSION": "pin-2"}}),
	}
	ids := make([]string, len(images))
	for i, img := range images {
		in, err := c.scope.Client.ImageInspect(b.Context(), img)
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = in.ID
	}
	repoPath := "hatchtest/pin-bench-" + dockertest.RunID()
	repo := reg.Host + "/" + repoPath
	ref, _ := reg.PushDigest(b, c.scope.Client, images[0], repoPath+":main")
	file := pinProject(b, ref, reg.Host)
	c.mustHatch(env, "apply", "-f", file, "--yes")
	for b.Loop() {
		var applies, plans []time.Duration
		for round := range movedTagRounds {
			next := (round + 1) % len(images)
			_, digest := reg.PushDigest(b, c.scope.Client, images[next], repoPath+":main")
			began := time.Now()
			c.mustHatch(env, "plan", "-f", file)
			plans = append(plans, time.Since(began))
			began = time.Now()
			c.mustHatch(env, "apply", "-f", file, "--yes")
			dockertest.Eventually(b, time.Minute, 20*time.Millisecond, func() error {
				return c.pinnedRun(b).runsDigest(repo, digest, ids[next])
			})
			applies = append(applies, time.Since(began))
		}
		slices.Sort(applies)
		slices.Sort(plans)
		a, p := applies[len(applies)/2], plans[len(plans)/2]
		b.Logf("a moved tag's apply to 2 of 2 hosts on the new digest over %d moves: median %v (worst %v); hatch plan alone: median %v (worst %v)",
			movedTagRounds, a, applies[len(applies)-1], p, plans[len(plans)-1])
		b.ReportMetric(float64(a.Microseconds())/1000, "apply-to-every-host-p50-ms")
		b.ReportMetric(float64(p.Microseconds())/1000, "plan-p50-ms")
	}
}
