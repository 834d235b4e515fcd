package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
	"github.com/hatchery/hatchery/internal/schedule"
)

// The limits of a file, here once: the loader and CheckResource both use them.
const (
	// MaxReplicas is the most replicas an egg may ask for in a file. A
	// control plane may allow fewer (Limits.MaxReplicas).
	MaxReplicas = 10000
	// MaxPort is the highest TCP port.
	MaxPort = 65535
	// MinMemory is Docker's smallest memory limit.
	MinMemory = 6 << 20
	// MaxCPUs is the most cores an egg may ask for.
	MaxCPUs = 1024
	// MinHealthPeriod is the shortest health interval and timeout.
	MinHealthPeriod = 100 * time.Millisecond
	// MinProgressDeadline is the shortest rollout.progress_deadline.
	MinProgressDeadline = time.Second
	// MaxHealthRetries is the most failed checks an egg may wait for.
	MaxHealthRetries = 100
)

// Limits are what a control plane allows on top of the file's own rules.
type Limits struct {
	// MaxReplicas is the most replicas per egg, at most the file's
	// MaxReplicas; 0 means the file's.
	MaxReplicas int
}

// InputError is a resource refused by CheckResource: Field names where, as
// the API does ("name", "inputs.replicas", "inputs.ports[1].published").
type InputError struct {
	Field  string
	Reason string
}

func (e *InputError) Error() string { return e.Field + ": " + e.Reason }

// CheckResource checks one desired resource as the loader checks what it
// writes: its name, the shape of its inputs (strictly: a value of the wrong
// type or a field its kind does not have is refused), and every value the
// loader would have refused in a file. It is what a control plane runs on
// resources sent to it, which need not come from this loader: a resource
// this package's Resources wrote always passes. References are left to
// package graph, which checks that what they name exists.
func CheckResource(r *resource.Desired, lim Limits) error {
	switch r.Type {
	case resource.Egg:
		if err := checkName(string(resource.Egg), r.Name); err != nil {
			return &InputError{"name", err.Error()}
		}
		in, err := decodeInputs[inputs.Egg](r.Inputs)
		if err != nil {
			return err
		}
		// Resolved, an env value may be a list (inputs.Env); as written,
		// before any reference is resolved, it is a string.
		if env, ok := r.Inputs["env"].(map[string]any); ok {
			for _, k := range keys(env) {
				if _, ok := env[k].(string); !ok {
					return &InputError{"inputs.env." + k, "want a string"}
				}
			}
		}
		return checkEggInputs(r.Name, in, lim)
	case resource.Volume:
		if err := checkKey(resource.Volume, r.Name); err != nil {
			return &InputError{"name", err.Error()}
		}
		in, err := decodeInputs[inputs.Volume](r.Inputs)
		if err != nil {
			return err
		}
		if in.Egg != "" && !ValidName(in.Egg) {
			return &InputError{"inputs.egg", fmt.Sprintf("%q is not an egg name (%s)", in.Egg, NameRule)}
		}
		return errors.Join(checkLabels("inputs.labels", in.Labels), checkPlacement(in.Placement), checkBackupInputs(in.Egg, in.Backup), checkFailoverInputs(in))
	case resource.Network:
		if err := checkKey(resource.Network, r.Name); err != nil {
			return &InputError{"name", err.Error()}
		}
		in, err := decodeInputs[inputs.Network](r.Inputs)
		if err != nil {
			return err
		}
		return checkLabels("inputs.labels", in.Labels)
	case resource.Secret:
		if err := checkKey(resource.Secret, r.Name); err != nil {
			return &InputError{"name", err.Error()}
		}
		// A control plane adds the value's fingerprint (provider.FingerprintInput).
		// Its fields are inputs.Secret's.
		_, err := decodeInputs[struct {
			File        string `json:"file"`
			Env         string `json:"env"`
			Fingerprint string `json:"fingerprint"`
		}](r.Inputs)
		return err
	case resource.Route:
		in, err := decodeInputs[inputs.Route](r.Inputs)
		if err != nil {
			return err
		}
		return checkRouteInputs(r.Name, in)
	}
	return nil // an unknown type: graph.New names the known ones
}

// decodeInputs is inputs.Decode with the field at fault named.
func decodeInputs[T any](in map[string]any) (T, error) {
	var v T
	b, err := json.Marshal(in)
	if err != nil {
		return v, &InputError{"inputs", err.Error()}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) {
			field := "inputs"
			if typ.Field != "" {
				field += "." + typ.Field
			}
			return v, &InputError{field, fmt.Sprintf("want %s, got %s", jsonType(typ.Type.Kind().String()), typ.Value)}
		}
		// encoding/json names an unknown field only in its message.
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return v, &InputError{"inputs", "unknown field " + name}
		}
		return v, &InputError{"inputs", err.Error()}
	}
	return v, nil
}

// jsonType says a Go kind the way a JSON body's writer thinks of it.
func jsonType(kind string) string {
	switch kind {
	case "int", "int64", "float64":
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	case "slice":
		return "a list"
	case "map", "struct", "ptr":
		return "an object"
	}
	return kind
}

func checkEggInputs(name string, in inputs.Egg, lim Limits) error {
	maxReplicas := MaxReplicas
	if lim.MaxReplicas > 0 && lim.MaxReplicas < maxReplicas {
		maxReplicas = lim.MaxReplicas
	}
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &InputError{"inputs." + field, fmt.Sprintf(format, args...)})
	}
	switch {
	case in.Build == nil && in.Image == "":
		bad("image", "egg %q needs build or image", name)
	case in.Build != nil && in.Image != "":
		bad("image", "egg %q has both build and image: keep one", name)
	case in.Image != "":
		if err := checkImage(in.Image); err != nil {
			bad("image", "%v", err)
		}
	default:
		if in.Build.Context == "" {
			bad("build.context", "a build needs its context directory")
		}
		if err := checkDockerfile(in.Build.Dockerfile); err != nil {
			bad("build.dockerfile", "%v", err)
		}
	}
	if in.Replicas < 0 || in.Replicas > maxReplicas {
		bad("replicas", "egg %q asks for %d replicas: this control plane allows 0 to %d per egg (hatch server --max-replicas)", name, in.Replicas, maxReplicas)
	}
	if in.Port != 0 {
		if err := checkPort(in.Port); err != nil {
			bad("port", "%v", err)
		}
	}
	for i, p := range in.Ports {
		if err := checkPort(p.Published); err != nil {
			bad(fmt.Sprintf("ports[%d].published", i), "%v", err)
		}
		if err := checkPort(p.Target); err != nil {
			bad(fmt.Sprintf("ports[%d].target", i), "%v", err)
		}
		if p.Protocol != "" && p.Protocol != "tcp" {
			bad(fmt.Sprintf("ports[%d].protocol", i), "%q: only tcp is supported", p.Protocol)
		}
	}
	if in.WorkingDir != "" && !strings.HasPrefix(in.WorkingDir, "/") {
		bad("working_dir", "%q must be an absolute path", in.WorkingDir)
	}
	for k := range in.Env {
		if !envName.MatchString(k) {
			bad("env", "%q is not a variable name: use letters, digits and underscores, not starting with a digit", k)
		}
	}
	if h := in.Health; h != nil {
		checkHealthInputs(h, bad)
	}
	for i, a := range in.Aliases {
		if !aliasRE.MatchString(a) {
			bad(fmt.Sprintf("aliases[%d]", i), "%q %s", a, AliasRule)
		}
	}
	checkRolloutInputs(in.Rollout, bad)
	switch Restart(in.Restart) {
	case RestartAlways, RestartOnFailure, RestartNo, "":
	default:
		bad("restart", "%q is not always, on-failure or no", in.Restart)
	}
	if r := in.Resources; r.Memory != 0 && r.Memory < MinMemory || r.Memory < 0 {
		bad("resources.memory", "%d bytes is below Docker's minimum of 6Mi", r.Memory)
	}
	if c := in.Resources.CPUs; c < 0 || c > MaxCPUs || math.IsNaN(c) {
		bad("resources.cpus", "%v must be a number of cores from 0 (no limit) to %d", c, MaxCPUs)
	}
	if in.Resources.Pids < 0 {
		bad("resources.pids", "%d must be 0 (no limit) or more", in.Resources.Pids)
	}
	for i, m := range in.Volumes {
		field := fmt.Sprintf("volumes[%d]", i)
		switch {
		case m.Type != inputs.MountVolume && m.Type != inputs.MountBind:
			bad(field+".type", "%q is not volume or bind", m.Type)
		case m.Source == "":
			bad(field+".source", "a mount needs its source")
		case m.Type == inputs.MountBind && !strings.HasPrefix(m.Source, "/"):
			bad(field+".source", "%q: a bind mount's source is an absolute path", m.Source)
		}
		if !strings.HasPrefix(m.Target, "/") {
			bad(field+".target", "%q must be an absolute path", m.Target)
		}
	}
	for i, p := range in.Tmpfs {
		if !strings.HasPrefix(p, "/") {
			bad(fmt.Sprintf("tmpfs[%d]", i), "%q must be an absolute path", p)
		}
	}
	for i, c := range append(append([]string{}, in.CapAdd...), in.CapDrop...) {
		field := fmt.Sprintf("cap_add[%d]", i)
		if i >= len(in.CapAdd) {
			field = fmt.Sprintf("cap_drop[%d]", i-len(in.CapAdd))
		}
		if !capRE.MatchString(c) {
			bad(field, "%q is not a capability, for example NET_ADMIN or ALL", c)
		}
	}
	if err := checkLabels("inputs.labels", in.Labels); err != nil {
		errs = append(errs, err)
	}
	for i, s := range in.Secrets {
		field := fmt.Sprintf("secrets[%d]", i)
		if err := checkKey(resource.Secret, s.Name); err != nil {
			bad(field+".name", "%v", err)
		}
		if !strings.HasPrefix(s.Target, "/") {
			bad(field+".target", "%q must be an absolute path", s.Target)
		}
	}
	if in.StopSignal != "" && !contains(signals, in.StopSignal) {
		bad("stop_signal", "unknown signal %q; use one of %s", in.StopSignal, strings.Join(signals, ", "))
	}
	checkDuration("stop_timeout", in.StopTimeout, 0, bad)
	if err := checkPlacement(in.Placement); err != nil {
		errs = append(errs, err)
	}
	if in.Schedule != nil {
		checkScheduleInputs(in, bad)
	}
	if a := in.PullAuth; a != nil {
		checkPullAuth(in.Image, *a, bad)
	}
	checkPull(in, bad)
	for i, u := range in.Uses {
		if !ValidName(u) {
			bad(fmt.Sprintf("uses[%d]", i), "%q is not an egg name (%s)", u, NameRule)
		}
	}
	return errors.Join(errs...)
}

// checkScheduleInputs applies the loader's rules of a scheduled egg: its
// schedule as schedule.FromInputs reads it, and none of what a scheduled egg
// cannot have (notScheduled; its routes are resources of their own).
func checkScheduleInputs(in inputs.Egg, bad func(field, format string, args ...any)) {
	_, _, err := schedule.FromInputs(*in.Schedule)
	for _, fe := range schedule.FieldErrors(err) {
		bad("schedule."+fe.Field, "%s", fe.Reason)
	}
	has := map[string]bool{"replicas": in.Replicas != 0, "ports": len(in.Ports) > 0, "health": in.Health != nil}
	for _, f := range notScheduled {
		if has[f.field] {
			bad(f.field, "a scheduled egg cannot have %s, since %s", f.field, f.why)
		}
	}
}

func checkHealthInputs(h *inputs.Health, bad func(field, format string, args ...any)) {
	kinds := 0
	if h.HTTP != "" {
		kinds++
		if !strings.HasPrefix(h.HTTP, "/") {
			bad("health.http", "%q must be a path starting with /, for example /healthz", h.HTTP)
		}
	}
	if h.TCP {
		kinds++
	}
	if len(h.Cmd) > 0 {
		kinds++
		if len(h.Cmd) < 2 || (h.Cmd[0] != "CMD" && h.Cmd[0] != "CMD-SHELL") {
			bad("health.cmd", `must start with "CMD" followed by the command, or be ["CMD-SHELL", "a shell line"]`)
		}
	}
	if kinds > 1 {
		bad("health", "has more than one of http, tcp and cmd: keep one kind of check")
	}
	checkDuration("health.interval", h.Interval, MinHealthPeriod, bad)
	checkDuration("health.timeout", h.Timeout, MinHealthPeriod, bad)
	checkDuration("health.start_period", h.StartPeriod, 0, bad)
	if h.Retries < 0 || h.Retries > MaxHealthRetries {
		bad("health.retries", "%d must be between 1 and %d", h.Retries, MaxHealthRetries)
	}
}

func checkRolloutInputs(r inputs.Rollout, bad func(field, format string, args ...any)) {
	switch Order(r.Order) {
	case StartFirst, StopFirst, "":
	default:
		bad("rollout.order", "%q is not start-first or stop-first", r.Order)
	}
	if s := r.MaxSurge; s.Count < 0 || s.Percent < 0 || s.Percent > 100 || s.Count > 0 && s.Percent > 0 {
		bad("rollout.max_surge", "give a count of at least 1 or a percent from 1 to 100, not both")
	}
	checkDuration("rollout.min_ready", r.MinReady, 0, bad)
	checkDuration("rollout.drain_timeout", r.DrainTimeout, 0, bad)
	checkDuration("rollout.progress_deadline", r.ProgressDeadline, MinProgressDeadline, bad)
}

// checkDuration checks a duration input: "" (the default) or a Go duration
// of at least min.
func checkDuration(field, s string, min time.Duration, bad func(field, format string, args ...any)) {
	if s == "" {
		return
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		bad(field, "%q is not a duration: write a number with a unit (ms, s, m, h), for example 10s", s)
	case d < min:
		bad(field, "%s must be at least %s", s, formatDuration(min))
	}
}

func checkLabels(field string, labels map[string]string) error {
	for k := range labels {
		if !labelKeyRE.MatchString(k) {
			return &InputError{field, fmt.Sprintf("%q is not a label key: letters, digits, dots, dashes, underscores and slashes, starting and ending with a letter or digit", k)}
		}
	}
	return nil
}

func checkPlacement(p inputs.Placement) error {
	for i, h := range p.Hosts {
		if !hostRE.MatchString(h) {
			return &InputError{fmt.Sprintf("inputs.placement.hosts[%d]", i), fmt.Sprintf("%q is not a host name (see hatch agent --name)", h)}
		}
	}
	if p.Volume != "" && !ValidKey(p.Volume) {
		return &InputError{"inputs.placement.volume", fmt.Sprintf("%q is not a volume name (%s)", p.Volume, KeyRule)}
	}
	return nil
}

// checkRouteInputs checks a route: its name is its host and path, as
// Route.Name writes them.
func checkRouteInputs(name string, in inputs.Route) error {
	r, err := parseRoute(in.Host + in.Path)
	switch {
	case err != nil:
		return &InputError{"inputs.host", err.Error()}
	case r.Host != in.Host || r.Path != in.Path:
		return &InputError{"inputs.path", fmt.Sprintf("route %q: write host %q and path %q", name, r.Host, r.Path)}
	case r.Name() != name:
		return &InputError{"name", fmt.Sprintf("%q is not the route's host and path, %q", name, r.Name())}
	case !ValidName(in.Egg):
		return &InputError{"inputs.egg", fmt.Sprintf("%q is not an egg name (%s)", in.Egg, NameRule)}
	}
	if err := checkPort(in.Port); err != nil {
		return &InputError{"inputs.port", err.Error()}
	}
	return checkRouteTLS(in)
}

// checkPull checks an egg's pull policy and digest: a policy for an image
// only, and a digest (the control plane's, never a loader's) only with the
// digest policy, for a tag.
func checkPull(in inputs.Egg, bad func(field, format string, args ...any)) {
	p, err := ParsePull(in.Pull)
	switch {
	case err != nil:
		bad("pull", "%v", err)
	case in.Image == "" && in.Pull != "":
		bad("pull", "an egg that builds its image pulls nothing: remove pull")
	}
	if in.Digest == "" {
		return
	}
	switch {
	case in.Image == "":
		bad("digest", "an egg that builds its image has no digest: remove digest")
	case p != "":
		bad("digest", "only the default pull policy (digest) pins the image; %s pulls the tag", p)
	case !digestRE.MatchString(in.Digest):
		bad("digest", "%q is not a sha256:<64 hex digits> digest", in.Digest)
	}
}

// digestRE is an image digest as registries give them.
var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// checkPullAuth checks an egg's registry login as the loader writes it: for
// the registry its image is pulled from, with a username, and a password
// that is a secret's handle.
func checkPullAuth(image string, a inputs.PullAuth, bad func(field, format string, args ...any)) {
	switch host := contract.ImageRegistry(unescape(image)); {
	case image == "":
		bad("pull_auth", "an egg that builds its image pulls nothing: remove pull_auth")
	case a.Registry != host:
		bad("pull_auth.registry", "%q is not the registry of the image %q, %q", a.Registry, image, host)
	}
	if a.Username == "" {
		bad("pull_auth.username", "a registry login needs a username")
	}
	if !secretHandleRef.MatchString(a.Password) {
		bad("pull_auth.password", "%q is not a secret's handle (${secret/<name>.handle})", a.Password)
	}
}

// secretHandleRef is what a route's cert and key are: a secret's handle.
var secretHandleRef = regexp.MustCompile(`^\$\{secret/[A-Za-z0-9_.-]+\.handle\}$`)

// checkRouteTLS checks a route's TLS inputs as the loader writes them.
func checkRouteTLS(in inputs.Route) error {
	switch in.TLS {
	case TLSDefault, TLSOff, TLSAuto:
		if in.Cert != "" || in.Key != "" {
			return &InputError{"inputs.cert", "cert and key go with tls: secret only"}
		}
	case TLSSecret:
		for _, f := range []struct{ name, v string }{{"inputs.cert", in.Cert}, {"inputs.key", in.Key}} {
			if !secretHandleRef.MatchString(f.v) {
				return &InputError{f.name, fmt.Sprintf("%q is not a secret's handle (${secret/<name>.handle})", f.v)}
			}
		}
	default:
		return &InputError{"inputs.tls", fmt.Sprintf("unknown TLS mode %q: auto, off, secret, or empty for the server's default", in.TLS)}
	}
	switch {
	case in.TLS == TLSAuto && !PublicName(in.Host):
		return &InputError{"inputs.tls", fmt.Sprintf("tls: auto needs a public DNS name, and %s is not one", in.Host)}
	case in.HSTS && in.TLS == TLSOff:
		return &InputError{"inputs.hsts", "hsts needs TLS, and the route has tls: off"}
	}
	return nil
}
