package compose

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

// Compose has interpolated every string already (${VAR}, and "$$" for a
// literal "$"), so what reaches the mapping is the text the container gets.
// A Compose file reaches Hatchery's outputs the way it writes any literal
// "${": with Compose's escape, "$${db.address}" or "$${secret.api_key}". In
// the strings handed to the container (environment, command, entrypoint,
// healthcheck.test), such a reference to a service, secret, volume or network
// of the file becomes a reference of the egg's inputs; every other "${...}"
// stays the literal it is ("$${HOME}" for a shell).

// encoder translates the Compose file's strings into spec's input encoding.
type encoder struct {
	services nameMap // a reference may name a service by its Compose or its egg name
	volumes  nameMap
	networks nameMap
	secrets  nameMap
}

// literal encodes a string that holds no reference.
func literal(s string) string { return strings.ReplaceAll(s, "${", "$${") }

// withRefs encodes a string that may hold references to outputs.
func (en encoder) withRefs(s string) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var out strings.Builder
	for i := 0; i < len(s); {
		rest := s[i:]
		if !strings.HasPrefix(rest, "${") {
			out.WriteByte(s[i])
			i++
			continue
		}
		if end := strings.IndexByte(rest, '}'); end > 0 {
			inner := rest[2:end]
			ref, isRef, err := en.ref(inner)
			if err != nil {
				return "", err
			}
			if isRef {
				if strings.HasSuffix(s[:i], "$") {
					return "", fmt.Errorf(`a literal "$" right before $${%s} cannot be expressed: put another character between them`, inner)
				}
				out.WriteString(ref.String())
				i += end + 1
				continue
			}
		}
		out.WriteString("$${") // a literal "${"
		i += 2
	}
	return out.String(), nil
}

// ref reads the inside of "${...}" as a reference to an output. isRef is
// false for what names nothing of the file (${HOME}, ${java.home}), which is
// literal text; err is set for what names something of the file wrongly.
func (en encoder) ref(inner string) (r resource.Ref, isRef bool, err error) {
	parts := strings.Split(inner, ".")
	if len(parts) < 2 {
		return resource.Ref{}, false, nil
	}
	fail := func(format string, args ...any) (resource.Ref, bool, error) {
		return resource.Ref{}, true, fmt.Errorf("$${%s}: "+format, append([]any{inner}, args...)...)
	}
	name, kind := parts[1], resource.Kind(parts[0])
	switch kind {
	case resource.Secret:
		s, ok := en.secrets.lookup(name)
		switch {
		case !ok:
			return fail("no secret %q is defined under secrets:", name)
		case len(parts) != 2:
			return fail("a secret has one value: write $${secret.%s}", name)
		}
		return resource.Ref{Key: resource.Key(resource.Secret, s), Output: inputs.OutputHandle}, true, nil
	case resource.Volume, resource.Network:
		names := en.volumes
		if kind == resource.Network {
			names = en.networks
		}
		outputs, _ := inputs.Outputs(kind)
		n, ok := names.lookup(name)
		switch {
		case !ok:
			return fail("no %s %q is defined under %ss:", parts[0], name, parts[0])
		case len(parts) != 3 || !slices.Contains(outputs, parts[2]):
			return fail("write $${%s.%s.%s}: a %s's outputs are %s", parts[0], name, outputs[0], parts[0], strings.Join(outputs, " and "))
		}
		return resource.Ref{Key: resource.Key(kind, n), Output: parts[2]}, true, nil
	case "env":
		return fail("Compose substitutes variables itself: write ${%s}", strings.Join(parts[1:], "."))
	}
	egg, ok := en.services.lookup(parts[0])
	if !ok {
		return resource.Ref{}, false, nil
	}
	if outputs, _ := inputs.Outputs(resource.Egg); len(parts) != 2 || !slices.Contains(outputs, parts[1]) {
		return fail("a service's outputs are address (host:port) and hosts: write $${%s.address}", parts[0])
	}
	return resource.Ref{Key: resource.Key(resource.Egg, egg), Output: parts[1]}, true, nil
}

// lookup finds a Hatchery name by its Compose name or by itself.
func (m nameMap) lookup(name string) (string, bool) {
	if mapped, ok := m.to[name]; ok {
		return mapped, true
	}
	if _, ok := m.from[name]; ok {
		return name, true
	}
	return "", false
}
