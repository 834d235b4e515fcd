package spec

import (
	"fmt"
	"math"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/resource"
)

// Parsers for the settings written in a small syntax of their own. Each is
// pure and returns an error that says what is wrong and how to write it; the
// decoder adds the field and the line.

// The name rules, here alone: package compose maps Compose's names to names
// these accept.
var (
	// nameRE is the rule for project and egg names: they become parts of
	// container, network and DNS names.
	nameRE = regexp.MustCompile(`^[a-z0-9-]{1,40}$`)
	// keyRE is the rule for volume, network and secret names, which Compose
	// files commonly write with underscores (api_key).
	keyRE = regexp.MustCompile(`^[a-z0-9_-]{1,40}$`)
)

var (
	hostnameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$`)
	hostRE     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	capRE      = regexp.MustCompile(`^[A-Z][A-Z_]*$`)
	labelKeyRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._/-]*[A-Za-z0-9])?$`)
)

// NameRule and KeyRule say in words what ValidName and ValidKey accept.
const (
	NameRule = "1 to 40 lower-case letters, digits or hyphens"
	KeyRule  = "1 to 40 lower-case letters, digits, hyphens or underscores"
)

// ValidName reports whether s may name a project or an egg.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// ValidKey reports whether s may name a volume, a network or a secret.
func ValidKey(s string) bool { return keyRE.MatchString(s) }

// ReservedNames are the words that cannot name an egg, sorted: the resource
// kinds and "env", since ${volume.x.name} and the like would no longer say
// which resource they mean.
func ReservedNames() []string {
	names := []string{"env"}
	for _, k := range resource.Kinds() {
		names = append(names, string(k))
	}
	slices.Sort(names)
	return names
}

// checkName checks a project or egg name; what says which.
func checkName(what, name string) error {
	if !ValidName(name) {
		return fmt.Errorf("%s name %q must be %s", what, name, NameRule)
	}
	if reserved := ReservedNames(); what == string(resource.Egg) && slices.Contains(reserved, name) {
		return fmt.Errorf("egg name %q is reserved (so are %s): rename the egg", name, strings.Join(reserved, ", "))
	}
	return nil
}

// checkKey checks a volume, network or secret name.
func checkKey(kind resource.Kind, name string) error {
	if !ValidKey(name) {
		return fmt.Errorf("%s name %q must be %s", kind, name, KeyRule)
	}
	return nil
}

// sizeUnits are binary, as in Compose and Kubernetes' Mi/Gi: 256m, 256M,
// 256mb and 256Mi are all 256 MiB.
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "kb": 1 << 10, "ki": 1 << 10,
	"m": 1 << 20, "mb": 1 << 20, "mi": 1 << 20,
	"g": 1 << 30, "gb": 1 << 30, "gi": 1 << 30,
	"t": 1 << 40, "tb": 1 << 40, "ti": 1 << 40,
}

var sizeRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)$`)

// ParseSize reads a memory size as resources.memory does ("64Gi", "512m"),
// for the flags that take one (hatch hosts set --memory).
func ParseSize(s string) (int64, error) { return parseSize(s) }

// parseSize reads a memory size: a number of bytes with an optional unit.
func parseSize(s string) (int64, error) {
	bad := fmt.Errorf("%q is not a size: write a number of bytes with an optional unit (Ki, Mi, Gi, or k, m, g as in Compose), for example 256Mi", s)
	m := sizeRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, bad
	}
	unit, ok := sizeUnits[strings.ToLower(m[2])]
	if !ok {
		return 0, bad
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, bad
	}
	bytes := n * float64(unit)
	if bytes > math.MaxInt64/2 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(bytes), nil
}

// parsePortMapping reads "published:target", optionally ending in "/tcp".
func parsePortMapping(s string) (PortMapping, error) {
	spec, proto, hasProto := strings.Cut(s, "/")
	if hasProto && proto != "tcp" {
		if proto == "udp" {
			return PortMapping{}, fmt.Errorf("port mapping %q: udp is not supported yet, only tcp", s)
		}
		return PortMapping{}, fmt.Errorf("port mapping %q: unknown protocol %q, only tcp is supported", s, proto)
	}
	parts := strings.Split(spec, ":")
	switch len(parts) {
	case 1:
		return PortMapping{}, fmt.Errorf("port mapping %q needs the published port too: write \"%s:%s\"", s, spec, spec)
	case 2:
	default:
		return PortMapping{}, fmt.Errorf("port mapping %q: a host address cannot be given here (it is the agent's --publish-addr): write \"published:target\", for example \"8088:8080\"", s)
	}
	published, err1 := parsePort(parts[0])
	target, err2 := parsePort(parts[1])
	if err1 != nil || err2 != nil {
		return PortMapping{}, fmt.Errorf("port mapping %q: write \"published:target\" with ports from 1 to 65535, for example \"8088:8080\"", s)
	}
	return PortMapping{Published: published, Target: target, Protocol: "tcp"}, nil
}

func parsePort(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || checkPort(p) != nil {
		return 0, fmt.Errorf("bad port %q", s)
	}
	return p, nil
}

// checkPort checks a TCP port number.
func checkPort(p int) error {
	if p < 1 || p > MaxPort {
		return fmt.Errorf("port %d must be between 1 and %d", p, MaxPort)
	}
	return nil
}

// checkImage checks an image reference.
func checkImage(ref string) error {
	if ref == "" || strings.ContainsAny(ref, " \t") {
		return fmt.Errorf("%q is not an image reference, for example nginx:1.27", ref)
	}
	return nil
}

// ParsePull reads a pull policy as written: digest (also ""), always or
// missing. The default, digest, is returned as "", so that writing it or
// not gives equal inputs.
func ParsePull(s string) (contract.PullPolicy, error) {
	switch p := contract.PullPolicy(s); p {
	case "", contract.PullDigest:
		return "", nil
	case contract.PullAlways, contract.PullMissing:
		return p, nil
	}
	return "", fmt.Errorf("pull: %q is not a pull policy: write digest (the default: the control plane pins the tag's digest at plan), always (the agent pulls the tag for every new container) or missing (the agent pulls it only when the host has no such image)", s)
}

// checkDockerfile checks a build's Dockerfile, a path inside its context.
func checkDockerfile(p string) error {
	clean := path.Clean(p)
	if path.IsAbs(clean) || strings.HasPrefix(clean, "../") || clean == ".." {
		return fmt.Errorf("%q must be a path inside the build context", p)
	}
	return nil
}

// parseRoute reads "hostname" or "hostname/path/prefix".
func parseRoute(s string) (Route, error) {
	host, rest, hasPath := strings.Cut(s, "/")
	if strings.Contains(host, ":") {
		return Route{}, fmt.Errorf("route %q: a route has no port (the ingress listens on its own), write %q", s, strings.Split(host, ":")[0]+strings.TrimPrefix(s, host))
	}
	if host != strings.ToLower(host) {
		return Route{}, fmt.Errorf("route %q: hostnames are lower-case, write %q", s, strings.ToLower(host)+strings.TrimPrefix(s, host))
	}
	if !hostnameRE.MatchString(host) || len(host) > 253 {
		return Route{}, fmt.Errorf("route %q: %q is not a hostname: write a name such as shop.localhost, optionally followed by a path prefix (shop.localhost/api)", s, host)
	}
	p := "/"
	if hasPath {
		p = path.Clean("/" + rest)
		if strings.ContainsAny(p, "?#* ") {
			return Route{}, fmt.Errorf("route %q: the path is a plain prefix, without query, fragment, spaces or wildcards", s)
		}
	}
	return Route{Host: host, Path: p}, nil
}

// parseMount reads "volume:/target[:ro|rw]" or "./host/path:/target[:ro|rw]".
// The type is a bind mount when the source is a path, that is when it starts
// with "/" or ".", as in Compose.
func parseMount(s string) (Mount, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return Mount{}, fmt.Errorf("volume %q: write \"name:/path/in/container\" for a volume, or \"./dir:/path\" for a bind mount, optionally ending in :ro", s)
	}
	m := Mount{Source: parts[0], Target: parts[1], Type: MountVolume}
	if len(parts) == 3 {
		switch parts[2] {
		case "ro":
			m.ReadOnly = true
		case "rw":
		default:
			return Mount{}, fmt.Errorf("volume %q: unknown mode %q, write ro (read-only) or rw", s, parts[2])
		}
	}
	if !strings.HasPrefix(m.Target, "/") {
		return Mount{}, fmt.Errorf("volume %q: the path in the container must be absolute, for example /data", s)
	}
	m.Target = path.Clean(m.Target)
	switch {
	case m.Source == "":
		return Mount{}, fmt.Errorf("volume %q: an anonymous volume keeps no data across deploys: name it (\"data:%s\") and define it under volumes", s, m.Target)
	case strings.HasPrefix(m.Source, "~"):
		return Mount{}, fmt.Errorf("volume %q: \"~\" is not expanded, write the absolute path", s)
	case strings.HasPrefix(m.Source, "/") || strings.HasPrefix(m.Source, "."):
		m.Type = MountBind
	default:
		if err := checkKey(resource.Volume, m.Source); err != nil {
			return Mount{}, fmt.Errorf("volume %q: %v", s, err)
		}
	}
	return m, nil
}

// signals are the stop signals an egg may name.
var signals = []string{
	"SIGABRT", "SIGALRM", "SIGHUP", "SIGINT", "SIGKILL", "SIGPWR", "SIGQUIT",
	"SIGTERM", "SIGUSR1", "SIGUSR2", "SIGWINCH",
}

// parseSignal reads a signal name, with or without its SIG prefix.
func parseSignal(s string) (string, error) {
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if !contains(signals, name) {
		return "", fmt.Errorf("stop_signal: unknown signal %q; use one of %s", s, strings.Join(signals, ", "))
	}
	return name, nil
}
