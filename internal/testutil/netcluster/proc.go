//go:build docker

package netcluster

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is what the harness reads of a process to tell whether it belongs
// to a host.
type proc struct {
	pid, ppid int
	netns     uint64 // inode of its network namespace
	cmdline   string // arguments joined by spaces
	cgroup    string // /proc/<pid>/cgroup
}

// inContainer reports whether the process runs in one of the containers
// (its cgroup path names the container's ID).
func (p proc) inContainer(ids []string) bool {
	for _, id := range ids {
		if strings.Contains(p.cgroup, id) {
			return true
		}
	}
	return false
}

// procs lists the machine's processes (but this one); a process gone
// while being read is skipped.
func procs() []proc {
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		stat, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
		fields := strings.Fields(rest)
		if len(fields) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		p := proc{pid: pid, ppid: ppid}
		if link, err := os.Readlink(filepath.Join(dir, "ns", "net")); err == nil {
			// "net:[4026532281]"
			p.netns, _ = strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(link, "net:["), "]"), 10, 64)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil {
			p.cmdline = strings.ReplaceAll(string(b), "\x00", " ")
		}
		if b, err := os.ReadFile(filepath.Join(dir, "cgroup")); err == nil {
			p.cgroup = string(b)
		}
		out = append(out, p)
	}
	return out
}

// descendants is pid and every process below it.
func descendants(pid int) map[int]bool {
	all := procs()
	set := map[int]bool{pid: true}
	for changed := true; changed; {
		changed = false
		for _, p := range all {
			if set[p.ppid] && !set[p.pid] {
				set[p.pid] = true
				changed = true
			}
		}
	}
	return set
}

// killWhere SIGKILLs every process match selects, again until none is
// left (a dying parent may have started one more), and fails if some
// survive 10 s.
func killWhere(match func(proc) bool) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []int
		for _, p := range procs() {
			if match(p) {
				left = append(left, p.pid)
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v survive SIGKILL", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// nsInode is the inode of a pinned namespace (0 if it is not there).
func nsInode(path string) uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	return st.Ino
}

// containerIDs lists the containers an engine's data root holds.
func containerIDs(dataRoot string) []string {
	entries, _ := os.ReadDir(filepath.Join(dataRoot, "containers"))
	var ids []string
	for _, e := range entries {
		if len(e.Name()) == 64 {
			ids = append(ids, e.Name())
		}
	}
	return ids
}

// shimSocketDir is where containerd (1.6) puts its shims' sockets, whatever
// its own address: one directory for every containerd of the machine.
const shimSocketDir = "/run/containerd/s"

// removeShimSockets removes the sockets of an engine's killed shims, which
// only a shim's clean exit removes. Each is named, as containerd names it,
// after the hash of the containerd address, namespace and container ID, so
// only the sockets of this engine's own containers are touched.
func removeShimSockets(engineDir string, ids []string) error {
	address := filepath.Join(engineDir, "exec", "containerd", "containerd.sock")
	var errs []error
	for _, id := range ids {
		sum := sha256.Sum256([]byte(filepath.Join(address, "moby", id)))
		err := os.Remove(filepath.Join(shimSocketDir, hex.EncodeToString(sum[:])))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// unmountUnder detaches every mount at or below dir, deepest first: the
// engine's layers (fuse-overlayfs), its containers' shm and its network
// namespaces' bind mounts stay mounted when it dies.
func unmountUnder(dir string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("mounts: %w", err)
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		p := unescapeMount(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, p := range slices.Compact(points) {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeDir unmounts what is left under dir and removes it.
func removeDir(dir string) error {
	if err := unmountUnder(dir); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}
