//go:build docker

package e2e

import (
	"bufio"
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// runFirstLineRounds is how many of each are timed.
const runFirstLineRounds = 7

// BenchmarkRunFirstLine is issue 28's figure of `hatch run`: the time from
// starting the CLI to its first line of the command's output (CLI → server:
// recorded, placed, delivered → agent: created, started → its logs session
// → CLI), median and worst over runFirstLineRounds, beside `docker run` of
// the same image and command done in this process through the Engine API
// (create, attach, start, first line), in the same run: hatch/docker is the
// price of a run through the control plane.
func BenchmarkRunFirstLine(b *testing.B) {
	c := newCluster(b, clusterOptions{agents: []string{"a"}})
	image := dockertest.Image(b, dockertest.ImageSpec{})
	file := writeProject(b, map[string]string{"hatch.yaml": strings.ReplaceAll(`project: bench
eggs:
  task:
    image: IMAGE
    pull: missing
    env: {APP_VERSION: bench}
    schedule: {cron: "0 0 1 1 *"}
`, "IMAGE", image)})
	c.mustHatch(nil, "apply", "-f", file+"/hatch.yaml", "--yes")
	for b.Loop() {
		var viaHatch, viaDocker []time.Duration
		for range runFirstLineRounds {
			start := time.Now()
			p := c.start("run", []string{"run", "bench", "task", "--", "-exit", "0"}, nil)
			p.waitLine(b, "job", 60*time.Second)
			viaHatch = append(viaHatch, time.Since(start))
			<-p.done
			viaDocker = append(viaDocker, dockerFirstLine(b, c, image))
		}
		slices.Sort(viaHatch)
		slices.Sort(viaDocker)
		h, d := viaHatch[len(viaHatch)/2], viaDocker[len(viaDocker)/2]
		b.Logf("time to the first line over %d runs: hatch run median %v (worst %v), docker run median %v (worst %v)",
			runFirstLineRounds, h, viaHatch[len(viaHatch)-1], d, viaDocker[len(viaDocker)-1])
		b.ReportMetric(float64(h.Microseconds())/1000, "hatch-p50-ms")
		b.ReportMetric(float64(d.Microseconds())/1000, "docker-p50-ms")
		b.ReportMetric(float64(h)/float64(max(d, time.Microsecond)), "hatch/docker")
	}
}

// dockerFirstLine is `docker run --rm IMAGE -exit 0` until its first line,
// through the Engine API: create (with the scope's labels), attach, start;
// the container is removed after.
func dockerFirstLine(b *testing.B, c *cluster, image string) time.Duration {
	b.Helper()
	ctx, cancel := context.WithTimeout(b.Context(), time.Minute)
	defer cancel()
	start := time.Now()
	created, err := c.scope.Client.ContainerCreate(ctx, &container.Config{Image: image, Cmd: []string{"-exit", "0"},
		Env: []string{"APP_VERSION=bench"}, Labels: c.scope.Labels(nil)}, &container.HostConfig{}, nil, nil, "")
	if err != nil {
		b.Fatal(err)
	}
	// Removed here, as --rm would, but after the timing and before the
	// scope's own sweep: the Engine's auto-remove would race that sweep.
	defer func() {
		_ = c.scope.Client.ContainerRemove(context.WithoutCancel(ctx), created.ID, container.RemoveOptions{Force: true})
	}()
	att, err := c.scope.Client.ContainerAttach(ctx, created.ID, container.AttachOptions{Stream: true, Stdout: true, Stderr: true})
	if err != nil {
		b.Fatal(err)
	}
	defer att.Close()
	if err := c.scope.Client.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		b.Fatal(err)
	}
	pr, pw := io.Pipe()
	go func() {
		_, _ = stdcopy.StdCopy(pw, pw, att.Reader)
		_ = pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "job") {
			return time.Since(start)
		}
	}
	b.Fatal("docker run's container wrote no line")
	return 0
}
