package spec

import (
	"bytes"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

// Marshal writes a project as a canonical hatch.yaml: sections and eggs in a
// fixed order, each egg's settings in the order SPEC.md lists them, and only
// the settings that differ from their defaults. It is what `hatch convert`
// prints, so its promise is the round trip: parsing its output (as a file in
// p.Dir) gives a project with the same resources as p.
//
// p may come from Parse or be built by another loader (the Compose loader
// builds one and parses this output, so that a compose.yaml gets every check
// a hatch.yaml gets). Its strings are in the resource input encoding (see
// Project); Marshal writes them back the way a user writes them: canonical
// references as ${db.address}, a literal "$" as "$$". Bind mounts under p.Dir
// are written relative to it ("./static"), others as absolute paths.
func Marshal(p *Project) ([]byte, error) {
	w := &writer{dir: absDir(p.Dir)}
	root := mapping(false)
	add(root, "project", str(literal(p.Name)))

	eggs := mapping(false)
	for _, e := range p.Eggs {
		add(eggs, e.Name, w.egg(e))
	}
	add(root, "eggs", eggs)

	if len(p.Volumes) > 0 {
		vols := mapping(false)
		for _, v := range p.Volumes {
			n := mapping(v.Backup == nil)
			if len(v.Labels) > 0 {
				add(n, "labels", stringMap(v.Labels, true))
			}
			if v.Backup != nil {
				add(n, "backup", backupNode(v.Backup))
			}
			add(vols, v.Name, n)
		}
		add(root, "volumes", vols)
	}

	var networks []*Network
	for _, n := range p.Networks {
		if !impliedNetwork(p, n) {
			networks = append(networks, n)
		}
	}
	if len(networks) > 0 {
		nets := mapping(false)
		for _, n := range networks {
			m := mapping(true)
			if n.Internal {
				add(m, "internal", boolean(true))
			}
			if len(n.Labels) > 0 {
				add(m, "labels", stringMap(n.Labels, true))
			}
			add(nets, n.Name, m)
		}
		add(root, "networks", nets)
	}

	if len(p.Secrets) > 0 {
		secrets := mapping(false)
		for _, s := range p.Secrets {
			m := mapping(true)
			if s.File != "" {
				add(m, "file", str(dotted(text(s.File))))
			} else {
				add(m, "env", str(literal(s.Env)))
			}
			add(secrets, s.Name, m)
		}
		add(root, "secrets", secrets)
	}

	if len(p.Notify) > 0 {
		add(root, "notify", notifyNode(p.Notify))
	}

	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}}); err != nil {
		return nil, fmt.Errorf("write project %s: %w", p.Name, err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("write project %s: %w", p.Name, err)
	}
	return buf.Bytes(), nil
}

// impliedNetwork reports whether a network need not be written because
// parsing adds it anyway: the default network, unconfigured, with an egg on
// it. (An unconfigured default network that no egg uses is written, since
// parsing would not add it and it would no longer be a resource.)
func impliedNetwork(p *Project, n *Network) bool {
	if n.Name != DefaultNetwork || n.Internal || len(n.Labels) > 0 {
		return false
	}
	for _, e := range p.Eggs {
		if contains(e.Networks, DefaultNetwork) {
			return true
		}
		for _, r := range e.refs {
			if r.Key == "network/"+DefaultNetwork {
				return true
			}
		}
	}
	return false
}

type writer struct {
	dir string // the project's directory, absolute, for bind mounts
}

// egg writes one egg's settings, in the order of eggFields.
func (w *writer) egg(e *Egg) *yaml.Node {
	m := mapping(false)
	if b := e.Build; b != nil {
		add(m, "build", build(b))
	} else {
		add(m, "image", str(text(e.Image)))
		if e.Pull != "" {
			add(m, "pull", str(string(e.Pull)))
		}
	}
	// A scheduled egg has no replicas: one that has any (a loader's
	// mistake) is written, and the parse refuses it.
	if e.Schedule == nil && e.Replicas != DefaultReplicas || e.Schedule != nil && e.Replicas != 0 {
		add(m, "replicas", integer(e.Replicas))
	}
	if len(e.Command) > 0 {
		add(m, "command", texts(e.Command))
	}
	if len(e.Entrypoint) > 0 {
		add(m, "entrypoint", texts(e.Entrypoint))
	}
	if e.User != "" {
		add(m, "user", str(text(e.User)))
	}
	if e.WorkingDir != "" {
		add(m, "working_dir", str(text(e.WorkingDir)))
	}
	if e.Port != 0 {
		add(m, "port", integer(e.Port))
	}
	if len(e.Ports) > 0 {
		ports := sequence(true)
		for _, pm := range e.Ports {
			ports.Content = append(ports.Content, str(fmt.Sprintf("%d:%d", pm.Published, pm.Target)))
		}
		add(m, "ports", ports)
	}
	if len(e.Env) > 0 {
		add(m, "env", stringMap(e.Env, false))
	}
	if e.Health != nil {
		add(m, "health", health(e.Health))
	}
	if len(e.Routes) > 0 {
		routes := sequence(true)
		for _, r := range e.Routes {
			name := r.Host
			if r.Path != "/" {
				name += text(r.Path)
			}
			if r.UpstreamTimeout == 0 && r.TLS == TLSDefault && !r.HSTS {
				routes.Content = append(routes.Content, str(name))
				continue
			}
			obj := mapping(true)
			add(obj, "host", str(name))
			if r.UpstreamTimeout != 0 {
				add(obj, "upstream_timeout", duration(r.UpstreamTimeout))
			}
			switch r.TLS {
			case TLSAuto, TLSOff:
				add(obj, "tls", str(r.TLS))
			case TLSSecret:
				cert := mapping(true)
				add(cert, "cert", str("${secret."+r.CertSecret+"}"))
				add(cert, "key", str("${secret."+r.KeySecret+"}"))
				add(obj, "tls", cert)
			}
			if r.HSTS {
				add(obj, "hsts", boolean(true))
			}
			routes.Content = append(routes.Content, obj)
		}
		add(m, "routes", routes)
	}
	if len(e.Aliases) > 0 {
		add(m, "aliases", literals(e.Aliases))
	}
	if ro := rollout(e); len(ro.Content) > 0 {
		add(m, "rollout", ro)
	}
	if e.Restart != RestartAlways {
		add(m, "restart", str(string(e.Restart)))
	}
	if r := resources(e.Resources); len(r.Content) > 0 {
		add(m, "resources", r)
	}
	if len(e.Volumes) > 0 {
		vols := sequence(true)
		for _, v := range e.Volumes {
			vols.Content = append(vols.Content, str(w.mount(v)))
		}
		add(m, "volumes", vols)
	}
	if len(e.Tmpfs) > 0 {
		add(m, "tmpfs", texts(e.Tmpfs))
	}
	if e.ReadOnly {
		add(m, "read_only", boolean(true))
	}
	if len(e.CapAdd) > 0 {
		add(m, "cap_add", literals(e.CapAdd))
	}
	if len(e.CapDrop) > 0 {
		add(m, "cap_drop", literals(e.CapDrop))
	}
	if len(e.Labels) > 0 {
		add(m, "labels", stringMap(e.Labels, false))
	}
	if len(e.Secrets) > 0 {
		add(m, "secrets", literals(e.Secrets))
	}
	if len(e.Networks) > 0 && !(len(e.Networks) == 1 && e.Networks[0] == DefaultNetwork) {
		add(m, "networks", literals(e.Networks))
	}
	if len(e.DependsOn) > 0 {
		add(m, "depends_on", dependsOn(e.DependsOn))
	}
	if e.StopSignal != DefaultStopSignal {
		add(m, "stop_signal", str(literal(e.StopSignal)))
	}
	if e.StopTimeout != DefaultStopTimeout {
		add(m, "stop_timeout", duration(e.StopTimeout))
	}
	if len(e.Placement.Hosts) > 0 {
		pl := mapping(true)
		add(pl, "hosts", literals(e.Placement.Hosts))
		add(m, "placement", pl)
	}
	if s := e.Schedule; s != nil {
		add(m, "schedule", scheduleNode(s))
	}
	return m
}

// scheduleNode writes an egg's schedule as a flow mapping, {cron: "0 3 * *
// *", timezone: Europe/Berlin}, its fields in the order of scheduleFields.
func scheduleNode(s *inputs.Schedule) *yaml.Node {
	m := mapping(true)
	for _, f := range []struct{ key, value string }{
		{"cron", s.Cron}, {"timezone", s.Timezone}, {"every", s.Every}, {"concurrency", s.Concurrency},
		{"timeout", s.Timeout}, {"starting_deadline", s.StartingDeadline},
	} {
		if f.value != "" {
			add(m, f.key, str(literal(f.value)))
		}
	}
	if s.KeepRuns != 0 {
		add(m, "keep_runs", integer(s.KeepRuns))
	}
	return m
}

// build writes the short form (a directory) when nothing else is set.
func build(b *Build) *yaml.Node {
	context := dotted(text(b.Context))
	if b.Dockerfile == DefaultDockerfile && len(b.Args) == 0 && b.Target == "" {
		return str(context)
	}
	m := mapping(false)
	add(m, "context", str(context))
	if b.Dockerfile != DefaultDockerfile {
		add(m, "dockerfile", str(text(b.Dockerfile)))
	}
	if len(b.Args) > 0 {
		add(m, "args", stringMap(b.Args, false))
	}
	if b.Target != "" {
		add(m, "target", str(text(b.Target)))
	}
	return m
}

// health always writes the block, even empty: an egg with health: {} (the
// default timings for the fallback check) differs from one without.
func health(h *Health) *yaml.Node {
	m := mapping(false)
	switch {
	case h.HTTP != "":
		add(m, "http", str(text(h.HTTP)))
	case h.TCP:
		add(m, "tcp", boolean(true))
	case len(h.Cmd) > 0:
		add(m, "cmd", texts(h.Cmd))
	}
	if h.Interval != DefaultHealthInterval {
		add(m, "interval", duration(h.Interval))
	}
	if h.Timeout != DefaultHealthTimeout {
		add(m, "timeout", duration(h.Timeout))
	}
	if h.StartPeriod != 0 {
		add(m, "start_period", duration(h.StartPeriod))
	}
	if h.Retries != DefaultHealthRetries {
		add(m, "retries", integer(h.Retries))
	}
	if len(m.Content) == 0 {
		m.Style = yaml.FlowStyle
	}
	return m
}

func rollout(e *Egg) *yaml.Node {
	ro := e.Rollout
	m := mapping(false)
	order := StartFirst
	if e.Stateful() {
		order = StopFirst
	}
	if ro.Order != order {
		add(m, "order", str(string(ro.Order)))
	}
	switch {
	case ro.MaxSurge.Count > 0:
		add(m, "max_surge", integer(ro.MaxSurge.Count))
	case ro.MaxSurge.Percent != DefaultSurgePercent:
		add(m, "max_surge", str(fmt.Sprintf("%d%%", ro.MaxSurge.Percent)))
	}
	if ro.MinReady != 0 {
		add(m, "min_ready", duration(ro.MinReady))
	}
	if ro.DrainTimeout != DefaultDrainTimeout {
		add(m, "drain_timeout", duration(ro.DrainTimeout))
	}
	if ro.ProgressDeadline != DefaultProgressDeadline {
		add(m, "progress_deadline", duration(ro.ProgressDeadline))
	}
	if ro.AutoRevert {
		add(m, "auto_revert", boolean(true))
	}
	return m
}

func resources(r Resources) *yaml.Node {
	m := mapping(true)
	if r.Memory != 0 {
		add(m, "memory", str(formatSize(r.Memory)))
	}
	if r.CPUs != 0 {
		add(m, "cpus", number(strconv.FormatFloat(r.CPUs, 'f', -1, 64)))
	}
	if r.Pids != 0 {
		add(m, "pids", number(strconv.FormatInt(r.Pids, 10)))
	}
	return m
}

// mount writes "source:target[:ro]".
func (w *writer) mount(m Mount) string {
	source := unescape(m.Source)
	if m.Type == MountBind {
		source = w.bindSource(source)
	}
	s := source + ":" + unescape(m.Target)
	if m.ReadOnly {
		s += ":ro"
	}
	return literal(s)
}

// bindSource writes a bind mount's absolute source relative to the project's
// directory when it lies inside it, so the output does not depend on where
// the project is checked out.
func (w *writer) bindSource(abs string) string {
	if w.dir == "" {
		return abs
	}
	rel, err := filepath.Rel(w.dir, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return abs
	}
	return "./" + filepath.ToSlash(rel)
}

// dependsOn writes the list form when every condition is "started", else the
// mapping form.
func dependsOn(deps []DependsOn) *yaml.Node {
	plain := true
	for _, d := range deps {
		plain = plain && d.Condition == resource.ConditionCreated
	}
	if plain {
		s := sequence(true)
		for _, d := range deps {
			s.Content = append(s.Content, str(literal(d.Egg)))
		}
		return s
	}
	m := mapping(false)
	for _, d := range deps {
		cond := mapping(true)
		add(cond, "condition", str(conditionName(d.Condition)))
		add(m, d.Egg, cond)
	}
	return m
}

// conditionName is a condition as hatch.yaml writes it.
func conditionName(c resource.Condition) string {
	for _, cond := range conditions {
		if cond.cond == c {
			return cond.name
		}
	}
	return string(c)
}

// formatSize writes a size in the largest binary unit that divides it.
func formatSize(bytes int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if bytes%u.size == 0 {
			return strconv.FormatInt(bytes/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(bytes, 10)
}

// text writes a string held in the input encoding as a user writes it in
// hatch.yaml: a canonical reference as the user's (${egg/db.address} as
// ${db.address}), an encoded literal "${" as "$${", any other "$" as "$$".
func text(encoded string) string {
	if !strings.Contains(encoded, "$") {
		return encoded
	}
	var b strings.Builder
	for i := 0; i < len(encoded); {
		rest := encoded[i:]
		switch {
		case strings.HasPrefix(rest, "$${"):
			b.WriteString("$${")
			i += 3
		case strings.HasPrefix(rest, "${"):
			if r, n, ok := leadingRef(rest); ok {
				b.WriteString(userRef(r))
				i += n
				continue
			}
			// Not a reference: the encoding holds no such string, but write
			// it as the literal it would then be.
			b.WriteString("$$")
			i++
		case rest[0] == '$':
			b.WriteString("$$")
			i++
		default:
			b.WriteByte(rest[0])
			i++
		}
	}
	return b.String()
}

// dotted writes a relative path with a leading "./", so that it reads as
// one: "./web" rather than "web".
func dotted(path string) string {
	if strings.HasPrefix(path, "/") || strings.HasPrefix(path, ".") {
		return path
	}
	return "./" + path
}

// leadingRef parses the canonical reference s starts with, and its length.
func leadingRef(s string) (resource.Ref, int, bool) {
	end := strings.IndexByte(s, '}')
	if end < 0 {
		return resource.Ref{}, 0, false
	}
	r, err := resource.ParseRef(s[2:end])
	return r, end + 1, err == nil
}

// literal writes a plain string (a name, a signal) so that reading it back
// gives it unchanged: every "$" doubled.
func literal(s string) string { return strings.ReplaceAll(s, "$", "$$") }

// absDir returns the project's directory as an absolute path, or "" if the
// working directory is unknown.
func absDir(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return ""
	}
	return abs
}

// Node builders. Scalars carry their tag, so that the encoder quotes a string
// that would otherwise read as another type ("no", "1", "true").

func mapping(flow bool) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	if flow {
		n.Style = yaml.FlowStyle
	}
	return n
}

func sequence(flow bool) *yaml.Node {
	n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	if flow {
		n.Style = yaml.FlowStyle
	}
	return n
}

func add(m *yaml.Node, key string, value *yaml.Node) {
	m.Content = append(m.Content, str(key), value)
}

// str is a string scalar, double-quoted when a reader could take it for
// something else: YAML syntax, a number, or one of YAML 1.1's booleans
// (restart: "no"), as other tools may read the file with YAML 1.1 rules.
func str(s string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
	if needsQuotes(s) {
		n.Style = yaml.DoubleQuotedStyle
	}
	return n
}

// yaml11Words are read as booleans or null by YAML 1.1.
var yaml11Words = []string{"y", "yes", "n", "no", "on", "off", "true", "false", "null", "~"}

func needsQuotes(s string) bool {
	if s == "" || strings.ContainsAny(s, ":{}[],#&*!|>'\"%@`$ \t\n") || strings.ContainsAny(s[:1], "-?") {
		return true
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return true
	}
	return contains(yaml11Words, strings.ToLower(s))
}

// number is a numeric scalar written as it is.
func number(s string) *yaml.Node {
	tag := "!!int"
	if strings.ContainsAny(s, ".eE") {
		tag = "!!float"
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: s}
}

func integer(i int) *yaml.Node { return number(strconv.Itoa(i)) }

func boolean(b bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(b)}
}

func duration(d time.Duration) *yaml.Node { return str(formatDuration(d)) }

// texts writes a list of encoded strings (a command, tmpfs paths).
func texts(list []string) *yaml.Node {
	s := sequence(true)
	for _, v := range list {
		s.Content = append(s.Content, str(text(v)))
	}
	return s
}

// literals writes a list of plain strings (names, capabilities).
func literals(list []string) *yaml.Node {
	s := sequence(true)
	for _, v := range list {
		s.Content = append(s.Content, str(literal(v)))
	}
	return s
}

// stringMap writes a mapping of encoded strings (env, labels), sorted by key.
func stringMap(m map[string]string, flow bool) *yaml.Node {
	n := mapping(flow)
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		add(n, k, str(text(m[k])))
	}
	return n
}
