//go:build docker

// Package netcluster is the harness for tests of many real hosts on one
// machine: each host is a Linux network namespace with its own Docker Engine
// (a dockerd with its own data, exec root and socket), reached from the root
// namespace through a veth pair. A test runs `hatch server` in the root
// namespace on the cluster's server address and a `hatch agent` inside each
// host (Host.Command), so agents, engines and their containers really are
// apart: a host that stops is gone from the network and takes its engine and
// containers with it.
//
// Addressing: host i's veth has 10.210.<o>.1 on the root side and
// 10.210.<o>.2 inside, where the third octet o is chosen per run among those
// no address or route of the root namespace uses yet (so a leftover of an
// earlier run cannot clash), under a machine-wide lock. The server address is
// the root side of one more veth pair kept in the root namespace, so that it
// stays reachable whichever host is stopped.
//
// Everything is named per run and recognised by it: namespaces
// "hatchnet-<run>-<i>", links "hnet<run>-<i>", iptables rules (in
// DOCKER-USER between hosts, INPUT and OUTPUT for a host cut from the
// server) carrying the comment "hatchnet-<run>" and the state directory /var/tmp/hatchnet/<run>,
// whose lock file the running test process holds. Cleanup removes all of it;
// Sweep removes what a killed run left, and only that: a run whose lock is
// held is alive, and nothing without the prefix is ever touched (no
// `docker system prune`, no rule or link of anyone else).
//
// It needs root, iproute2, iptables, nsenter (util-linux) and dockerd.
package netcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/hatchery/hatchery/internal/testutil/dockertest"
)

const (
	// StateDir holds one directory per run: its lock, and each host's
	// engine directories.
	StateDir = "/var/tmp/hatchnet"
	// nsPrefix starts every namespace's name, commentPrefix every rule's
	// comment, linkPrefix every link's name.
	nsPrefix      = "hatchnet-"
	commentPrefix = "hatchnet-"
	linkPrefix    = "hnet"
	// netnsDir is where `ip netns add` pins namespaces.
	netnsDir = "/var/run/netns"
	// ruleChain is the chain Docker leaves to its users, jumped to first in
	// FORWARD, whose policy Docker sets to DROP.
	ruleChain = "DOCKER-USER"
)

// ruleChains are the chains the harness adds rules to: ruleChain for the
// links between hosts, INPUT and OUTPUT for the cuts from the server.
var ruleChains = []string{ruleChain, "INPUT", "OUTPUT"}

// cmdTimeout bounds each ip/iptables/nsenter command the harness runs.
const cmdTimeout = 30 * time.Second

// Cluster is one run's hosts.
type Cluster struct {
	// ServerIP is where a server in the root namespace should listen for
	// the hosts' agents to reach it (a route goes there from every host).
	ServerIP string
	// Hosts are the hosts, Hosts[i].Name being "h<i+1>".
	Hosts []*Host

	t       testing.TB
	run     string // 6 hex digits, in every name
	dir     string // StateDir/<run>
	lock    *os.File
	driver  string // the main engine's storage driver
	srvLink string

	mu    sync.Mutex // guards rules
	rules [][]string // iptables rules added: chain name, then the rule's spec
}

// Start creates n hosts, starting their engines in parallel, and registers
// their removal with t.Cleanup. It fails the test if any step fails: a
// docker-tagged test must not pass without its hosts. Each host's start
// time is logged.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("netcluster: hosts in network namespaces need root")
	}
	begin := time.Now()
	driver, err := storageDriver(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{t: t, run: randomHex(3), driver: driver}
	t.Cleanup(c.close)
	if err := c.create(n); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, h := range c.Hosts {
		wg.Go(func() {
			start := time.Now()
			if errs[i] = h.startEngine(t.Context()); errs[i] == nil {
				t.Logf("netcluster: host %s (%s) engine up in %v", h.Name, h.IP, time.Since(start).Round(time.Millisecond))
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Logf("netcluster: %d hosts up in %v (run %s)", n, time.Since(begin).Round(time.Millisecond), c.run)
	return c
}

// create makes the run's directory and lock, then, under the machine-wide
// lock (so two runs never pick the same octets), the links and namespaces.
func (c *Cluster) create(n int) error {
	if err := os.MkdirAll(StateDir, 0o700); err != nil {
		return fmt.Errorf("netcluster: %w", err)
	}
	global, err := lockFile(filepath.Join(StateDir, ".alloc.lock"), true)
	if err != nil {
		return err
	}
	defer global.Close() // releases the lock
	c.dir = filepath.Join(StateDir, c.run)
	if err := os.Mkdir(c.dir, 0o700); err != nil {
		return fmt.Errorf("netcluster: run directory: %w", err)
	}
	if c.lock, err = lockFile(filepath.Join(c.dir, "lock"), true); err != nil {
		return err
	}
	octets, err := freeOctets(n + 1)
	if err != nil {
		return err
	}
	ctx := c.t.Context()
	// The server's link: a veth pair whose both ends stay in the root
	// namespace, up whatever the hosts do.
	c.srvLink = c.linkName(0)
	c.ServerIP = fmt.Sprintf("10.210.%d.1", octets[0])
	if err := run(ctx, "ip", "link", "add", c.srvLink, "type", "veth", "peer", "name", c.srvLink+"p"); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"addr", "add", c.ServerIP + "/24", "dev", c.srvLink},
		{"link", "set", c.srvLink + "p", "up"},
		{"link", "set", c.srvLink, "up"},
	} {
		if err := run(ctx, "ip", args...); err != nil {
			return err
		}
	}
	for i := 1; i <= n; i++ {
		o := octets[i]
		h := &Host{
			Name: fmt.Sprintf("h%d", i), Index: i,
			IP: fmt.Sprintf("10.210.%d.2", o), Gateway: fmt.Sprintf("10.210.%d.1", o),
			Netns: fmt.Sprintf("%s%s-%d", nsPrefix, c.run, i), Link: c.linkName(i),
			Dir: filepath.Join(c.dir, fmt.Sprintf("h%d", i)), octet: o, cluster: c,
		}
		c.Hosts = append(c.Hosts, h)
		if err := h.createNetwork(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) linkName(i int) string { return fmt.Sprintf("%s%s-%d", linkPrefix, c.run, i) }

// comment is the iptables comment of every rule of the run.
func (c *Cluster) comment() string { return commentPrefix + c.run }

// Allow lets a and b reach each other through the root namespace (whose
// FORWARD policy Docker sets to DROP): ACCEPT rules for their two links,
// both ways, in DOCKER-USER. Cleanup removes them.
func (c *Cluster) Allow(a, b *Host) error {
	if err := c.addRules(c.ruleSpecs(a, b)); err != nil {
		return fmt.Errorf("netcluster: allow %s<->%s: %w", a.Name, b.Name, err)
	}
	return nil
}

// Disallow removes the rules Allow added for a and b.
func (c *Cluster) Disallow(a, b *Host) error {
	if err := c.deleteRules(c.ruleSpecs(a, b)); err != nil {
		return fmt.Errorf("netcluster: disallow %s<->%s: %w", a.Name, b.Name, err)
	}
	return nil
}

func (c *Cluster) ruleSpecs(a, b *Host) [][]string {
	spec := func(in, out string) []string {
		return []string{ruleChain, "-i", in, "-o", out, "-m", "comment", "--comment", c.comment(), "-j", "ACCEPT"}
	}
	return [][]string{spec(a.Link, b.Link), spec(b.Link, a.Link)}
}

// CutFromServer takes h off the control plane only: every packet between
// h and ServerIP is dropped, while h keeps its links to the other hosts
// (forwarded through the root namespace, in DOCKER-USER) and to every other
// address. A host reaches ServerIP, an address of the root namespace, over
// its own veth: its packets to it go through INPUT coming in on h.Link, the
// answers through OUTPUT going out on it, so a DROP rule in each, inserted
// first, cuts both ways, established connections (an agent's long-poll)
// included. (The INPUT rule alone stops any TCP exchange, either side's
// handshake needing a packet to ServerIP; the OUTPUT rule also keeps
// one-way traffic from the server, such as UDP, off the host.) Doing it again is a no-op; RestoreServer, the cleanup and
// Sweep remove the rules.
func (c *Cluster) CutFromServer(h *Host) error {
	if err := c.addRules(c.cutSpecs(h)); err != nil {
		return fmt.Errorf("netcluster: cut %s from the server: %w", h.Name, err)
	}
	return nil
}

// RestoreServer gives h its path to ServerIP back (a no-op if it was not
// cut).
func (c *Cluster) RestoreServer(h *Host) error {
	if err := c.deleteRules(c.cutSpecs(h)); err != nil {
		return fmt.Errorf("netcluster: restore %s's path to the server: %w", h.Name, err)
	}
	return nil
}

// cutSpecs are CutFromServer's rules for h.
func (c *Cluster) cutSpecs(h *Host) [][]string {
	comment := []string{"-m", "comment", "--comment", c.comment(), "-j", "DROP"}
	return [][]string{
		append([]string{"INPUT", "-i", h.Link, "-d", c.ServerIP + "/32"}, comment...),
		append([]string{"OUTPUT", "-o", h.Link, "-s", c.ServerIP + "/32"}, comment...),
	}
}

// addRules inserts each rule (chain, then spec) first in its chain, unless
// the run has it in already, and records it for the cleanup.
func (c *Cluster) addRules(rules [][]string) error {
	for _, r := range rules {
		c.mu.Lock()
		have := slices.ContainsFunc(c.rules, func(x []string) bool { return slices.Equal(x, r) })
		c.mu.Unlock()
		if have {
			continue
		}
		if err := run(c.t.Context(), "iptables", append([]string{"-w", "-I"}, r...)...); err != nil {
			return err
		}
		c.mu.Lock()
		c.rules = append(c.rules, r)
		c.mu.Unlock()
	}
	return nil
}

// deleteRules deletes each rule the run has in (chain, then spec).
func (c *Cluster) deleteRules(rules [][]string) error {
	var errs []error
	for _, r := range rules {
		c.mu.Lock()
		i := slices.IndexFunc(c.rules, func(x []string) bool { return slices.Equal(x, r) })
		if i >= 0 {
			c.rules = slices.Delete(c.rules, i, i+1)
		}
		c.mu.Unlock()
		if i < 0 {
			continue
		}
		if err := run(context.Background(), "iptables", append([]string{"-w", "-D"}, r...)...); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// close removes everything of the run: engines (and every process of each
// host), mounts, namespaces, links, rules, then the directory.
func (c *Cluster) close() {
	start := time.Now()
	var errs []error
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, h := range c.Hosts {
		wg.Go(func() {
			if err := h.remove(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	c.mu.Lock()
	rules := c.rules
	c.rules = nil
	c.mu.Unlock()
	for _, r := range rules {
		if err := run(context.Background(), "iptables", append([]string{"-w", "-D"}, r...)...); err != nil {
			errs = append(errs, err)
		}
	}
	if c.srvLink != "" {
		if err := delLink(context.Background(), c.srvLink); err != nil {
			errs = append(errs, err)
		}
	}
	if c.dir != "" {
		if err := removeDir(c.dir); err != nil {
			errs = append(errs, err)
		}
	}
	if c.lock != nil {
		c.lock.Close()
	}
	if err := errors.Join(errs...); err != nil {
		c.t.Errorf("netcluster: clean up run %s: %v", c.run, err)
	}
	c.t.Logf("netcluster: run %s removed in %v", c.run, time.Since(start).Round(time.Millisecond))
}

// storageDriver is the main engine's: the hosts' engines use the same,
// since it is the one known to work on this machine's file system.
func storageDriver(ctx context.Context) (string, error) {
	cli, err := dockertest.NewClient(ctx)
	if err != nil {
		return "", err
	}
	defer cli.Close()
	info, err := cli.Info(ctx)
	if err != nil {
		return "", fmt.Errorf("netcluster: docker info: %w", err)
	}
	return info.Driver, nil
}

// freeOctets picks n third octets of 10.210.0.0/16 that no address or
// route of the root namespace uses.
func freeOctets(n int) ([]int, error) {
	used := map[int]bool{0: true, 255: true}
	mark := func(ip net.IP) {
		if ip4 := ip.To4(); ip4 != nil && ip4[0] == 10 && ip4[1] == 210 {
			used[int(ip4[2])] = true
		}
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("netcluster: addresses: %w", err)
	}
	for _, a := range addrs {
		if ipNet, ok := a.(*net.IPNet); ok {
			mark(ipNet.IP)
		}
	}
	out, err := output(context.Background(), "ip", "-4", "route", "show", "table", "all")
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(out, "\n") {
		for _, field := range strings.Fields(line) {
			if ip, _, err := net.ParseCIDR(field); err == nil {
				mark(ip)
			} else if ip := net.ParseIP(field); ip != nil {
				mark(ip)
			}
		}
	}
	var free []int
	for o := 1; o < 255 && len(free) < n; o++ {
		if !used[o] {
			free = append(free, o)
		}
	}
	if len(free) < n {
		return nil, fmt.Errorf("netcluster: %d free subnets of 10.210.0.0/16 wanted, %d found", n, len(free))
	}
	return free, nil
}

// lockFile opens path and takes an exclusive flock on it, waiting for it
// if wait, else failing with errLocked when another holds it. The lock
// lasts until the file is closed or the process ends.
func lockFile(path string, wait bool) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("netcluster: lock: %w", err)
	}
	how := syscall.LOCK_EX
	if !wait {
		how |= syscall.LOCK_NB
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errLocked
		}
		return nil, fmt.Errorf("netcluster: lock %s: %w", path, err)
	}
	return f, nil
}

var errLocked = errors.New("locked by a running test")

// run runs a command to its end, its output in the error.
func run(ctx context.Context, name string, args ...string) error {
	_, err := output(ctx, name, args...)
	return err
}

func output(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// delLink deletes a link, if it is still there: a veth goes with its peer,
// and its peer with a deleted namespace (a little later: the kernel
// dismantles namespaces in the background).
func delLink(ctx context.Context, name string) error {
	if err := run(ctx, "ip", "link", "del", name); err != nil && linkExists(name) {
		return err
	}
	return nil
}

func linkExists(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b)
}

// newClient connects to a host's engine through its socket.
func newClient(sock string) (*client.Client, error) {
	cli, err := client.NewClientWithOpts(client.WithHost("unix://"+sock), client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker client for %s: %w", sock, err)
	}
	return cli, nil
}
