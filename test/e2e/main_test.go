//go:build docker

// Package e2e holds Hatchery's end-to-end scenarios on the real Docker
// Engine: a `hatch agent` process (the real binary) against a control plane
// played by an HTTPS test server, converging containers of the test
// application (test/app, built FROM scratch by the harness). Each test
// checks the containers itself, through the Docker API and HTTP requests to
// the containers, never through the agent's own health monitor or status.
//
// Run with `go test -tags docker -p 1 ./test/e2e/`. Every object a test
// creates carries the run and scope labels of internal/testutil/dockertest
// and is removed by them when the test ends.
package e2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/hatchery/hatchery/internal/testutil/dockertest"
	"github.com/hatchery/hatchery/internal/testutil/netcluster"
)

// TestMain first removes what killed runs of the many-hosts harness left
// (namespaces, links, rules, engines), then runs the tests.
func TestMain(m *testing.M) {
	if err := netcluster.Sweep(); err != nil {
		fmt.Fprintln(os.Stderr, "netcluster: sweep:", err)
		os.Exit(1)
	}
	os.Exit(dockertest.Main(m))
}
