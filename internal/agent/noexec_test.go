package agent

import (
	"errors"
	"testing"
)

// The control plane refuses `hatch exec` on a --no-exec host before it
// records one: it learns of --no-exec from every report.
func TestEveryReportSaysTheHostRefusesExec(t *testing.T) {
	f, cp, dir := newFake(t), newFakeControlPlane(), t.TempDir()
	cp.set(desiredState(web(1)))
	cfg := testConfig(t, f, cp, dir)
	cfg.NoExec = true
	startAgent(t, cfg)
	eventually(t, "a report saying --no-exec", func() error {
		if r, n := cp.lastReport(); n == 0 || !r.NoExec {
			return errors.New("no report says no_exec yet")
		}
		return nil
	})
}
