//go:build docker

package docker

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/network"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

// TestCreateAppliesTheSpecInsideTheContainer checks, from inside the running
// container where it can, everything a workload spec asks of its container.
func TestCreateAppliesTheSpecInsideTheContainer(t *testing.T) {
	v := newEnv(t)
	w := v.spec("web")
	w.Env = map[string]string{"APP_VERSION": "v1", "GREETING": "hello-from-env"}
	w.User = "1000:1000"
	w.WorkingDir = "/srv"
	w.ReadOnly = true
	w.Tmpfs = []string{"/tmp"}
	w.CapDrop = []string{"ALL"}
	w.Resources = contract.Resources{MemoryBytes: 64 << 20, NanoCPUs: 5e8, PIDs: 64}
	w.Labels = map[string]string{"team": "payments"}
	w.StopSignal = "SIGUSR1"
	w.StopTimeout = 3 * time.Second
	const secret = "s3cret-value-never-logged"
	w.Secrets = []contract.SecretFile{{Name: "api_key", Handle: "h1", Value: secret}}
	v.start(w, 0, "")
	c := v.waitFor("the container healthy", func(cs []containers.Container) bool { return allHealthy(cs, "web", 1) })[0]

	if code, body := v.get(c.ID, "/env/GREETING"); code != 200 || body != "hello-from-env" {
		t.Errorf("env: %d %q", code, body)
	}
	if _, body := v.get(c.ID, "/whoami"); body != "1000:1000" {
		t.Errorf("user: %q", body)
	}
	if code := v.do("PUT", c.ID, "/file?path=/app-copy", "x"); code == 204 {
		t.Error("wrote to the read-only root file system")
	}
	if code := v.do("PUT", c.ID, "/file?path=/tmp/x", "x"); code != 204 {
		t.Errorf("write to the tmpfs: %d", code)
	}
	_, status := v.get(c.ID, "/file?path=/proc/self/status")
	for _, want := range []string{"NoNewPrivs:\t1", "CapEff:\t0000000000000000"} {
		if !strings.Contains(status, want) {
			t.Errorf("/proc/self/status lacks %q (no-new-privileges, cap_drop ALL)", want)
		}
	}

	// The secret: readable by the container's user at /run/secrets, read-only,
	// a 0400 file on the tmpfs owned by that user, never in a log line.
	if code, body := v.get(c.ID, "/file?path=/run/secrets/api_key"); code != 200 || body != secret {
		t.Errorf("secret read: %d %q", code, body)
	}
	if code := v.do("PUT", c.ID, "/file?path=/run/secrets/api_key", "changed"); code == 204 {
		t.Error("the secret mount is writable")
	}
	hostFile := filepath.Join(v.e.cfg.SecretDir, c.Name, "api_key")
	st, err := os.Stat(hostFile)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o400 || st.Sys().(*syscall.Stat_t).Uid != 1000 {
		t.Errorf("secret file mode %v owner %d", st.Mode().Perm(), st.Sys().(*syscall.Stat_t).Uid)
	}
	if !strings.HasPrefix(hostFile, "/dev/shm/") {
		t.Errorf("secret file %s is not on the tmpfs", hostFile)
	}

	in, err := v.s.Client.ContainerInspect(t.Context(), c.ID)
	if err != nil {
		t.Fatal(err)
	}
	hc := in.HostConfig
	if hc.Memory != 64<<20 || hc.NanoCPUs != 5e8 || hc.PidsLimit == nil || *hc.PidsLimit != 64 {
		t.Errorf("limits: memory %d cpus %d pids %v", hc.Memory, hc.NanoCPUs, hc.PidsLimit)
	}
	if in.Config.StopSignal != "SIGUSR1" || in.Config.StopTimeout == nil || *in.Config.StopTimeout != 3 {
		t.Errorf("stop signal %q timeout %v", in.Config.StopSignal, in.Config.StopTimeout)
	}
	if in.Config.Labels["team"] != "payments" || in.Config.WorkingDir != "/srv" {
		t.Errorf("labels %v working dir %q", in.Config.Labels, in.Config.WorkingDir)
	}

	if err := v.e.Stop(t.Context(), containers.StopRequest{ID: c.ID, StopTimeout: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	v.gone(c.ID)
	v.waitFor("the stop task ended", func(cs []containers.Container) bool { return len(cs) == 0 })
	if _, err := os.Stat(filepath.Dir(hostFile)); !os.IsNotExist(err) {
		t.Errorf("the secret files outlived their container: %v", err)
	}
	if v.logged(secret) || v.logged("hello-from-env") {
		t.Error("a secret or environment value reached the logs")
	}
}

// TestOnlyTheRelayCarriesTheEggsName shows a container created on one
// network and connected to a second before start, and Docker's DNS
// answering an egg's name and aliases, from a consumer on the second, with
// the address of the container that carries them as network aliases (a
// relay) alone: never with the egg's replica, which carries none and is
// reached by its own container name only.
func TestOnlyTheRelayCarriesTheEggsName(t *testing.T) {
	v := newEnv(t)
	api := v.spec("api")
	api.Networks = []string{v.network("front"), v.network("back")}
	api.Aliases = []string{"shop-api"}
	// What the agent makes of a service consumers reach by name: the test
	// app stands for the relay process, which plays no part in DNS.
	relay := v.spec("api.relay-1")
	relay.NetworkAliases = []string{"api", "shop-api"}
	relay.Networks = []string{v.network("back")}
	client := v.spec("client")
	client.Networks = []string{v.network("back")}
	v.start(api, 0, "")
	v.start(relay, 0, "")
	v.start(client, 0, "")
	cs := v.waitFor("all healthy", func(cs []containers.Container) bool {
		return allHealthy(cs, "api", 1) && allHealthy(cs, "api.relay-1", 1) && allHealthy(cs, "client", 1)
	})
	apiC, relayC, clientC := of(cs, "api")[0], of(cs, "api.relay-1")[0], of(cs, "client")[0]
	backIP := func(id string) (string, []string, string) {
		in, err := v.s.Client.ContainerInspect(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		ep := in.NetworkSettings.Networks[v.network("back")]
		if ep == nil {
			t.Fatalf("%s is on %v, not on back", in.Name, in.NetworkSettings.Networks)
		}
		return ep.IPAddress, ep.Aliases, strings.TrimPrefix(in.Name, "/")
	}
	apiIP, apiAliases, apiName := backIP(apiC.ID)
	relayIP, _, _ := backIP(relayC.ID)
	in, err := v.s.Client.ContainerInspect(t.Context(), apiC.ID)
	if err != nil {
		t.Fatal(err)
	}
	if in.NetworkSettings.Networks[v.network("front")] == nil {
		t.Fatalf("api is on %v, want front and back", in.NetworkSettings.Networks)
	}
	for n, ep := range in.NetworkSettings.Networks {
		if slices.Contains(ep.Aliases, "api") || slices.Contains(ep.Aliases, "shop-api") {
			t.Errorf("the replica carries its egg's names on %s: %v", n, ep.Aliases)
		}
	}
	for _, name := range []string{"api", "shop-api"} {
		if code, body := v.get(clientC.ID, "/dns/"+name); code != 200 || body != relayIP {
			t.Errorf("from client, %s resolves to %q (%d), want the relay's address alone, %s (the replica's is %s)", name, body, code, relayIP, apiIP)
		}
	}
	if code, body := v.get(clientC.ID, "/dns/"+apiName); code != 200 || body != apiIP {
		t.Errorf("from client, the replica's own name %s resolves to %q (%d), want %s (aliases %v)", apiName, body, code, apiIP, apiAliases)
	}
	// Networks are the host's: labelled, and pruned once unused and unwanted.
	for _, n := range []string{v.network("front"), v.network("back")} {
		ni, err := v.s.Client.NetworkInspect(t.Context(), n, network.InspectOptions{})
		if err != nil || !containers.Owned(ni.Labels, v.host) {
			t.Errorf("network %s: %v, labels %v", n, err, ni.Labels)
		}
	}
	if err := v.e.Stop(t.Context(), containers.StopRequest{ID: apiC.ID, StopTimeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	v.gone(apiC.ID)
	if err := v.e.PruneNetworks(t.Context(), []string{v.network("default")}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.s.Client.NetworkInspect(t.Context(), v.network("front"), network.InspectOptions{}); err == nil {
		t.Error("an unused, unwanted network was kept")
	}
	if _, err := v.s.Client.NetworkInspect(t.Context(), v.network("back"), network.InspectOptions{}); err != nil {
		t.Errorf("a network in use was pruned: %v", err)
	}
}
