//go:build docker

package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

// TestJobsTTY runs `hatch run -it` (issue 28 point 1) under a pseudo-terminal,
// as exec's test does: the command's first output, written before any input,
// is seen (its container starts once the terminal is attached), the line
// typed reaches it, the window's size and a resize too, its exit code is the
// CLI's, and its container is removed after. A second run gets Ctrl-C as the
// command's (it ends by its SIGINT, recorded as exited, not as stopped).
func TestJobsTTY(t *testing.T) {
	c := newCluster(t, clusterOptions{agents: []string{"a"}})
	image := dockertest.Image(t, dockertest.ImageSpec{})
	dir := writeProject(t, map[string]string{"hatch.yaml": strings.ReplaceAll(`project: tty
eggs:
  app:
    image: IMAGE
    pull: missing
    port: 8080
    stop_timeout: 1s
`, "IMAGE", image)})
	c.mustHatch(nil, "apply", "-f", filepath.Join(dir, "hatch.yaml"), "--yes")

	start := func(t *testing.T) (*exec.Cmd, *os.File, *screen) {
		return c.startUnderTerminal(t, "run", "tty", "app", "-it", "--", "-prompt")
	}

	t.Run("run -it: the first output, the input, the window size, the exit code", func(t *testing.T) {
		cmd, tty, s := start(t)
		// The first wait covers the run's placement and its container's make.
		promptDialogue(t, "hatch run -it", cmd, tty, s, 60*time.Second)
		if !strings.Contains(s.text(), "bye") {
			t.Errorf("the command's last output is missing:\n%s", s.text())
		}
		c.record(s.text())
		c.noRunContainers(t, "tty")
	})

	t.Run("run -it: Ctrl-C goes to the command, not a stop of the run", func(t *testing.T) {
		cmd, tty, s := start(t)
		s.wait(t, "name? ", 60*time.Second)
		fmt.Fprint(tty, "\x03")
		err := cmd.Wait()
		var exit *exec.ExitError
		// The command's terminal turned Ctrl-C into its SIGINT, on which
		// a Go program (test/app) exits 2; a stop of the run would be 130.
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Fatalf("hatch run -it ended with %v after Ctrl-C, want the command's 2 (its SIGINT); screen:\n%s", err, s.text())
		}
		dockertest.Eventually(t, 30*time.Second, 300*time.Millisecond, func() error {
			out := c.mustHatch(nil, "runs", "tty")
			if !strings.Contains(out, "exited") || strings.Contains(out, "stopped") {
				return fmt.Errorf("the run is not recorded as exited by itself:\n%s", out)
			}
			return nil
		})
		c.noRunContainers(t, "tty")
	})

	t.Run("-i without -t is refused before anything runs", func(t *testing.T) {
		before := c.mustHatch(nil, "runs", "tty")
		out, err := c.hatch(nil, "run", "tty", "app", "-i", "--", "-prompt")
		if err == nil || !strings.Contains(out, "-i and -t go together") {
			t.Fatalf("hatch run -i: %v\n%s", err, out)
		}
		if after := c.mustHatch(nil, "runs", "tty"); after != before {
			t.Fatalf("a refused run was recorded:\n%s\nbefore:\n%s", after, before)
		}
	})
}
