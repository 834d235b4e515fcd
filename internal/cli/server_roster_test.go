package cli

import (
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/agent"
	"github.com/hatchery/hatchery/internal/pki"
)

func TestAdvertiseURL(t *testing.T) {
	const local = "https://10.0.0.5:7700"
	for _, c := range []struct {
		flag, listen, want, err string
	}{
		{listen: "10.0.0.5:7700", want: local}, // a specific address: this machine's URL
		{listen: ":7700", want: ""},            // every interface: not registered
		{listen: "0.0.0.0:7700", want: ""},     // the same
		{flag: "https://a.example:7700/", listen: ":7700", want: "https://a.example:7700"},
		{flag: "a.example:7700", listen: ":7700", err: "want https://host:port"},
		{flag: "https://a.example:7700/api", listen: ":7700", err: "want https://host:port"},
		{flag: "https://user@a.example:7700", listen: ":7700", err: "want https://host:port"},
	} {
		got, err := advertiseURL(c.flag, c.listen, local)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "--advertise-url") {
				t.Errorf("advertiseURL(%q, %q) = %q, %v; want an error naming --advertise-url", c.flag, c.listen, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("advertiseURL(%q, %q) = %q, %v; want %q", c.flag, c.listen, got, err, c.want)
		}
	}
}

// A restarted agent may be given any URL of its control plane (one the
// live list named since the join too); a URL of none is refused.
func TestAnAgentRestartedWithAnotherServerOfItsControlPlane(t *testing.T) {
	dir := t.TempDir()
	fp := strings.Repeat("ab", 32)
	id := agent.Identity{Server: "https://a:7700", Servers: []string{"https://a:7700", "https://b:7700"}, HostID: "h1",
		Token: pki.NewToken(pki.KindHost, fp).String(), CAFingerprint: fp}
	if err := agent.SaveIdentity(dir, id, nil); err != nil {
		t.Fatal(err)
	}
	log := zaptest.NewLogger(t)
	for _, server := range []string{"", "https://b:7700", "https://c:7700,https://a:7700"} {
		got, err := ensureIdentity(t.Context(), agentOptions{DataDir: dir, Server: server}, log)
		if err != nil || got.HostID != "h1" {
			t.Errorf("--server %q: %v, %v; want the kept identity", server, got.HostID, err)
		}
	}
	if _, err := ensureIdentity(t.Context(), agentOptions{DataDir: dir, Server: "https://c:7700"}, log); err == nil ||
		!strings.Contains(err.Error(), "belongs to server") {
		t.Fatalf("--server of another control plane: %v, want a refusal", err)
	}
}
