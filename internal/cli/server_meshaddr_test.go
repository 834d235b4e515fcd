package cli

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/agent"
	"github.com/hatchery/hatchery/internal/contract"
)

// `hatch server` listening on loopback shares its machine with its agents
// (`hatch up`, the tests' agents): it takes their loopback mesh addresses,
// as it learns from its own listener, and still refuses an address no peer
// may dial, 400 with the reason (issue 24, finding 8).
func TestHatchServerOnLoopbackTakesItsAgentsLoopbackMeshAddresses(t *testing.T) {
	isolate(t)
	srv := startServer(t, "--data-dir", t.TempDir())
	code, joinToken, errOut := run(t, "token", "create", "--join", "--ttl", "10m")
	if code != 0 {
		t.Fatalf("hatch token create --join = %d %s", code, errOut)
	}
	joined, err := agent.Join(t.Context(), srv.url, strings.TrimSpace(joinToken), "local", nil)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := agent.NewHTTPClient(joined.Identity)
	if err != nil {
		t.Fatal(err)
	}
	report := func(addrs ...string) error {
		return cp.ReportStatus(t.Context(), contract.StatusReport{HostID: joined.Identity.HostID, Time: time.Now(), MeshAddresses: addrs})
	}
	if err := report("127.0.0.1:7702"); err != nil {
		t.Fatalf("a loopback mesh address to a server on loopback: %v", err)
	}
	var apiErr *agent.APIError
	if err := report("169.254.169.254:80"); !errors.As(err, &apiErr) || apiErr.StatusCode != 400 ||
		!strings.Contains(err.Error(), "link-local") {
		t.Fatalf("a link-local mesh address: %v, want 400 naming the rule", err)
	}
}
