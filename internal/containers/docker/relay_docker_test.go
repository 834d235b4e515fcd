//go:build docker

package docker

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/relay"
	"github.com/hatchery/hatchery/internal/testutil/dockertest"
	"github.com/hatchery/hatchery/internal/testutil/listentest"
)

// The relay image is built from the hatch binary on first use (nothing
// pulled), and a relay started from it on a network passes what it accepts
// on the egg's port to the agent's Unix socket, bind-mounted into it.
func TestARelayFromTheBuiltinImagePassesConnectionsToTheSocket(t *testing.T) {
	bin, err := dockertest.Binary("./cmd/hatch")
	if err != nil {
		t.Fatal(err)
	}
	img, err := relay.ImageFromBinary(bin)
	if err != nil {
		t.Fatal(err)
	}
	v := newEnv(t, func(c *Config) {
		c.BuiltinImages = map[string]BuiltinImage{img.Ref: func() (io.Reader, error) { return bytes.NewReader(img.Context), nil }}
	})

	// The agent's side: a socket that answers each line with "agent: <line>".
	dir := v.s.ShmDir()
	listentest.Serve(t, "unix", filepath.Join(dir, "relay.sock"), func(c net.Conn) {
		defer c.Close()
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			fmt.Fprintf(c, "agent: %s\n", sc.Text())
		}
	})
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}

	w := contract.WorkloadSpec{
		Namespace: "default", Project: "shop", Egg: "kv.relay-1", Image: img.Ref, Replicas: 1,
		Command:        []string{"--listen", ":6379", "--socket", "/run/hatch/relay.sock"},
		NetworkAliases: []string{"kv"},
		Networks:       []string{v.network("default")},
		Binds:          []contract.BindMount{{Source: dir, Target: "/run/hatch"}},
		StopTimeout:    2 * time.Second,
	}
	v.start(w, 0, "")
	cs := v.waitFor("the relay runs", func(cs []containers.Container) bool {
		mine := of(cs, "kv.relay-1")
		return len(mine) == 1 && mine[0].State == contract.StateRunning && mine[0].IP != ""
	})
	ip := of(cs, "kv.relay-1")[0].IP

	var reply string
	deadline := time.Now().Add(20 * time.Second)
	for {
		reply, err = exchangeLine(net.JoinHostPort(ip, "6379"), "hello")
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // the relay may still be starting to listen
	}
	if err != nil || reply != "agent: hello" {
		t.Fatalf("through the relay: %q, %v; want the agent's answer", reply, err)
	}
}

func exchangeLine(addr, line string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintln(c, line); err != nil {
		return "", err
	}
	r, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSuffix(r, "\n"), err
}
