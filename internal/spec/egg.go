package spec

import (
	"fmt"
	"math"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/schedule"
)

// Defaults of an egg's settings, applied where the file says nothing.
const (
	DefaultReplicas         = 1
	DefaultSurgePercent     = 25
	DefaultDrainTimeout     = 10 * time.Second
	DefaultProgressDeadline = 5 * time.Minute
	DefaultStopSignal       = "SIGTERM"
	DefaultStopTimeout      = 10 * time.Second
	DefaultHealthInterval   = 5 * time.Second
	DefaultHealthTimeout    = 2 * time.Second
	DefaultHealthRetries    = 3
	DefaultDockerfile       = "Dockerfile"
)

// eggFields are the settings of an egg, in the order SPEC.md lists them.
var eggFields = []string{
	"build", "image", "pull", "replicas", "command", "entrypoint", "user", "working_dir",
	"port", "ports", "env", "health", "routes", "aliases", "rollout", "restart",
	"resources", "volumes", "tmpfs", "read_only", "cap_add", "cap_drop", "labels",
	"secrets", "networks", "depends_on", "stop_signal", "stop_timeout", "placement",
	"schedule",
}

// scheduleFields are the settings of an egg's schedule.
var scheduleFields = []string{"cron", "timezone", "every", "concurrency", "timeout", "starting_deadline", "keep_runs"}

// notScheduled are the settings a scheduled egg cannot have, with why.
var notScheduled = []struct{ field, why string }{
	{"replicas", "each tick runs one container of it, and nothing runs between ticks"},
	{"routes", "it has no long-running replica for the ingress to route to"},
	{"ports", "it has no long-running replica to publish a port of"},
	{"health", "its runs are judged by their exit code, not by a health check"},
}

// composeNames are Compose's names for settings hatch.yaml names otherwise,
// so that a Compose habit gets a precise hint rather than a guess.
var composeNames = map[string]string{
	"environment":    `it is called "env" in hatch.yaml`,
	"healthcheck":    `it is called "health" in hatch.yaml`,
	"deploy":         `hatch.yaml sets replicas, resources, rollout and placement on the egg itself`,
	"container_name": `containers are named by Hatchery (one per replica); other eggs reach this one by its name or aliases`,
	"expose":         `set port: to the port the egg listens on`,
	"env_file":       `write the variables under env:, or read them from hatch's environment with ${env.NAME}`,
}

// eggDecoder reads one egg.
type eggDecoder struct {
	*decoder
	egg *Egg
	dir string // the project file's directory, for bind mounts
}

// egg decodes one entry of eggs:. It always returns an egg, with defaults
// wherever the file has nothing usable, so that the checks after it still run.
func (d *decoder) egg(f field, dir string) *Egg {
	e := &Egg{
		Name:        f.Key,
		Line:        f.Line,
		Replicas:    DefaultReplicas,
		Env:         map[string]string{},
		Labels:      map[string]string{},
		Restart:     RestartAlways,
		StopSignal:  DefaultStopSignal,
		StopTimeout: DefaultStopTimeout,
		Rollout: Rollout{
			MaxSurge:         Surge{Percent: DefaultSurgePercent},
			DrainTimeout:     DefaultDrainTimeout,
			ProgressDeadline: DefaultProgressDeadline,
		},
		lines: map[string]int{},
	}
	ed := &eggDecoder{decoder: d, egg: e, dir: dir}
	what := fmt.Sprintf("egg %q", e.Name)
	n := resolve(f.Value)
	if n == nil || isNull(n) {
		d.errorf(f.Line, "%s is empty: give it at least build: or image:", what)
		return e
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n.Line, "%s must be a mapping of its settings, for example {image: nginx:1.27}, not %s", what, describe(n))
		return e
	}
	for _, g := range d.fields(n, what) {
		switch hint, compose := composeNames[g.Key]; {
		case contains(eggFields, g.Key):
			e.lines[g.Key] = g.Line
			ed.field(g, what+" "+g.Key)
		case compose:
			d.errorf(g.Line, "%s: unknown field %q: %s", what, g.Key, hint)
		default:
			d.errorf(g.Line, "%s: unknown field %q%s", what, g.Key, suggestOrList(g.Key, eggFields))
		}
	}
	if e.Build == nil && e.Image == "" && e.lines["build"] == 0 && e.lines["image"] == 0 {
		d.errorf(f.Line, "%s needs build: (a directory with a Dockerfile) or image: (an image reference)", what)
	}
	if e.lines["build"] != 0 && e.lines["pull"] != 0 {
		d.errorf(e.lines["pull"], "%s builds its image: pull: is for image: (remove it)", what)
	}
	if e.lines["build"] != 0 && e.lines["image"] != 0 {
		d.errorf(max(e.lines["build"], e.lines["image"]), "%s has both build: and image: keep one of them (build: builds the image from a directory, image: runs an existing one)", what)
	}
	if len(e.Networks) == 0 {
		e.Networks = []string{DefaultNetwork}
	}
	if e.Schedule != nil {
		for _, f := range notScheduled {
			if line := e.lines[f.field]; line != 0 {
				d.errorf(line, "%s has a schedule and %s: a scheduled egg cannot have %s, since %s; remove %s (or the schedule)", what, f.field, f.field, f.why, f.field)
			}
		}
		e.Replicas = 0
	}
	if e.Rollout.Order == "" { // not written, or reported as wrong
		e.Rollout.Order = StartFirst
		if e.Stateful() {
			e.Rollout.Order = StopFirst
		}
	}
	return e
}

// field decodes one setting of the egg.
func (ed *eggDecoder) field(g field, what string) {
	e := ed.egg
	switch g.Key {
	case "build":
		e.Build = ed.build(g.Value, what)
	case "image":
		if v, ok := ed.text(g.Value, what, nil); ok {
			if err := checkImage(v); err != nil {
				ed.errorf(g.Line, "%s: %v", what, err)
			}
			e.Image = v
		}
	case "pull":
		if v, ok := ed.plain(g.Value, what); ok {
			p, err := ParsePull(v)
			if err != nil {
				ed.errorf(g.Line, "%s: %v", what, err)
			}
			e.Pull = p
		}
	case "replicas":
		if v, ok := ed.integer(g.Value, what, 0, MaxReplicas); ok {
			e.Replicas = v
		}
	case "command", "entrypoint":
		if v, ok := ed.command(g.Value, what); ok {
			if g.Key == "command" {
				e.Command = v
			} else {
				e.Entrypoint = v
			}
		}
	case "user":
		e.User, _ = ed.text(g.Value, what, nil)
	case "working_dir":
		if v, ok := ed.text(g.Value, what, nil); ok {
			if !strings.HasPrefix(v, "/") {
				ed.errorf(g.Line, "%s: %q must be an absolute path, for example /srv", what, v)
			}
			e.WorkingDir = v
		}
	case "port":
		e.Port, _ = ed.integer(g.Value, what, 1, MaxPort)
	case "ports":
		ed.ports(g.Value, what)
	case "env":
		ed.env(g.Value, what)
	case "health":
		e.Health = ed.health(g.Value, what)
	case "routes":
		ed.routes(g.Value, what)
	case "aliases":
		if v, ok := ed.plainList(g.Value, what, "[shop-web]"); ok {
			for _, a := range v {
				if !aliasRE.MatchString(a) {
					ed.errorf(g.Line, "%s: %q %s", what, a, AliasRule)
				}
			}
			e.Aliases = v
		}
	case "rollout":
		ed.rollout(g.Value, what)
	case "restart":
		if v, ok := ed.plain(g.Value, what); ok {
			switch r := Restart(v); r {
			case RestartAlways, RestartOnFailure, RestartNo:
				e.Restart = r
			case "unless-stopped":
				ed.errorf(g.Line, "%s: %q is Compose's; write always (Hatchery restarts an egg until it is removed from the file)", what, v)
			default:
				ed.errorf(g.Line, "%s: %q is not a restart policy: write always (a service), on-failure, or no (a one-shot job)", what, v)
			}
		}
	case "resources":
		ed.resources(g.Value, what)
	case "volumes":
		ed.mounts(g.Value, what)
	case "tmpfs":
		if v, ok := ed.plainList(g.Value, what, "[/tmp]"); ok {
			for _, p := range v {
				if !strings.HasPrefix(p, "/") {
					ed.errorf(g.Line, "%s: %q must be an absolute path, for example /tmp", what, p)
				}
				e.Tmpfs = append(e.Tmpfs, escape(path.Clean(p)))
			}
		}
	case "read_only":
		e.ReadOnly, _ = ed.boolean(g.Value, what)
	case "cap_add", "cap_drop":
		caps := ed.capabilities(g.Value, what)
		if g.Key == "cap_add" {
			e.CapAdd = caps
		} else {
			e.CapDrop = caps
		}
	case "labels":
		e.Labels = ed.labels(g.Value, what)
	case "secrets":
		e.Secrets = ed.names(g.Value, what, "[api_key]")
	case "networks":
		e.Networks = ed.names(g.Value, what, "[backend]")
	case "depends_on":
		ed.dependsOn(g.Value, what)
	case "stop_signal":
		if v, ok := ed.plain(g.Value, what); ok {
			if sig, err := parseSignal(v); err != nil {
				ed.errorf(g.Line, "egg %q %v", e.Name, err)
			} else {
				e.StopSignal = sig
			}
		}
	case "stop_timeout":
		if v, ok := ed.duration(g.Value, what, 0); ok {
			e.StopTimeout = v
		}
	case "placement":
		for _, h := range ed.fields(g.Value, what, "hosts") {
			e.lines["placement.hosts"] = h.Line
			if v, ok := ed.plainList(h.Value, what+" hosts", "[host-a]"); ok {
				for _, host := range v {
					if !hostRE.MatchString(host) {
						ed.errorf(h.Line, "%s hosts: %q is not a host name (see hatch agent --name)", what, host)
					}
				}
				e.Placement.Hosts = v
			}
		}
	case "schedule":
		ed.schedule(g, what)
	}
}

// schedule reads an egg's schedule: {cron: "0 3 * * *", timezone:
// Europe/Berlin} or {every: 15m}, with its run rules; schedule.FromInputs
// checks it as the control plane will read it, and its complaint points at
// the field's line.
func (ed *eggDecoder) schedule(g field, what string) {
	s := &inputs.Schedule{}
	ok := true
	for _, f := range ed.fields(g.Value, what, scheduleFields...) {
		ed.egg.lines["schedule."+f.Key] = f.Line
		w := what + "." + f.Key
		var fieldOK bool
		switch f.Key {
		case "cron":
			s.Cron, fieldOK = ed.plain(f.Value, w)
		case "timezone":
			s.Timezone, fieldOK = ed.plain(f.Value, w)
		case "concurrency":
			s.Concurrency, fieldOK = ed.plain(f.Value, w)
		case "every", "timeout", "starting_deadline":
			var d time.Duration
			// Any duration: schedule.FromInputs says what is too short.
			if d, fieldOK = ed.duration(f.Value, w, math.MinInt64); fieldOK {
				v := formatDuration(d)
				switch f.Key {
				case "every":
					s.Every = v
				case "timeout":
					s.Timeout = v
				default:
					s.StartingDeadline = v
				}
			}
		case "keep_runs":
			s.KeepRuns, fieldOK = ed.integer(f.Value, w, 1, math.MaxInt32)
		}
		ok = ok && fieldOK
	}
	ed.egg.Schedule = s
	if !ok {
		return // its problems are reported; FromInputs would only guess at more
	}
	_, _, err := schedule.FromInputs(*s)
	for _, fe := range schedule.FieldErrors(err) {
		line := g.Line
		if l := ed.egg.lines["schedule."+fe.Field]; l != 0 {
			line = l
		}
		ed.errorf(line, "%s: %v", what, fe)
	}
}

func (ed *eggDecoder) build(n *yaml.Node, what string) *Build {
	b := &Build{Dockerfile: DefaultDockerfile, Args: map[string]string{}}
	n = resolve(n)
	if n.Kind == yaml.ScalarNode {
		v, ok := ed.plain(n, what)
		if !ok {
			return nil
		}
		b.Context = v
	} else {
		for _, f := range ed.fields(n, what, "context", "dockerfile", "args", "target") {
			switch f.Key {
			case "context":
				b.Context, _ = ed.plain(f.Value, what+" context")
			case "dockerfile":
				if v, ok := ed.plain(f.Value, what+" dockerfile"); ok {
					clean := path.Clean(filepath.ToSlash(v))
					if err := checkDockerfile(clean); err != nil {
						ed.errorf(f.Line, "%s dockerfile: %v", what, err)
					}
					b.Dockerfile = escape(clean)
				}
			case "args":
				b.Args, _ = ed.stringMap(f.Value, what+" args", nil)
			case "target":
				b.Target, _ = ed.text(f.Value, what+" target", nil)
			}
		}
	}
	if b.Context == "" {
		ed.errorf(n.Line, "%s needs a context: the directory with the Dockerfile, relative to this file (for example ./web)", what)
		return nil
	}
	b.Context = escape(path.Clean(filepath.ToSlash(b.Context)))
	return b
}

// command reads a command or entrypoint. The string form is refused rather
// than split: shell quoting rules would have to be guessed.
func (ed *eggDecoder) command(n *yaml.Node, what string) ([]string, bool) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && !isNull(n) {
		words := strings.Fields(n.Value)
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = strconv.Quote(w)
		}
		ed.errorf(n.Line, "%s must be a list, one element per argument: write [%s]", what, strings.Join(quoted, ", "))
		return nil, false
	}
	return ed.textList(n, what, `["/app", "--port", "8080"]`, &ed.egg.refs)
}

func (ed *eggDecoder) ports(n *yaml.Node, what string) {
	items, _ := ed.list(n, what, `["8088:8080"]`)
	for _, item := range items {
		v, ok := ed.plain(item, what)
		if !ok {
			continue
		}
		pm, err := parsePortMapping(v)
		if err != nil {
			ed.errorf(item.Line, "%s: %v", what, err)
			continue
		}
		pm.Line = item.Line
		ed.egg.Ports = append(ed.egg.Ports, pm)
	}
}

// env reads the environment, as a mapping or as Compose's list of NAME=value.
func (ed *eggDecoder) env(n *yaml.Node, what string) {
	e := ed.egg
	n = resolve(n)
	if n.Kind == yaml.SequenceNode {
		for _, item := range n.Content {
			v, ok := ed.text(item, what, &e.refs)
			if !ok {
				continue
			}
			name, value, found := strings.Cut(v, "=")
			if !found {
				ed.errorf(item.Line, "%s: %q has no value: write NAME=value", what, v)
				continue
			}
			ed.envVar(name, value, item.Line, what)
		}
		return
	}
	vars, lines := ed.stringMap(n, what, &e.refs)
	for _, name := range keys(vars) {
		ed.envVar(name, vars[name], lines[name], what)
	}
}

func (ed *eggDecoder) envVar(name, value string, line int, what string) {
	if !envName.MatchString(name) {
		ed.errorf(line, "%s: %q is not a variable name: use letters, digits and underscores, not starting with a digit", what, name)
		return
	}
	if _, dup := ed.egg.Env[name]; dup {
		ed.errorf(line, "%s: %s is set twice", what, name)
		return
	}
	ed.egg.Env[name] = value
}

func (ed *eggDecoder) health(n *yaml.Node, what string) *Health {
	e := ed.egg
	h := &Health{Interval: DefaultHealthInterval, Timeout: DefaultHealthTimeout, Retries: DefaultHealthRetries}
	var kinds []string
	for _, f := range ed.fields(n, what, "http", "tcp", "cmd", "interval", "timeout", "start_period", "retries") {
		e.lines["health."+f.Key] = f.Line
		w := what + "." + f.Key
		switch f.Key {
		case "http":
			kinds = append(kinds, f.Key)
			if v, ok := ed.text(f.Value, w, nil); ok {
				if !strings.HasPrefix(v, "/") {
					ed.errorf(f.Line, "%s: %q must be a path starting with /, for example /healthz", w, v)
				}
				h.HTTP = v
			}
		case "tcp":
			kinds = append(kinds, f.Key)
			if v, ok := ed.boolean(f.Value, w); ok {
				if !v {
					ed.errorf(f.Line, "%s: false means nothing here: remove it, or write tcp: true to check that the port accepts connections", w)
				}
				h.TCP = v
			}
		case "cmd":
			kinds = append(kinds, f.Key)
			h.Cmd = ed.healthCmd(f.Value, w)
		case "interval":
			h.Interval, _ = ed.duration(f.Value, w, MinHealthPeriod)
		case "timeout":
			h.Timeout, _ = ed.duration(f.Value, w, MinHealthPeriod)
		case "start_period":
			h.StartPeriod, _ = ed.duration(f.Value, w, 0)
		case "retries":
			h.Retries, _ = ed.integer(f.Value, w, 1, MaxHealthRetries)
		}
	}
	if len(kinds) > 1 {
		ed.errorf(e.lines["health."+kinds[1]], "%s has %s: keep one kind of check", what, strings.Join(kinds, " and "))
	}
	return h
}

// healthCmd reads a Docker HEALTHCHECK: ["CMD", args...], ["CMD-SHELL",
// "a shell line"], or a string, which is a CMD-SHELL line.
func (ed *eggDecoder) healthCmd(n *yaml.Node, what string) []string {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode {
		v, ok := ed.text(n, what, &ed.egg.refs)
		if !ok {
			return nil
		}
		return []string{"CMD-SHELL", v}
	}
	v, ok := ed.textList(n, what, `["CMD", "/app", "-check"]`, &ed.egg.refs)
	if !ok {
		return nil
	}
	if len(v) < 2 || (v[0] != "CMD" && v[0] != "CMD-SHELL") {
		ed.errorf(n.Line, `%s must start with "CMD" followed by the command and its arguments (["CMD", "/app", "-check"]), or be ["CMD-SHELL", "a shell line"]`, what)
		return nil
	}
	return v
}

// routes reads each route as a string ("api.localhost/v1") or as an object
// ({host: api.localhost/v1, upstream_timeout: 30s, tls: auto, hsts: true})
// for its settings.
func (ed *eggDecoder) routes(n *yaml.Node, what string) {
	items, _ := ed.list(n, what, `[shop.localhost, "api.localhost/v1", {host: slow.localhost, upstream_timeout: 2m}]`)
	for i, item := range items {
		var r Route
		at := item
		if resolve(item).Kind == yaml.MappingNode {
			w := fmt.Sprintf("%s[%d]", what, i)
			at = nil
			for _, f := range ed.fields(item, w, "host", "upstream_timeout", "tls", "hsts") {
				switch f.Key {
				case "host":
					at = f.Value
				case "upstream_timeout":
					r.UpstreamTimeout, _ = ed.duration(f.Value, w+".upstream_timeout", 10*time.Millisecond)
				case "tls":
					ed.routeTLS(f.Value, w+".tls", &r)
				case "hsts":
					r.HSTS, _ = ed.boolean(f.Value, w+".hsts")
				}
			}
			if at == nil {
				ed.errorf(item.Line, "%s has no host: write {host: shop.localhost, upstream_timeout: 30s}", w)
				continue
			}
		}
		v, ok := ed.plain(at, what)
		if !ok {
			continue
		}
		parsed, err := parseRoute(v)
		if err != nil {
			ed.errorf(at.Line, "%s: %v", what, err)
			continue
		}
		r.Host, r.Path = parsed.Host, escape(parsed.Path)
		r.Line = item.Line
		switch {
		case r.TLS == TLSAuto && !PublicName(r.Host):
			ed.errorf(item.Line, "%s: tls: auto needs a public DNS name, and %s is not one (localhost, an IP address or a single label): an ACME CA cannot validate it; write tls: off, or give your own certificate with tls: {cert: \"${secret.crt}\", key: \"${secret.key}\"}", what, r.Host)
		case r.HSTS && r.TLS == TLSOff:
			ed.errorf(item.Line, "%s: hsts needs TLS, and this route has tls: off: remove hsts, or serve the route over HTTPS", what)
		}
		ed.egg.Routes = append(ed.egg.Routes, r)
	}
}

// secretRefRE is a whole-value reference to a secret, as a route's own
// certificate and key are given.
var secretRefRE = regexp.MustCompile(`^\$\{secret\.([A-Za-z0-9_.-]+)\}$`)

// routeTLS reads a route's tls: auto, off, or {cert: "${secret.crt}", key:
// "${secret.key}"}: the user's PEM certificate chain and private key. The
// example its errors give quotes the references, as a flow mapping needs
// (see ExplainFlowReference), so that it can be copied as it is.
func (ed *eggDecoder) routeTLS(n *yaml.Node, what string, r *Route) {
	const example = `write tls: auto, tls: off, or tls: {cert: "${secret.crt}", key: "${secret.key}"}`
	if resolve(n).Kind == yaml.MappingNode {
		r.TLS = TLSSecret
		bad := false
		for _, f := range ed.fields(n, what, "cert", "key") {
			v, ok := ed.scalar(f.Value, what+"."+f.Key)
			if !ok {
				continue
			}
			m := secretRefRE.FindStringSubmatch(v)
			if m == nil {
				ed.errorf(f.Line, "%s.%s: %q is not a reference to a secret: %s", what, f.Key, v, example)
				bad = true
				continue
			}
			if f.Key == "cert" {
				r.CertSecret = m[1]
			} else {
				r.KeySecret = m[1]
			}
			ed.egg.tlsRefs = append(ed.egg.tlsRefs, lineRef{Ref: resource.Ref{Key: resource.Key(resource.Secret, m[1]), Output: "handle"}, Line: f.Line})
		}
		if !bad && (r.CertSecret == "" || r.KeySecret == "") {
			ed.errorf(n.Line, "%s: a certificate needs both cert and key: %s", what, example)
		}
		return
	}
	v, ok := ed.plain(n, what)
	if !ok {
		return
	}
	switch v {
	case TLSAuto, TLSOff:
		r.TLS = v
	default:
		ed.errorf(n.Line, "%s: unknown value %q: %s", what, v, example)
	}
}

func (ed *eggDecoder) rollout(n *yaml.Node, what string) {
	ro := &ed.egg.Rollout
	for _, f := range ed.fields(n, what, "order", "max_surge", "min_ready", "drain_timeout", "progress_deadline", "auto_revert") {
		ed.egg.lines["rollout."+f.Key] = f.Line
		w := what + "." + f.Key
		switch f.Key {
		case "order":
			if v, ok := ed.plain(f.Value, w); ok {
				switch o := Order(v); o {
				case StartFirst, StopFirst:
					ro.Order = o
				default:
					ed.errorf(f.Line, "%s: %q is not an order: write start-first (a new container is healthy before the old one stops) or stop-first", w, v)
				}
			}
		case "max_surge":
			if s, ok := ed.surge(f.Value, w); ok {
				ro.MaxSurge = s
			}
		case "min_ready":
			ro.MinReady, _ = ed.duration(f.Value, w, 0)
		case "drain_timeout":
			if v, ok := ed.duration(f.Value, w, 0); ok {
				ro.DrainTimeout = v
			}
		case "progress_deadline":
			if v, ok := ed.duration(f.Value, w, MinProgressDeadline); ok {
				ro.ProgressDeadline = v
			}
		case "auto_revert":
			ro.AutoRevert, _ = ed.boolean(f.Value, w)
		}
	}
}

// surge reads a number of slots (1) or a percentage of a host's slots (25%).
func (ed *eggDecoder) surge(n *yaml.Node, what string) (Surge, bool) {
	v, ok := ed.plain(n, what)
	if !ok {
		return Surge{}, false
	}
	if pct, isPct := strings.CutSuffix(v, "%"); isPct {
		if p, err := strconv.Atoi(pct); err == nil && p >= 1 && p <= 100 {
			return Surge{Percent: p}, true
		}
	} else if c, err := strconv.Atoi(v); err == nil && c >= 1 {
		return Surge{Count: c}, true
	}
	ed.errorf(n.Line, "%s: %q must be a number of slots (at least 1) or a percentage of a host's slots (1%% to 100%%), for example 1 or 25%%", what, v)
	return Surge{}, false
}

func (ed *eggDecoder) resources(n *yaml.Node, what string) {
	r := &ed.egg.Resources
	for _, f := range ed.fields(n, what, "memory", "cpus", "pids") {
		ed.egg.lines["resources."+f.Key] = f.Line
		w := what + "." + f.Key
		v, ok := ed.plain(f.Value, w)
		if !ok {
			continue
		}
		switch f.Key {
		case "memory":
			size, err := parseSize(v)
			switch {
			case err != nil:
				ed.errorf(f.Line, "%s: %v", w, err)
			case size < MinMemory:
				ed.errorf(f.Line, "%s: %s is below Docker's minimum of 6Mi", w, v)
			default:
				r.Memory = size
			}
		case "cpus":
			c, err := strconv.ParseFloat(v, 64)
			if err != nil || !(c > 0 && c <= MaxCPUs) {
				ed.errorf(f.Line, "%s: %q must be a number of cores above 0, for example 0.5 or 2", w, v)
				continue
			}
			r.CPUs = c
		case "pids":
			p, err := strconv.ParseInt(v, 10, 64)
			if err != nil || p < 1 {
				ed.errorf(f.Line, "%s: %q must be a whole number of processes, at least 1", w, v)
				continue
			}
			r.Pids = p
		}
	}
}

// mounts reads volumes: named volumes, and bind mounts, which are allowed
// with a warning because they tie the egg to the host that has the directory.
func (ed *eggDecoder) mounts(n *yaml.Node, what string) {
	items, _ := ed.list(n, what, `["pgdata:/var/lib/data"]`)
	for _, item := range items {
		v, ok := ed.plain(item, what)
		if !ok {
			continue
		}
		m, err := parseMount(v)
		if err != nil {
			ed.errorf(item.Line, "%s: %v", what, err)
			continue
		}
		m.Line = item.Line
		if m.Type == MountBind {
			if !filepath.IsAbs(m.Source) {
				m.Source = filepath.Join(ed.dir, m.Source)
				if abs, err := filepath.Abs(m.Source); err == nil {
					m.Source = abs
				}
			}
			ed.warnf(item.Line, "%s: %q is a bind mount of %s: it ties egg %q to a host that has this directory; prefer a named volume", what, v, m.Source, ed.egg.Name)
		}
		m.Source, m.Target = escape(m.Source), escape(m.Target)
		ed.egg.Volumes = append(ed.egg.Volumes, m)
	}
}

func (ed *eggDecoder) capabilities(n *yaml.Node, what string) []string {
	v, _ := ed.plainList(n, what, "[NET_ADMIN]")
	var out []string
	for _, c := range v {
		name := strings.TrimPrefix(strings.ToUpper(c), "CAP_")
		if !capRE.MatchString(name) {
			ed.errorf(resolve(n).Line, "%s: %q is not a capability, for example NET_ADMIN or ALL", what, c)
			continue
		}
		out = append(out, name)
	}
	return out
}

// names reads a list of volume, network or secret names; whether they are
// defined is checked with the whole project.
func (ed *eggDecoder) names(n *yaml.Node, what, example string) []string {
	v, _ := ed.plainList(n, what, example)
	seen := map[string]bool{}
	var out []string
	for _, name := range v {
		if seen[name] {
			ed.errorf(resolve(n).Line, "%s: %q is listed twice", what, name)
			continue
		}
		seen[name] = true
		out = append(out, name)
	}
	return out
}

// condition is one of depends_on's conditions: its name in hatch.yaml and
// in Compose.
type condition struct {
	name, compose string
	cond          resource.Condition
}

// conditions are depends_on's conditions, the one list of them.
var conditions = []condition{
	{"started", "service_started", resource.ConditionCreated},
	{"healthy", "service_healthy", resource.ConditionHealthy},
	{"completed", "service_completed_successfully", resource.ConditionCompleted},
}

// ComposeCondition returns the condition a Compose depends_on condition
// (service_started, service_healthy, service_completed_successfully) stands
// for, the same as its hatch.yaml name does.
func ComposeCondition(name string) (resource.Condition, bool) {
	for _, c := range conditions {
		if c.compose == name {
			return c.cond, true
		}
	}
	return "", false
}

// dependsOn reads a list of egg names, or a mapping of egg names to
// {condition: started|healthy|completed}.
func (ed *eggDecoder) dependsOn(n *yaml.Node, what string) {
	e := ed.egg
	n = resolve(n)
	if n.Kind == yaml.SequenceNode {
		for _, item := range n.Content {
			if name, ok := ed.plain(item, what); ok {
				e.DependsOn = append(e.DependsOn, DependsOn{Egg: name, Line: item.Line})
			}
		}
		return
	}
	for _, f := range ed.fields(n, what) {
		dep := DependsOn{Egg: f.Key, Line: f.Line}
		if v := resolve(f.Value); v.Kind == yaml.ScalarNode && !isNull(v) {
			ed.errorf(f.Line, "%s %s: write %s: {condition: %s}", what, f.Key, f.Key, v.Value)
			continue
		}
		for _, c := range ed.fields(f.Value, what+" "+f.Key, "condition") {
			v, ok := ed.plain(c.Value, what+" "+f.Key+" condition")
			if !ok {
				continue
			}
			i := slices.IndexFunc(conditions, func(c condition) bool { return c.name == v || c.compose == v })
			switch {
			case i >= 0 && conditions[i].name == v:
				dep.Condition = conditions[i].cond
			case i >= 0:
				ed.errorf(c.Line, "%s %s: condition %q is Compose's: write %s", what, f.Key, v, conditions[i].name)
			default:
				ed.errorf(c.Line, "%s %s: %q is not a condition: write started, healthy (its replicas are healthy) or completed (a one-shot job succeeded)", what, f.Key, v)
			}
		}
		e.DependsOn = append(e.DependsOn, dep)
	}
}
