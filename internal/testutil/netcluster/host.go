//go:build docker

package netcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/docker/docker/client"
)

// engineStartTimeout bounds a dockerd's start, engineStopTimeout its
// graceful stop (it stops its containers first, each within its own stop
// timeout).
const (
	engineStartTimeout = 60 * time.Second
	engineStopTimeout  = 30 * time.Second
)

// Host is one host: a network namespace, its veth, its Docker Engine.
type Host struct {
	// Name is "h<Index>".
	Name  string
	Index int
	// IP is the host's address (inside its namespace), reachable from the
	// root namespace; Gateway is the root side of its veth.
	IP, Gateway string
	// Netns is the namespace's name (pinned under /var/run/netns), Link
	// the root side of its veth.
	Netns, Link string
	// Dir holds the engine's directories and its log.
	Dir string

	octet   int
	cluster *Cluster

	mu     sync.Mutex // guards docker, engine and exited
	docker *client.Client
	engine *exec.Cmd     // the running dockerd, nil when stopped
	exited chan struct{} // closed when engine has exited
}

// NetnsPath is the namespace's pinned path, for nsenter --net.
func (h *Host) NetnsPath() string { return filepath.Join(netnsDir, h.Netns) }

// DockerSocket is the path of the engine's API socket.
func (h *Host) DockerSocket() string { return filepath.Join(h.Dir, "docker.sock") }

// DockerHost is the engine's DOCKER_HOST value.
func (h *Host) DockerHost() string { return "unix://" + h.DockerSocket() }

// Docker is a client of the host's engine (the same one across a Stop and
// Start; calls fail while the host is stopped).
func (h *Host) Docker() *client.Client {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.docker
}

// Command is name run inside the host's network namespace (and only
// there: it shares the root namespace's mounts and processes), with
// DOCKER_HOST naming the host's engine; ctx kills it (nsenter execs name,
// so the process is name itself). The caller sets the rest of its
// environment by appending to Env, and starts it.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	// nsenter --net, not `ip netns exec`: the latter remounts /sys, which
	// hides the cgroup mounts dockerd needs.
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + h.NetnsPath(), "--", name}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DOCKER_HOST=" + h.DockerHost()}
	return cmd
}

// createNetwork makes the namespace and its veth, with the addresses and a
// default route through the root namespace.
func (h *Host) createNetwork(ctx context.Context) error {
	steps := [][]string{
		{"netns", "add", h.Netns},
		{"link", "add", h.Link, "type", "veth", "peer", "name", "eth0", "netns", h.Netns},
		{"addr", "add", h.Gateway + "/24", "dev", h.Link},
		{"link", "set", h.Link, "up"},
		{"-n", h.Netns, "addr", "add", h.IP + "/24", "dev", "eth0"},
		{"-n", h.Netns, "link", "set", "eth0", "up"},
		{"-n", h.Netns, "link", "set", "lo", "up"},
		{"-n", h.Netns, "route", "add", "default", "via", h.Gateway},
	}
	for _, args := range steps {
		if err := run(ctx, "ip", args...); err != nil {
			return fmt.Errorf("netcluster: host %s: %w", h.Name, err)
		}
	}
	return nil
}

// startEngine starts the host's dockerd inside the namespace and waits
// until it answers.
func (h *Host) startEngine(ctx context.Context) error {
	for _, d := range []string{"data", "exec"} {
		if err := os.MkdirAll(filepath.Join(h.Dir, d), 0o700); err != nil {
			return fmt.Errorf("netcluster: host %s: %w", h.Name, err)
		}
	}
	// /etc/docker/daemon.json sets the main engine's data root: a second
	// daemon needs its own config.
	config := filepath.Join(h.Dir, "daemon.json")
	if err := os.WriteFile(config, []byte("{}\n"), 0o600); err != nil {
		return fmt.Errorf("netcluster: host %s: %w", h.Name, err)
	}
	logFile, err := os.OpenFile(filepath.Join(h.Dir, "dockerd.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("netcluster: host %s: %w", h.Name, err)
	}
	defer logFile.Close() // the child has its own copy
	cmd := h.Command(context.Background(), "dockerd",
		"--config-file", config,
		"--data-root", filepath.Join(h.Dir, "data"),
		"--exec-root", filepath.Join(h.Dir, "exec"),
		"--pidfile", filepath.Join(h.Dir, "docker.pid"),
		"-H", h.DockerHost(),
		"--bip", fmt.Sprintf("172.31.%d.1/24", h.octet),
		"--default-address-pool", "base=172.30.0.0/16,size=24",
		"--storage-driver", h.cluster.driver)
	cmd.Env = cmd.Env[:1] // no DOCKER_HOST for the daemon itself
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group: a signal to the test's group does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("netcluster: host %s: start dockerd: %w", h.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	h.mu.Lock()
	h.engine, h.exited = cmd, exited
	if h.docker == nil {
		if h.docker, err = newClient(h.DockerSocket()); err != nil {
			h.mu.Unlock()
			return err
		}
	}
	cli := h.docker
	h.mu.Unlock()

	deadline := time.Now().Add(engineStartTimeout)
	for {
		pingCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cli.Ping(pingCtx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("netcluster: host %s: dockerd exited (%v):\n%s", h.Name, cmd.ProcessState, h.engineLog())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("netcluster: host %s: dockerd not answering within %v: %w\n%s", h.Name, engineStartTimeout, err, h.engineLog())
		}
	}
}

// engineLog is the end of the host's dockerd log.
func (h *Host) engineLog() string {
	b, _ := os.ReadFile(filepath.Join(h.Dir, "dockerd.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Stop takes the host off the network at once (its link down), kills
// every process in its namespace but the engine's (its agent among them: a
// lost machine is not asked to shut down), then stops the engine, which
// stops its containers, and kills whatever of the host is left. Start brings it back with the same engine data.
func (h *Host) Stop() error {
	if linkExists(h.Link) { // not yet, if the host's creation failed
		if err := run(context.Background(), "ip", "link", "set", h.Link, "down"); err != nil {
			return fmt.Errorf("netcluster: stop %s: %w", h.Name, err)
		}
	}
	h.mu.Lock()
	engine, exited := h.engine, h.exited
	h.engine = nil
	h.mu.Unlock()
	var keep map[int]bool
	if engine != nil {
		keep = descendants(engine.Process.Pid)
	}
	// The engine's own processes are spared for its graceful stop: its
	// descendants, and containerd's shims and fuse-overlayfs, which daemonize
	// but name the host's directory.
	ino := h.netnsInode()
	engineOwn := func(p proc) bool { return keep[p.pid] || strings.Contains(p.cmdline, h.Dir+"/") }
	if err := killWhere(func(p proc) bool { return ino != 0 && p.netns == ino && !engineOwn(p) }); err != nil {
		return fmt.Errorf("netcluster: stop %s: %w", h.Name, err)
	}
	if engine != nil {
		_ = engine.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(engineStopTimeout):
			_ = engine.Process.Kill()
			<-exited
		}
	}
	// What the engine left (a shim, a container it could not stop).
	if err := h.killAll(); err != nil {
		return fmt.Errorf("netcluster: stop %s: %w", h.Name, err)
	}
	return nil
}

// Start brings a stopped host back: link up, engine started and answering.
// The processes a test runs in it (its agent) are the test's to restart.
func (h *Host) Start() error {
	h.mu.Lock()
	running := h.engine != nil
	h.mu.Unlock()
	if running {
		return fmt.Errorf("netcluster: start %s: it is running", h.Name)
	}
	if err := unmountUnder(h.Dir); err != nil {
		return fmt.Errorf("netcluster: start %s: %w", h.Name, err)
	}
	if err := run(context.Background(), "ip", "link", "set", h.Link, "up"); err != nil {
		return fmt.Errorf("netcluster: start %s: %w", h.Name, err)
	}
	return h.startEngine(context.Background())
}

// netnsInode identifies the namespace among /proc/<pid>/ns/net (0 when it
// is gone).
func (h *Host) netnsInode() uint64 { return nsInode(h.NetnsPath()) }

// killAll kills every process of the host: in its namespace, in its
// engine's containers, or running from its directory (containerd, shims,
// fuse-overlayfs), and removes the sockets of the shims it killed.
func (h *Host) killAll() error {
	ino := h.netnsInode()
	ids := containerIDs(filepath.Join(h.Dir, "data"))
	err := killWhere(func(p proc) bool {
		return (ino != 0 && p.netns == ino) || strings.Contains(p.cmdline, h.Dir+"/") || p.inContainer(ids)
	})
	if err != nil {
		return err
	}
	return removeShimSockets(h.Dir, ids)
}

// remove stops the host for good and removes its namespace, link and
// directory's mounts (the directory goes with the run's).
func (h *Host) remove() error {
	var errs []error
	if err := h.Stop(); err != nil {
		errs = append(errs, err)
	}
	h.mu.Lock()
	if h.docker != nil {
		h.docker.Close()
	}
	h.mu.Unlock()
	if err := unmountUnder(h.Dir); err != nil {
		errs = append(errs, err)
	}
	if _, err := os.Stat(h.NetnsPath()); err == nil {
		if err := run(context.Background(), "ip", "netns", "del", h.Netns); err != nil {
			errs = append(errs, err)
		}
	}
	if linkExists(h.Link) { // gone with the namespace, normally
		if err := delLink(context.Background(), h.Link); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// SignalEngine sends sig to the host's Docker Engine (SIGSTOP freezes it,
// SIGCONT thaws it), for tests of an engine that stops answering.
func (h *Host) SignalEngine(sig syscall.Signal) error {
	h.mu.Lock()
	engine := h.engine
	h.mu.Unlock()
	if engine == nil {
		return fmt.Errorf("netcluster: signal %s's engine: it is stopped", h.Name)
	}
	if err := engine.Process.Signal(sig); err != nil {
		return fmt.Errorf("netcluster: signal %s's engine: %w", h.Name, err)
	}
	return nil
}
