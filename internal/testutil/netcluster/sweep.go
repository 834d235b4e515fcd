//go:build docker

package netcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

var (
	runPattern    = regexp.MustCompile(`^[0-9a-f]{6}$`)
	netnsPattern  = regexp.MustCompile(`^` + nsPrefix + `([0-9a-f]{6})-[0-9]+$`)
	linkPattern   = regexp.MustCompile(`^` + linkPrefix + `([0-9a-f]{6})-[0-9]+p?$`)
	commentPatten = regexp.MustCompile(`--comment "?` + commentPrefix + `([0-9a-f]{6})"?`)
)

// Sweep removes what runs killed before their cleanup left: the processes,
// mounts and directory of every run under StateDir whose lock nobody holds,
// and every namespace, link and rule (in DOCKER-USER, INPUT and OUTPUT)
// named after a run that is not alive. It touches nothing without the
// harness's prefixes, and nothing of a live run (one in this process
// included). Without root there is nothing of the harness's to remove, and
// it returns at once.
func Sweep() error {
	if os.Geteuid() != 0 {
		return nil
	}
	if err := os.MkdirAll(StateDir, 0o700); err != nil {
		return fmt.Errorf("netcluster sweep: %w", err)
	}
	// A run being created holds this lock until its directory is locked
	// and its names made: the sweep never sees it half made.
	global, err := lockFile(filepath.Join(StateDir, ".alloc.lock"), true)
	if err != nil {
		return err
	}
	defer global.Close()
	live := map[string]bool{}
	var errs []error
	entries, err := os.ReadDir(StateDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("netcluster sweep: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() || !runPattern.MatchString(e.Name()) {
			continue
		}
		dir := filepath.Join(StateDir, e.Name())
		lock, err := lockFile(filepath.Join(dir, "lock"), false)
		if errors.Is(err, errLocked) {
			live[e.Name()] = true
			continue
		}
		if err != nil {
			errs = append(errs, err)
			live[e.Name()] = true // unknown: leave it
			continue
		}
		if err := sweepRun(e.Name(), dir); err != nil {
			errs = append(errs, err)
		}
		lock.Close()
	}

	// Names left without a directory (or whose directory was just swept).
	ctx := context.Background()
	nsEntries, _ := os.ReadDir(netnsDir)
	for _, e := range nsEntries {
		if m := netnsPattern.FindStringSubmatch(e.Name()); m != nil && !live[m[1]] {
			ino := nsInode(filepath.Join(netnsDir, e.Name()))
			if err := killWhere(func(p proc) bool { return ino != 0 && p.netns == ino }); err != nil {
				errs = append(errs, err)
			}
			if err := run(ctx, "ip", "netns", "del", e.Name()); err != nil {
				errs = append(errs, err)
			}
		}
	}
	links, err := net.Interfaces()
	if err != nil {
		errs = append(errs, err)
	}
	for _, l := range links {
		if m := linkPattern.FindStringSubmatch(l.Name); m != nil && !live[m[1]] {
			if err := delLink(ctx, l.Name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, chain := range ruleChains {
		rules, err := output(ctx, "iptables", "-w", "-S", chain)
		if err != nil { // no chain (no Docker): no rule of ours either
			continue
		}
		for _, line := range strings.Split(rules, "\n") {
			m := commentPatten.FindStringSubmatch(line)
			if m == nil || live[m[1]] || !strings.HasPrefix(line, "-A "+chain+" ") {
				continue
			}
			spec := strings.Fields(strings.ReplaceAll(strings.TrimPrefix(line, "-A "+chain+" "), `"`, ""))
			if err := run(ctx, "iptables", append([]string{"-w", "-D", chain}, spec...)...); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// sweepRun kills what runs from a dead run's directory or in its
// containers, removes its shims' sockets, unmounts and removes the
// directory.
func sweepRun(run, dir string) error {
	var ids []string
	hosts, _ := filepath.Glob(filepath.Join(dir, "h*"))
	byHost := map[string][]string{}
	for _, h := range hosts {
		byHost[h] = containerIDs(filepath.Join(h, "data"))
		ids = append(ids, byHost[h]...)
	}
	var netns []uint64
	nsEntries, _ := os.ReadDir(netnsDir)
	for _, e := range nsEntries {
		if m := netnsPattern.FindStringSubmatch(e.Name()); m != nil && m[1] == run {
			if ino := nsInode(filepath.Join(netnsDir, e.Name())); ino != 0 {
				netns = append(netns, ino)
			}
		}
	}
	err := killWhere(func(p proc) bool {
		for _, ino := range netns {
			if p.netns == ino {
				return true
			}
		}
		return strings.Contains(p.cmdline, dir+"/") || p.inContainer(ids)
	})
	if err != nil {
		return fmt.Errorf("netcluster sweep %s: %w", run, err)
	}
	for h, hostIDs := range byHost {
		if err := removeShimSockets(h, hostIDs); err != nil {
			return fmt.Errorf("netcluster sweep %s: %w", run, err)
		}
	}
	if err := removeDir(dir); err != nil {
		return fmt.Errorf("netcluster sweep %s: %w", run, err)
	}
	return nil
}
