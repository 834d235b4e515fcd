package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hatchery/hatchery/internal/containers"
	"github.com/hatchery/hatchery/internal/contract"
)

// Relays stand for an egg on this host's Docker networks: a consumer here
// reaches the egg by its name, which only the relay carries, and the relay
// hands each connection to the ingress through a Unix socket, where it goes
// to a healthy, undrained replica, here or on a peer. The agent runs them as
// workloads it adds to the desired state it converges towards, so the
// converge engine starts, restarts, rolls and removes them by its usual
// rules; they never appear in status reports.
const (
	// relayMark joins an egg's name and a network's hash in a relay's egg
	// name: "web.relay-1a2b3c4d". Egg names cannot hold a dot, so a relay
	// never takes a real egg's workload ID.
	relayMark = ".relay-"
	// relayMount is where a relay container sees its socket's directory.
	relayMount = "/run/hatch"
	// relaySocketName is the socket's name in that directory.
	relaySocketName = "relay.sock"
	// relayStopTimeout is plenty for a process that keeps no state.
	relayStopTimeout = 5 * time.Second
)

// isRelay reports whether a workload ID is a relay's.
func isRelay(workloadID string) bool { return strings.Contains(workloadID, relayMark) }

// needsRelay reports whether consumers on this host reach the service by
// name: the desired state gives the names and the networks to carry them on
// (contract.Service.Relayed: the rule by which the control plane also lets
// this host's mesh streams reach the service's port).
func needsRelay(s contract.Service) bool { return s.Relayed() }

// relayDir returns the directory of a service's socket on this host, under
// the agent's relay directory: one per service, so that bind-mounting it
// shows a relay its own socket only, and a socket made anew (an agent
// restart) is seen by relays already running.
func relayDir(root string, s contract.Service) string {
	return filepath.Join(root, shortHash(s.ID()))
}

// relaySocket returns the path of a service's socket on this host.
func relaySocket(root string, s contract.Service) string {
	return filepath.Join(relayDir(root, s), relaySocketName)
}

// relayWorkloads returns the relay workloads the desired state calls for:
// one per service that consumers here reach by name and network it is
// reached on, running image (the relay image) with the service's names as
// its network aliases on that network (only relays carry any: see
// contract.WorkloadSpec.NetworkAliases), listening on the service's port
// and passing connections to the socket under root. Sorted by ID; pure.
func relayWorkloads(desired contract.DesiredState, image, root string) []contract.WorkloadSpec {
	var out []contract.WorkloadSpec
	for _, s := range desired.Services {
		if !needsRelay(s) {
			continue
		}
		for _, n := range slices.Compact(slices.Sorted(slices.Values(s.Networks))) {
			out = append(out, contract.WorkloadSpec{
				Namespace: s.Namespace, Project: s.Project, Egg: s.Egg + relayMark + shortHash(n)[:8],
				Image:    image,
				Replicas: 1,
				Command: []string{"--listen", ":" + strconv.Itoa(s.Port),
					"--socket", relayMount + "/" + relaySocketName},
				NetworkAliases: slices.Clone(s.Names),
				Networks:       []string{n},
				Binds:          []contract.BindMount{{Source: relayDir(root, s), Target: relayMount}},
				StopTimeout:    relayStopTimeout,
			})
		}
	}
	slices.SortFunc(out, func(a, b contract.WorkloadSpec) int { return strings.Compare(a.ID(), b.ID()) })
	return out
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:6])
}

// relaysDir is the directory of relay sockets in the data directory.
const relaysDir = "relays"

// withRelays returns the desired state with the relays it calls for added
// to its workloads. Without a relay image it adds none and says so.
func (a *Agent) withRelays(desired contract.DesiredState) (contract.DesiredState, error) {
	relays := relayWorkloads(desired, a.cfg.RelayImage, a.relayRoot)
	if len(relays) == 0 {
		return desired, nil
	}
	if a.cfg.RelayImage == "" {
		return desired, fmt.Errorf("%d relays wanted, but this agent has no relay image", len(relays))
	}
	// A relay's socket directory must exist before its container is
	// created: Docker refuses a bind mount of a missing path.
	for _, r := range relays {
		if err := os.MkdirAll(r.Binds[0].Source, 0o755); err != nil {
			return desired, fmt.Errorf("relay %s: %w", r.ID(), err)
		}
	}
	desired.Workloads = append(slices.Clone(desired.Workloads), relays...)
	return desired, nil
}

// withoutRelays leaves out the relays' containers: what the status report
// shows are the eggs.
func withoutRelays(actual []containers.Container) []containers.Container {
	out := make([]containers.Container, 0, len(actual))
	for _, c := range actual {
		if !isRelay(c.WorkloadID) {
			out = append(out, c)
		}
	}
	return out
}

// removeStaleRelayDirs removes the socket directories of services that no
// longer call for relays. It runs after the ingress closed their sockets;
// their relays are being removed by the converge.
func (a *Agent) removeStaleRelayDirs(desired contract.DesiredState) error {
	entries, err := os.ReadDir(a.relayRoot)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("relay sockets: %w", err)
	}
	wanted := make(map[string]bool)
	for _, s := range desired.Services {
		if needsRelay(s) {
			wanted[filepath.Base(relayDir(a.relayRoot, s))] = true
		}
	}
	var errs []error
	for _, e := range entries {
		if !wanted[e.Name()] {
			errs = append(errs, os.RemoveAll(filepath.Join(a.relayRoot, e.Name())))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("relay sockets: %w", err)
	}
	return nil
}
