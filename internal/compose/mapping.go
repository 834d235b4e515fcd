package compose

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/spec"
)

// Docker's defaults for a HEALTHCHECK, which Compose's healthcheck is: the
// settings it leaves out take these, as with docker compose.
const (
	dockerHealthInterval = 30 * time.Second
	dockerHealthTimeout  = 30 * time.Second
	dockerHealthRetries  = 3
)

// mapper maps a loaded Compose project to a spec.Project, collecting
// problems at the lines of the Compose files.
type mapper struct {
	cp  *types.Project
	loc *locator
	enc encoder
	// awaited are the services another waits for to complete, found once
	// for the project (asking each service of every other is quadratic).
	awaited map[string]bool

	errors, warnings []spec.Diagnostic
}

func newMapper(cp *types.Project, loc *locator) *mapper {
	awaited := map[string]bool{}
	for _, s := range cp.Services {
		for name, d := range s.DependsOn {
			if d.Condition == types.ServiceConditionCompletedSuccessfully {
				awaited[name] = true
			}
		}
	}
	return &mapper{cp: cp, loc: loc, awaited: awaited}
}

// errorf reports a problem at the setting path leads to.
func (m *mapper) errorf(path []string, format string, args ...any) {
	file, line := m.loc.find(path...)
	m.errors = append(m.errors, spec.Diagnostic{File: file, Line: line, Message: fmt.Sprintf(format, args...)})
}

func (m *mapper) warn(path []string, format string, args ...any) {
	file, line := m.loc.find(path...)
	m.warnings = append(m.warnings, spec.Diagnostic{File: file, Line: line, Message: fmt.Sprintf(format, args...)})
}

// result is the *spec.Error of the problems found, sorted by file and line.
func (m *mapper) result() *spec.Error {
	sortDiagnostics(m.errors)
	sortDiagnostics(m.warnings)
	return &spec.Error{Errors: m.errors, Warnings: m.warnings}
}

func sortDiagnostics(ds []spec.Diagnostic) {
	sort.SliceStable(ds, func(i, j int) bool {
		if ds[i].File != ds[j].File {
			return ds[i].File < ds[j].File
		}
		return ds[i].Line < ds[j].Line
	})
}

// project maps the whole project. file is the first Compose file: the
// project's file, whose directory relative paths are relative to.
func (m *mapper) project(file string) *spec.Project {
	p := &spec.Project{File: file, Dir: filepath.Dir(file)}
	p.Name = projectName(m.cp.Name)
	if !spec.ValidName(p.Name) {
		m.errorf([]string{"name"}, "project name %q becomes %q, but Hatchery project names are %s: set name: or COMPOSE_PROJECT_NAME", m.cp.Name, p.Name, spec.NameRule)
	}
	m.mapNames()
	p.Volumes = m.volumes()
	p.Networks = m.networks()
	p.Secrets = m.secrets()
	for _, name := range sortedKeys(m.cp.Services) {
		if egg, ok := m.enc.services.to[name]; ok {
			p.Eggs = append(p.Eggs, m.egg(m.cp.Services[name], egg))
		}
	}
	sort.Slice(p.Eggs, func(i, j int) bool { return p.Eggs[i].Name < p.Eggs[j].Name })
	return p
}

// mapNames maps the names of every kind, reporting those it cannot map.
func (m *mapper) mapNames() {
	add := func(section string, rule nameRule, names []string) nameMap {
		mapped, problems := rule.mapNames(names)
		for _, p := range problems {
			m.errorf([]string{section}, "%s", p)
		}
		return mapped
	}
	m.enc = encoder{
		services: add("services", serviceNames, sortedKeys(m.cp.Services)),
		volumes:  add("volumes", keyNames("volume"), sortedKeys(m.cp.Volumes)),
		networks: add("networks", keyNames("network"), sortedKeys(m.cp.Networks)),
		secrets:  add("secrets", keyNames("secret"), sortedKeys(m.cp.Secrets)),
	}
}

func (m *mapper) volumes() []*spec.Volume {
	var out []*spec.Volume
	for _, name := range sortedKeys(m.cp.Volumes) {
		v, mapped := m.cp.Volumes[name], m.enc.volumes.to[name]
		if mapped == "" {
			continue
		}
		if bool(v.External) {
			m.warn([]string{"volumes", name, "external"}, "volume %q external: not supported by Hatchery, ignored: Hatchery creates the volume and owns it, so the data of an existing volume %q is not used", name, name)
		}
		out = append(out, &spec.Volume{Name: mapped, Labels: literalMap(v.Labels), Backup: m.volumeExtension(name, v)})
	}
	return out
}

// networks maps the networks, leaving out Compose's default network unless
// it is configured: Hatchery adds its own default network the same way.
func (m *mapper) networks() []*spec.Network {
	var out []*spec.Network
	for _, name := range sortedKeys(m.cp.Networks) {
		n, mapped := m.cp.Networks[name], m.enc.networks.to[name]
		if mapped == "" || (mapped == spec.DefaultNetwork && !n.Internal && len(n.Labels) == 0) {
			continue
		}
		if bool(n.External) {
			m.warn([]string{"networks", name, "external"}, "network %q external: not supported by Hatchery, ignored: Hatchery creates the network and owns it, so its services are not on an existing network %q", name, name)
		}
		out = append(out, &spec.Network{Name: mapped, Internal: n.Internal, Labels: literalMap(n.Labels)})
	}
	return out
}

func (m *mapper) secrets() []*spec.Secret {
	var out []*spec.Secret
	for _, name := range sortedKeys(m.cp.Secrets) {
		s, mapped := m.cp.Secrets[name], m.enc.secrets.to[name]
		switch {
		case mapped == "":
			continue
		case bool(s.External):
			m.errorf([]string{"secrets", name, "external"}, "secret %q is external, but Hatchery reads a secret's value from a file or a variable when it deploys: write file: or environment:", name)
		case s.File != "":
			out = append(out, &spec.Secret{Name: mapped, File: literal(m.relative(s.File))})
		case s.Environment != "":
			out = append(out, &spec.Secret{Name: mapped, Env: s.Environment})
		default:
			m.errorf([]string{"secrets", name}, "secret %q needs file: or environment:", name)
		}
	}
	return out
}

// relative writes a path compose-go made absolute relative to the project's
// directory, with forward slashes, as spec keeps paths.
func (m *mapper) relative(path string) string {
	if rel, err := filepath.Rel(m.cp.WorkingDir, path); err == nil {
		return filepath.ToSlash(rel)
	}
	return filepath.ToSlash(path)
}

// egg maps one service. Its fields are set in full, with spec's
// defaults where Compose says nothing, so that spec.Marshal writes only what
// the Compose file sets.
func (m *mapper) egg(s types.ServiceConfig, name string) *spec.Egg {
	sm := &serviceMapper{mapper: m, s: s, path: []string{"services", s.Name}}
	e := &spec.Egg{
		Name:        name,
		Replicas:    s.GetScale(),
		Env:         map[string]string{},
		Labels:      literalMap(s.Labels),
		Restart:     spec.RestartAlways,
		StopSignal:  spec.DefaultStopSignal,
		StopTimeout: spec.DefaultStopTimeout,
		User:        literal(s.User),
		WorkingDir:  literal(s.WorkingDir),
		ReadOnly:    s.ReadOnly,
		CapAdd:      s.CapAdd,
		CapDrop:     s.CapDrop,
		Rollout: spec.Rollout{
			MaxSurge:         spec.Surge{Percent: spec.DefaultSurgePercent},
			DrainTimeout:     spec.DefaultDrainTimeout,
			ProgressDeadline: spec.DefaultProgressDeadline,
		},
	}
	sm.egg = e
	sm.image()
	e.Command = sm.command(s.Command, "command")
	e.Entrypoint = sm.command(s.Entrypoint, "entrypoint")
	sm.environment()
	sm.ports()
	sm.health()
	sm.extension()
	sm.volumes()
	sm.tmpfs()
	sm.secrets()
	sm.networks()
	sm.dependsOn()
	sm.deploy()
	sm.restart()
	if s.StopGracePeriod != nil {
		e.StopTimeout = time.Duration(*s.StopGracePeriod)
	}
	if s.StopSignal != "" {
		e.StopSignal = s.StopSignal
	}
	if e.Rollout.Order == "" {
		e.Rollout.Order = spec.StartFirst
		if e.Stateful() {
			e.Rollout.Order = spec.StopFirst
		}
	}
	return e
}

// serviceMapper maps the settings of one service.
type serviceMapper struct {
	*mapper
	s    types.ServiceConfig
	egg  *spec.Egg
	path []string // services.<name>
}

// at is the path of one of the service's settings.
func (sm *serviceMapper) at(keys ...string) []string {
	return append(append([]string{}, sm.path...), keys...)
}

func (sm *serviceMapper) warnAt(key string, format string, args ...any) {
	sm.warn(sm.at(strings.Split(key, ".")...), "service %q %s: "+format, append([]any{sm.s.Name, key}, args...)...)
}

func (sm *serviceMapper) errorAt(key string, format string, args ...any) {
	sm.errorf(sm.at(strings.Split(key, ".")...), "service %q %s: "+format, append([]any{sm.s.Name, key}, args...)...)
}

// pullPolicy maps an image service's pull_policy: always and missing (or
// if_not_present) as they are; refresh, and none, to the default (the
// control plane pins the tag's digest at plan); never to missing, with a
// warning, since Hatchery pulls an image a host lacks rather than fail.
func (sm *serviceMapper) pullPolicy() contract.PullPolicy {
	switch p := sm.s.PullPolicy; p {
	case "", types.PullPolicyRefresh:
		return ""
	case types.PullPolicyAlways:
		return contract.PullAlways
	case types.PullPolicyMissing, types.PullPolicyIfNotPresent:
		return contract.PullMissing
	case types.PullPolicyNever:
		sm.warnAt("pull_policy", "never is mapped to pull: missing: a host that lacks the image pulls it, and the control plane never asks the registry")
		return contract.PullMissing
	default:
		sm.warnAt("pull_policy", "%q is not mapped: the control plane pins the tag's digest at each plan (pull: digest, the default)", p)
		return ""
	}
}

func (sm *serviceMapper) image() {
	s, e := sm.s, sm.egg
	if s.Build == nil {
		e.Image = literal(s.Image)
		e.Pull = sm.pullPolicy()
		return
	}
	if s.Image != "" {
		sm.warnAt("image", "%q is not used: Hatchery builds the image from build: and tags it itself", s.Image)
	}
	if p := s.PullPolicy; p != "" && p != types.PullPolicyBuild {
		sm.warnAt("pull_policy", "%q is not used: Hatchery builds the image from build:", p)
	}
	context := s.Build.Context
	if strings.Contains(context, "://") || strings.HasPrefix(context, "git@") {
		sm.errorAt("build.context", "%q is not a local directory: Hatchery builds from a directory next to the Compose file", context)
		return
	}
	e.Build = &spec.Build{
		Context:    literal(sm.relative(context)),
		Dockerfile: literal(filepath.ToSlash(s.Build.Dockerfile)),
		Args:       map[string]string{},
		Target:     literal(s.Build.Target),
	}
	if e.Build.Dockerfile == "" {
		e.Build.Dockerfile = spec.DefaultDockerfile
	}
	for _, k := range sortedKeys(s.Build.Args) {
		if v := s.Build.Args[k]; v != nil {
			e.Build.Args[k] = literal(*v)
		} else {
			sm.warnAt("build.args."+k, "it has no value and is not set in the environment, so it is not passed")
		}
	}
}

// command maps a command or entrypoint; Compose has split a string form
// into words already.
func (sm *serviceMapper) command(words types.ShellCommand, key string) []string {
	if words == nil {
		return nil
	}
	out := make([]string, 0, len(words))
	for _, w := range words {
		out = append(out, sm.withRefs(w, key))
	}
	return out
}

// withRefs encodes a string handed to the container, reporting a wrong
// reference at key.
func (sm *serviceMapper) withRefs(s, key string) string {
	encoded, err := sm.enc.withRefs(s)
	if err != nil {
		sm.errorAt(key, "%v", err)
		return literal(s)
	}
	return encoded
}

func (sm *serviceMapper) environment() {
	for _, k := range sortedKeys(sm.s.Environment) {
		v := sm.s.Environment[k]
		if v == nil {
			sm.warnAt("environment."+k, "it has no value and is not set in the environment, so it is not passed")
			continue
		}
		sm.egg.Env[k] = sm.withRefs(*v, "environment."+k)
	}
}

// ports publishes the published ports (through the agent's proxy, so that
// several replicas and rolls work), and sets the egg's port: x-hatch's, else
// the first port's target, else the first exposed port.
func (sm *serviceMapper) ports() {
	e := sm.egg
	for _, p := range sm.s.Ports {
		mapping := fmt.Sprintf("%s:%d", p.Published, p.Target)
		if p.Protocol != "" && p.Protocol != "tcp" {
			sm.warnAt("ports", "%s/%s is not published: Hatchery publishes tcp ports only", mapping, p.Protocol)
			continue
		}
		if e.Port == 0 {
			e.Port = int(p.Target)
		}
		switch {
		case p.Published == "":
			sm.warnAt("ports", "%d has no published port (Compose would pick one): Hatchery publishes fixed ports only, so it is reachable on port %d from the project's networks only", p.Target, p.Target)
			continue
		}
		published, err := strconv.Atoi(p.Published)
		if err != nil {
			sm.warnAt("ports", "%s is not published: Hatchery publishes one fixed port per target, not a range", mapping)
			continue
		}
		if p.HostIP != "" {
			sm.warnAt("ports", "%s:%s: the host address %s is ignored: the agent's --publish-addr says where ports are published", p.HostIP, mapping, p.HostIP)
		}
		e.Ports = append(e.Ports, spec.PortMapping{Published: published, Target: int(p.Target), Protocol: "tcp"})
	}
	if e.Port == 0 {
		for _, x := range sm.s.Expose {
			port, _, _ := strings.Cut(x, "/")
			port, _, _ = strings.Cut(port, "-")
			if n, err := strconv.Atoi(port); err == nil {
				e.Port = n
				break
			}
		}
	}
}

// health maps healthcheck, which runs as the container's Docker HEALTHCHECK.
func (sm *serviceMapper) health() {
	hc := sm.s.HealthCheck
	if hc == nil {
		return
	}
	if hc.Disable || (len(hc.Test) > 0 && hc.Test[0] == "NONE") {
		sm.warnAt("healthcheck", "disabling the image's HEALTHCHECK is not supported by Hatchery: the image's check, if it has one, is used")
		return
	}
	h := &spec.Health{Interval: dockerHealthInterval, Timeout: dockerHealthTimeout, Retries: dockerHealthRetries}
	if len(hc.Test) > 0 {
		for _, w := range hc.Test {
			h.Cmd = append(h.Cmd, sm.withRefs(w, "healthcheck.test"))
		}
	}
	if hc.Interval != nil {
		h.Interval = time.Duration(*hc.Interval)
	}
	if hc.Timeout != nil {
		h.Timeout = time.Duration(*hc.Timeout)
	}
	if hc.StartPeriod != nil {
		h.StartPeriod = time.Duration(*hc.StartPeriod)
	}
	if hc.Retries != nil && *hc.Retries > 0 {
		h.Retries = int(*hc.Retries)
	}
	sm.egg.Health = h
}

// extension reads x-hatch: what hatch.yaml has and Compose has not.
func (sm *serviceMapper) extension() {
	raw, ok := sm.s.Extensions["x-hatch"]
	if !ok || raw == nil {
		return
	}
	ext, ok := raw.(map[string]any)
	if !ok {
		sm.errorAt("x-hatch", "must be a mapping, for example {routes: [shop.localhost]}")
		return
	}
	for _, k := range sortedKeys(ext) {
		switch v := ext[k]; k {
		case "routes":
			list, ok := v.([]any)
			if !ok {
				sm.errorAt("x-hatch.routes", "must be a list of hostnames, optionally with a path, for example [shop.localhost, api.localhost/v1]")
				continue
			}
			for _, item := range list {
				r, ok := sm.route(item)
				if ok {
					sm.egg.Routes = append(sm.egg.Routes, r)
				}
			}
		case "port":
			port, ok := v.(int)
			if !ok || port < 1 || port > 65535 {
				sm.errorAt("x-hatch.port", "%v must be the port the service listens on, from 1 to 65535", v)
				continue
			}
			sm.egg.Port = port
		case "schedule":
			sm.egg.Schedule = sm.schedule(v)
		default:
			sm.errorAt("x-hatch", "unknown key %q: x-hatch has routes, port and schedule", k)
		}
	}
	if sm.egg.Schedule != nil && sm.s.Scale == nil && (sm.s.Deploy == nil || sm.s.Deploy.Replicas == nil) {
		sm.egg.Replicas = 0 // a scheduled egg has none; written ones are refused by spec's checks
	}
	if len(sm.egg.Routes) > 0 && sm.egg.Port == 0 {
		sm.errorAt("x-hatch.routes", "the service has routes but no port to send their requests to: publish one under ports:, list it under expose:, or set x-hatch.port")
	}
}

// scheduleKeys are x-hatch.schedule's keys that hold text, and where each
// goes; keep_runs is the one number.
var scheduleKeys = map[string]func(*inputs.Schedule) *string{
	"cron":              func(s *inputs.Schedule) *string { return &s.Cron },
	"timezone":          func(s *inputs.Schedule) *string { return &s.Timezone },
	"every":             func(s *inputs.Schedule) *string { return &s.Every },
	"concurrency":       func(s *inputs.Schedule) *string { return &s.Concurrency },
	"timeout":           func(s *inputs.Schedule) *string { return &s.Timeout },
	"starting_deadline": func(s *inputs.Schedule) *string { return &s.StartingDeadline },
}

// schedule reads x-hatch.schedule, as hatch.yaml's schedule: its values
// as written, which spec's parse of the converted file checks (a bad cron
// expression, zone or duration is refused there, at this setting's line).
func (sm *serviceMapper) schedule(v any) *inputs.Schedule {
	obj, ok := v.(map[string]any)
	if !ok {
		sm.errorAt("x-hatch.schedule", `must be a mapping: {cron: "0 3 * * *", timezone: Europe/Berlin} or {every: 15m}`)
		return nil
	}
	s := &inputs.Schedule{}
	for _, k := range sortedKeys(obj) {
		value := obj[k]
		if k == "keep_runs" {
			n, isInt := value.(int)
			if !isInt || n < 1 {
				sm.errorAt("x-hatch.schedule", "keep_runs: %v must be a whole number of runs, at least 1", value)
				continue
			}
			s.KeepRuns = n
			continue
		}
		field, known := scheduleKeys[k]
		if !known {
			sm.errorAt("x-hatch.schedule", "unknown key %q: a schedule has %s and keep_runs", k, strings.Join(sortedKeys(scheduleKeys), ", "))
			continue
		}
		switch value.(type) {
		case string, int, float64, bool:
			*field(s) = fmt.Sprint(value) // plain text, as spec reads it; any "$" is refused by its checks
		default:
			sm.errorAt("x-hatch.schedule", "%s: %v must be a single value", k, value)
		}
	}
	return s
}

// route reads one x-hatch route: a hostname, optionally with a path, or
// {host: ..., tls: auto | off, hsts: true}. (A certificate from secrets is
// written in hatch.yaml: Compose has no secret references to give it.)
func (sm *serviceMapper) route(item any) (spec.Route, bool) {
	var r spec.Route
	route, ok := item.(string)
	if obj, isMap := item.(map[string]any); isMap {
		route, ok = obj["host"].(string)
		for _, k := range sortedKeys(obj) {
			switch v := obj[k]; k {
			case "host":
			case "tls":
				mode, _ := v.(string)
				if mode != spec.TLSAuto && mode != spec.TLSOff {
					sm.errorAt("x-hatch.routes", "tls of %v must be auto or off (give a certificate of your own in hatch.yaml, which hatch convert writes from this file)", route)
					return r, false
				}
				r.TLS = mode
			case "hsts":
				b, isBool := v.(bool)
				if !isBool {
					sm.errorAt("x-hatch.routes", "hsts of %v must be true or false", route)
					return r, false
				}
				r.HSTS = b
			default:
				sm.errorAt("x-hatch.routes", "unknown key %q in a route: a route has host, tls and hsts", k)
				return r, false
			}
		}
	}
	if !ok {
		sm.errorAt("x-hatch.routes", "%v is not a hostname, nor {host: shop.example.com, tls: auto}", item)
		return r, false
	}
	host, path, hasPath := strings.Cut(route, "/")
	r.Host, r.Path = host, "/"
	if hasPath {
		r.Path = literal("/" + path)
	}
	return r, true
}

// volumes maps named volumes and bind mounts; a tmpfs mount joins tmpfs.
func (sm *serviceMapper) volumes() {
	for _, v := range sm.s.Volumes {
		switch v.Type {
		case types.VolumeTypeVolume:
			if v.Source == "" {
				sm.warnAt("volumes", "the anonymous volume at %s is not mounted: it would keep no data across deploys; name it and define it under volumes: to keep its data", v.Target)
				continue
			}
			source, ok := sm.enc.volumes.lookup(v.Source)
			if !ok {
				sm.errorAt("volumes", "volume %q is not defined under volumes:", v.Source)
				continue
			}
			sm.egg.Volumes = append(sm.egg.Volumes, spec.Mount{Type: spec.MountVolume, Source: source, Target: literal(v.Target), ReadOnly: v.ReadOnly})
		case types.VolumeTypeBind:
			sm.egg.Volumes = append(sm.egg.Volumes, spec.Mount{Type: spec.MountBind, Source: literal(v.Source), Target: literal(v.Target), ReadOnly: v.ReadOnly})
		case types.VolumeTypeTmpfs:
			sm.egg.Tmpfs = append(sm.egg.Tmpfs, literal(v.Target))
		default:
			sm.warnAt("volumes", "the %s mount at %s is not supported by Hatchery and is not mounted", v.Type, v.Target)
		}
	}
}

func (sm *serviceMapper) tmpfs() {
	for _, t := range sm.s.Tmpfs {
		path, options, _ := strings.Cut(t, ":")
		if options != "" {
			sm.warnAt("tmpfs", "the options of %s (%s) are ignored: Hatchery mounts a tmpfs with Docker's defaults", path, options)
		}
		sm.egg.Tmpfs = append(sm.egg.Tmpfs, literal(path))
	}
}

// secrets mounts each secret at /run/secrets/<name>, as Compose does by
// default; another target cannot be expressed.
func (sm *serviceMapper) secrets() {
	for _, s := range sm.s.Secrets {
		name, ok := sm.enc.secrets.lookup(s.Source)
		if !ok || bool(sm.cp.Secrets[s.Source].External) {
			continue // reported with the secret
		}
		target := s.Target
		if target == "" {
			target = s.Source
		}
		if !strings.HasPrefix(target, "/") {
			target = "/run/secrets/" + target
		}
		if want := "/run/secrets/" + name; target != want {
			sm.warnAt("secrets", "%s is mounted at %s, not %s: Hatchery mounts a secret at /run/secrets/<its name in Hatchery>", s.Source, want, target)
		}
		sm.egg.Secrets = append(sm.egg.Secrets, name)
	}
}

// networks puts the egg on its networks, by priority then name as Compose
// orders them (the first is where its address is), with each network's
// aliases, its container_name and its original name as aliases.
func (sm *serviceMapper) networks() {
	e := sm.egg
	addAlias := func(a string) {
		if a != "" && a != e.Name && !slices.Contains(e.Aliases, a) {
			e.Aliases = append(e.Aliases, a)
		}
	}
	addAlias(sm.s.Name)
	addAlias(sm.s.ContainerName)
	for _, n := range sm.s.NetworksByPriority() {
		name, ok := sm.enc.networks.lookup(n)
		if !ok {
			continue
		}
		e.Networks = append(e.Networks, name)
		if cfg := sm.s.Networks[n]; cfg != nil {
			for _, a := range cfg.Aliases {
				addAlias(a)
			}
		}
	}
	if len(e.Networks) == 0 {
		e.Networks = []string{spec.DefaultNetwork}
	}
}

func (sm *serviceMapper) dependsOn() {
	for _, dep := range sortedKeys(sm.s.DependsOn) {
		d := sm.s.DependsOn[dep]
		if _, active := sm.cp.Services[dep]; !active && !d.Required {
			continue // an optional dependency on a service of another profile
		}
		cond, ok := spec.ComposeCondition(d.Condition)
		if !ok {
			sm.errorAt("depends_on."+dep+".condition", "%q is not a condition: write service_started, service_healthy or service_completed_successfully", d.Condition)
			continue
		}
		egg, _ := sm.enc.services.lookup(dep)
		sm.egg.DependsOn = append(sm.egg.DependsOn, spec.DependsOn{Egg: egg, Condition: cond})
	}
}

// deploy maps deploy: replicas came with the egg, and so did mode.
func (sm *serviceMapper) deploy() {
	e, d := sm.egg, sm.s.Deploy
	limits := types.Resource{NanoCPUs: types.NanoCPUs(sm.s.CPUS), MemoryBytes: sm.s.MemLimit, Pids: sm.s.PidsLimit}
	if d != nil && d.Resources.Limits != nil {
		limits = *d.Resources.Limits
	}
	e.Resources = spec.Resources{Memory: int64(limits.MemoryBytes), CPUs: cpus(float32(limits.NanoCPUs)), Pids: limits.Pids}
	if d == nil {
		return
	}
	if d.Mode != "" && d.Mode != "replicated" {
		sm.warnAt("deploy.mode", "%s is not supported by Hatchery: the service runs %d replica(s), spread over the hosts", d.Mode, e.Replicas)
	}
	if u := d.UpdateConfig; u != nil {
		sm.updateConfig(u)
	}
	for _, c := range d.Placement.Constraints {
		if host, ok := hostnameConstraint(c); ok {
			e.Placement.Hosts = append(e.Placement.Hosts, host)
		} else {
			sm.warnAt("deploy.placement.constraints", "%q is not supported by Hatchery and is ignored: only node.hostname == <host> is (a host's name, see hatch agent --name)", c)
		}
	}
}

func (sm *serviceMapper) updateConfig(u *types.UpdateConfig) {
	ro := &sm.egg.Rollout
	if u.Parallelism != nil {
		if *u.Parallelism == 0 { // Compose: all at once
			ro.MaxSurge = spec.Surge{Percent: 100}
		} else {
			ro.MaxSurge = spec.Surge{Count: int(*u.Parallelism)}
		}
	}
	switch u.Order {
	case "":
	case "start-first", "stop-first":
		ro.Order = spec.Order(u.Order)
	default:
		sm.errorAt("deploy.update_config.order", "%q is not an order: write start-first or stop-first", u.Order)
	}
	ro.MinReady = time.Duration(u.Monitor)
	switch u.FailureAction {
	case "rollback":
		ro.AutoRevert = true
	case "", "pause":
	default:
		sm.warnAt("deploy.update_config.failure_action", "%s is not supported by Hatchery: a failed rollout stops, as with pause", u.FailureAction)
	}
}

// hostnameConstraint reads "node.hostname == host".
func hostnameConstraint(c string) (string, bool) {
	key, value, ok := strings.Cut(c, "==")
	if !ok || strings.TrimSpace(key) != "node.hostname" {
		return "", false
	}
	host := strings.TrimSpace(value)
	return host, host != ""
}

// cpus turns Compose's float32 into the float64 a user would write (0.1,
// not 0.10000000149011612).
func cpus(f float32) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(float64(f), 'f', -1, 32), 64)
	return v
}

// restart maps restart and deploy.restart_policy (which wins, as in
// Compose). A service nothing says anything about restarts always, except
// one another service waits to complete: Compose never restarts it by
// default, so it is a one-shot job.
func (sm *serviceMapper) restart() {
	e := sm.egg
	if d := sm.s.Deploy; d != nil && d.RestartPolicy != nil && d.RestartPolicy.Condition != "" {
		switch c := d.RestartPolicy.Condition; c {
		case "none":
			e.Restart = spec.RestartNo
		case "on-failure":
			e.Restart = spec.RestartOnFailure
		case "any":
			e.Restart = spec.RestartAlways
		default:
			sm.errorAt("deploy.restart_policy.condition", "%q is not a condition: write none, on-failure or any", c)
		}
		return
	}
	policy, count, _ := strings.Cut(sm.s.Restart, ":")
	switch policy {
	case "":
		if sm.awaited[sm.s.Name] {
			e.Restart = spec.RestartNo
		}
	case "no":
		e.Restart = spec.RestartNo
	case "always", "unless-stopped":
		e.Restart = spec.RestartAlways
	case "on-failure":
		e.Restart = spec.RestartOnFailure
		if count != "" {
			sm.warnAt("restart", "the limit of %s restarts is not supported by Hatchery: it restarts a failing container with a back-off, without a limit", count)
		}
	default:
		sm.errorAt("restart", "%q is not a restart policy: write no, always, on-failure or unless-stopped", sm.s.Restart)
	}
}

func literalMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = literal(v)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
