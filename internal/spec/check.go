package spec

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/hatchery/hatchery/internal/graph"
	"github.com/hatchery/hatchery/internal/resource"
)

// The checks in this file need the whole project: what an egg names must be
// defined, what the project claims (routes, published ports, volumes) must be
// claimed once, and the graph must have no cycle. They work on the typed
// model only, so that every loader producing a Project shares them.

// check runs the project-wide checks, reporting to pr.
func (pr *problems) check(p *Project) {
	eggs := map[string]*Egg{}
	for _, e := range p.Eggs {
		eggs[e.Name] = e
	}
	c := &checker{problems: pr, p: p, eggs: eggs}
	for _, e := range p.Eggs {
		c.stateful(e)
		c.ports(e)
		c.names(e)
		c.dependsOn(e)
		c.refs(e)
	}
	c.claims()
	c.routeTLS()
	c.unused()
	if len(pr.errors) == 0 {
		c.cycles()
	}
}

type checker struct {
	*problems
	p    *Project
	eggs map[string]*Egg
}

// stateful enforces "one volume, one writer": an egg with a named volume runs
// one replica and never runs an old and a new container side by side.
func (c *checker) stateful(e *Egg) {
	if !e.Stateful() {
		return
	}
	vol := e.namedVolumes()[0]
	if e.Replicas > 1 {
		c.errorf(e.line("replicas"), "egg %q mounts volume %q, so it runs at most one replica (one volume, one writer), not %d: set replicas: 1, or keep the data elsewhere", e.Name, vol, e.Replicas)
	}
	if e.Rollout.Order == StartFirst {
		c.errorf(e.line("rollout.order"), "egg %q mounts volume %q, so it rolls stop-first (two containers must not write one volume): remove rollout.order or write stop-first", e.Name, vol)
	}
}

// ports checks the settings that need the port the egg listens on.
func (c *checker) ports(e *Egg) {
	if e.Port != 0 || e.lines["port"] != 0 { // a bad port was reported already
		return
	}
	if len(e.Routes) > 0 {
		c.errorf(e.line("routes"), "egg %q has routes but no port: set port: to the port it listens on, where the ingress sends requests", e.Name)
	}
	if h := e.Health; h != nil && (h.HTTP != "" || h.TCP) {
		field := "health.tcp"
		if h.HTTP != "" {
			field = "health.http"
		}
		c.errorf(e.line(field), "egg %q checks its health on its port but has no port: set port: to the port it listens on", e.Name)
	}
}

// names checks that the volumes, networks and secrets an egg uses are defined.
func (c *checker) names(e *Egg) {
	volumes, networks, secrets := c.defined()
	targets := map[string]int{}
	for _, m := range e.Volumes {
		if first, dup := targets[m.Target]; dup {
			c.errorf(m.Line, "egg %q mounts two things at %s (first on line %d)", e.Name, m.Target, first)
		}
		targets[m.Target] = m.Line
		if m.Type == MountVolume && !volumes[m.Source] {
			c.errorf(m.Line, "egg %q mounts volume %q, which is not defined: add it under volumes:%s", e.Name, m.Source, suggest(m.Source, keys(volumes)))
		}
	}
	for _, n := range e.Networks {
		if n != DefaultNetwork && !networks[n] {
			c.errorf(e.line("networks"), "egg %q is on network %q, which is not defined: add it under networks:%s", e.Name, n, suggest(n, keys(networks)))
		}
	}
	for _, s := range e.Secrets {
		if !secrets[s] {
			c.errorf(e.line("secrets"), "egg %q uses secret %q, which is not defined: add it under secrets:%s", e.Name, s, suggest(s, keys(secrets)))
		}
	}
}

func (c *checker) defined() (volumes, networks, secrets map[string]bool) {
	volumes, networks, secrets = map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, v := range c.p.Volumes {
		volumes[v.Name] = true
	}
	for _, n := range c.p.Networks {
		networks[n.Name] = true
	}
	for _, s := range c.p.Secrets {
		secrets[s.Name] = true
	}
	return volumes, networks, secrets
}

func (c *checker) dependsOn(e *Egg) {
	seen := map[string]bool{}
	for _, d := range e.DependsOn {
		parent, ok := c.eggs[d.Egg]
		switch {
		case d.Egg == e.Name:
			c.errorf(d.Line, "egg %q depends on itself: remove it from its depends_on", e.Name)
		case !ok:
			c.errorf(d.Line, "egg %q depends on %q, which is not defined%s", e.Name, d.Egg, suggest(d.Egg, keys(c.eggs)))
		case seen[d.Egg]:
			c.errorf(d.Line, "egg %q depends on %q twice", e.Name, d.Egg)
		case parent.Schedule != nil && d.Condition != resource.ConditionCreated:
			c.errorf(d.Line, "egg %q waits for %q (condition: %s), but %q runs on a schedule: none of its runs is part of an apply, so there is nothing to wait for; depend on it without a condition (the order of the apply only), or make %q a one-shot job (restart: no, no schedule) to wait for it to complete", e.Name, d.Egg, conditionName(d.Condition), d.Egg, d.Egg)
		case d.Condition == resource.ConditionCompleted && parent.Restart == RestartAlways:
			c.errorf(d.Line, "egg %q waits for %q to complete, but %q restarts always and never completes: make %q a one-shot job (restart: no), or wait for condition: healthy", e.Name, d.Egg, d.Egg, d.Egg)
		}
		seen[d.Egg] = true
	}
}

// refs checks the output references: an address needs a port to be one,
// and a scheduled egg has neither address nor hosts worth reaching.
func (c *checker) refs(e *Egg) {
	for _, r := range e.refs {
		typ, name, _ := resource.SplitKey(r.Key)
		if typ != resource.Egg {
			continue
		}
		if name == e.Name {
			c.errorf(r.Line, "egg %q references its own %s (%s): an egg cannot wait for itself; its own name reaches it", e.Name, r.Output, userRef(r.Ref))
			continue
		}
		target := c.eggs[name]
		if target.Schedule != nil {
			c.errorf(r.Line, "egg %q references %s, but egg %q runs on a schedule: it has no long-running replica to reach, and runs on no host between its runs; remove the reference", e.Name, userRef(r.Ref), name)
			continue
		}
		if r.Output != "address" {
			continue
		}
		if target.Port == 0 && target.lines["port"] == 0 {
			c.errorf(r.Line, "egg %q references %s, but egg %q has no port: set port: on %q to the port it listens on", e.Name, userRef(r.Ref), name, name)
		}
		if !sharesNetwork(e, target) {
			c.errorf(r.Line, "egg %q references %s, but is on no network of egg %q (%s): add one of them to its networks", e.Name, userRef(r.Ref), name, strings.Join(target.Networks, ", "))
		}
	}
}

// claims checks what must be unique in the project: routes, published ports,
// aliases, and the egg a volume belongs to.
func (c *checker) claims() {
	type claim struct {
		egg  string
		line int
	}
	routes, ports, aliases, volumes := map[string]claim{}, map[int]claim{}, map[string]claim{}, map[string]claim{}
	// In file order, so that the second claim is the one reported.
	eggs := append([]*Egg(nil), c.p.Eggs...)
	sort.SliceStable(eggs, func(i, j int) bool { return eggs[i].Line < eggs[j].Line })
	for _, e := range eggs {
		aliases[e.Name] = claim{e.Name, e.Line}
	}
	for _, e := range eggs {
		for _, r := range e.Routes {
			if first, dup := routes[r.Name()]; dup {
				c.errorf(r.Line, "route %s of egg %q is already claimed by egg %q (line %d): a route goes to one egg", r.Name(), e.Name, first.egg, first.line)
				continue
			}
			routes[r.Name()] = claim{e.Name, r.Line}
		}
		for _, pm := range e.Ports {
			if first, dup := ports[pm.Published]; dup {
				c.errorf(pm.Line, "port %d of egg %q is already published by egg %q (line %d): choose another published port", pm.Published, e.Name, first.egg, first.line)
				continue
			}
			ports[pm.Published] = claim{e.Name, pm.Line}
		}
		for _, a := range e.Aliases {
			if first, dup := aliases[a]; dup {
				owner := fmt.Sprintf("egg %q", first.egg)
				if a != first.egg {
					owner = fmt.Sprintf("an alias of egg %q", first.egg)
				}
				c.errorf(e.line("aliases"), "alias %q of egg %q is already %s (line %d): other eggs could not tell them apart", a, e.Name, owner, first.line)
				continue
			}
			aliases[a] = claim{e.Name, e.line("aliases")}
		}
		for _, m := range e.Volumes {
			if m.Type != MountVolume {
				continue
			}
			if first, dup := volumes[m.Source]; dup && first.egg != e.Name {
				c.errorf(m.Line, "volume %q is already mounted by egg %q (line %d): a volume belongs to one egg (one volume, one writer)", m.Source, first.egg, first.line)
				continue
			}
			volumes[m.Source] = claim{e.Name, m.Line}
		}
	}
}

// routeTLS checks that the secrets routes take certificates from are
// defined, and that the routes of a hostname agree on their TLS settings
// (one certificate, one redirect rule per name).
func (c *checker) routeTLS() {
	_, _, secrets := c.defined()
	type first struct {
		r   Route
		egg string
	}
	byHost := map[string]first{}
	eggs := append([]*Egg(nil), c.p.Eggs...)
	sort.SliceStable(eggs, func(i, j int) bool { return eggs[i].Line < eggs[j].Line })
	for _, e := range eggs {
		for _, ref := range e.tlsRefs {
			_, name, _ := resource.SplitKey(ref.Key)
			if !secrets[name] {
				c.errorf(ref.Line, "egg %q: route certificate from secret %q, which is not defined: add it under secrets: (secrets: {%s: {file: ./%s.pem}})", e.Name, name, name, name)
			}
		}
		for _, r := range e.Routes {
			f, seen := byHost[r.Host]
			if !seen {
				byHost[r.Host] = first{r, e.Name}
				continue
			}
			if f.r.tlsSettings() != r.tlsSettings() {
				c.errorf(r.Line, "route %s of egg %q has other TLS settings (tls, hsts) than route %s of egg %q (line %d): the routes of a hostname share one certificate and one redirect rule, so give them the same", r.Name(), e.Name, f.r.Name(), f.egg, f.r.Line)
			}
		}
	}
}

// unused warns about what the file defines and no egg uses.
func (c *checker) unused() {
	used := map[string]bool{}
	pulled := map[string]bool{} // registry hosts
	for _, e := range c.p.Eggs {
		for _, m := range e.Volumes {
			used[resource.Key(resource.Volume, m.Source)] = true
		}
		for _, n := range e.Networks {
			used[resource.Key(resource.Network, n)] = true
		}
		for _, s := range e.Secrets {
			used[resource.Key(resource.Secret, s)] = true
		}
		for _, r := range e.refs {
			used[r.Key] = true
		}
		for _, r := range e.tlsRefs {
			used[r.Key] = true
		}
		if a := c.p.pullAuth(e.Image); a != nil {
			pulled[a.Registry] = true
		}
	}
	for _, r := range c.p.Registries {
		if !pulled[r.Host] {
			c.warnf(r.Line, "registry %q is not the registry of any egg's image: no egg pulls with its login", r.Host)
			continue
		}
		used[resource.Key(resource.Secret, r.Password)] = true
	}
	mounted := map[string]*Egg{}
	for _, e := range c.p.Eggs {
		for _, v := range e.namedVolumes() {
			mounted[v] = e
		}
	}
	for _, v := range c.p.Volumes {
		if v.Backup != nil && mounted[v.Name] != nil {
			c.backupHooks(v, mounted[v.Name])
		}
		if e := mounted[v.Name]; v.Failover != nil && e != nil && len(e.namedVolumes()) > 1 {
			c.errorf(max(v.FailoverLine, v.Line), "volumes.%s.failover: egg %q mounts %d volumes, and a failover moves an egg with its one volume: keep this egg's data in volume %q alone, or remove failover",
				v.Name, e.Name, len(e.namedVolumes()), v.Name)
		}
		switch {
		case v.Backup != nil && mounted[v.Name] == nil:
			c.errorf(max(v.BackupLine, v.Line), "volumes.%s.backup: no egg mounts volume %q, so there is nothing to back up (and no container for the hooks): mount it in an egg (volumes: [\"%s:/data\"]), or remove backup", v.Name, v.Name, v.Name)
		case !used[resource.Key(resource.Volume, v.Name)]:
			c.warnf(v.Line, "volume %q is not mounted by any egg", v.Name)
		}
	}
	for _, n := range c.p.Networks {
		if !used[resource.Key(resource.Network, n.Name)] && n.Line != 0 {
			c.warnf(n.Line, "network %q has no egg on it", n.Name)
		}
	}
	for _, s := range c.p.Secrets {
		if !used[resource.Key(resource.Secret, s.Name)] {
			c.warnf(s.Line, "secret %q is not used by any egg", s.Name)
		}
	}
}

// backupHooks checks that a volume's backup hooks have a running container
// of its egg to run in: a scheduled egg has none between its runs, and a
// cold one (replicas: 0) none until it is scaled up.
func (c *checker) backupHooks(v *Volume, owner *Egg) {
	b := v.Backup
	if len(b.Before) == 0 && len(b.After) == 0 {
		return
	}
	switch {
	case owner.Schedule != nil:
		c.errorf(max(v.BackupLine, v.Line), "volumes.%s.backup: before and after run in the running container of egg %q, which runs on a schedule and has none between its runs: remove them (or take the copy in the job itself)", v.Name, owner.Name)
	case owner.Replicas == 0:
		c.warnf(max(v.BackupLine, v.Line), "volumes.%s.backup: before and after run in the running container of egg %q, which has replicas: 0: its backups fail until it runs", v.Name, owner.Name)
	}
}

// cycles reports a dependency cycle with its path, at the line of its first egg.
func (c *checker) cycles() {
	resources, deps := c.p.Resources()
	_, err := graph.New(resources, deps)
	if err == nil {
		return
	}
	var cycle *graph.CycleError
	if errors.As(err, &cycle) {
		names := make([]string, len(cycle.Path))
		line := 0
		for i, key := range cycle.Path {
			typ, name, _ := resource.SplitKey(key)
			names[i] = fmt.Sprintf("%s %q", typ, name)
			if e, ok := c.eggs[name]; ok && typ == resource.Egg && line == 0 {
				line = e.Line
			}
		}
		c.errorf(line, "dependency cycle: %s: each needs the next (by depends_on or a reference); remove one of these links", strings.Join(names, " -> "))
		return
	}
	// The checks above should have caught anything else; report it as is.
	c.errorf(1, "%v", err)
}

// sharesNetwork reports whether a can reach b's address: an address is an
// alias on b's networks, which Docker resolves only on a network a is on too.
func sharesNetwork(a, b *Egg) bool {
	for _, n := range a.Networks {
		if contains(b.Networks, n) {
			return true
		}
	}
	return false
}

// namedVolumes returns the names of the named volumes an egg mounts, in order.
func (e *Egg) namedVolumes() []string {
	var out []string
	for _, m := range e.Volumes {
		if m.Type == MountVolume {
			out = append(out, m.Source)
		}
	}
	return out
}

// userRef writes a canonical reference the way the user wrote it.
func userRef(r resource.Ref) string {
	typ, name, _ := resource.SplitKey(r.Key)
	switch typ {
	case resource.Egg:
		return "${" + name + "." + r.Output + "}"
	case resource.Secret:
		return "${secret." + name + "}"
	}
	return "${" + string(typ) + "." + name + "." + r.Output + "}"
}
