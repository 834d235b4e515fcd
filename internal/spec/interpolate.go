package spec

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/resource/inputs"
)

// defined is what a project defines, by resource type, for checking references.
type defined map[resource.Kind]map[string]bool

func (d defined) has(typ resource.Kind, name string) bool { return d[typ][name] }

// interpolation is everything interpolate needs from the outside.
type interpolation struct {
	env     func(string) (string, bool) // never nil
	defined defined
	// outputs says whether references to outputs are allowed: only in the
	// settings that are strings handed to the container (env, command...),
	// not in those the loader or the CLI must understand (image, ports...).
	outputs bool
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// interpolate translates a string as the user wrote it into the resource
// input encoding:
//
//   - ${env.NAME} and ${env.NAME:-default} are substituted now;
//   - ${db.address}, ${volume.pgdata.host}, ${network.backend.name} and
//     ${secret.api_key} become ${egg/db.address}, ${volume/pgdata.host},
//     ${network/backend.name} and ${secret/api_key.handle};
//   - "$$" is a literal "$" (as in Compose), and a lone "$" stays as it is;
//   - literal text is escaped for the resource package ("${" as "$${").
//
// It returns the translated string and the output references it holds.
func (ip interpolation) interpolate(s string) (string, []resource.Ref, error) {
	if !strings.Contains(s, "$") {
		return s, nil, nil
	}
	var out, lit strings.Builder
	var refs []resource.Ref
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$$"):
			lit.WriteByte('$')
			i += 2
		case strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return "", nil, fmt.Errorf(`unclosed "${" in %q: end the reference with "}", or write "$${" for a literal "${"`, s)
			}
			inner := s[i+2 : i+end]
			i += end + 1
			if value, ok, err := ip.envValue(inner); ok || err != nil {
				if err != nil {
					return "", nil, err
				}
				lit.WriteString(value)
				continue
			}
			ref, err := ip.ref(inner)
			if err != nil {
				return "", nil, err
			}
			if strings.HasSuffix(lit.String(), "$") {
				return "", nil, fmt.Errorf(`a literal "$" right before ${%s} cannot be expressed: put another character between them`, inner)
			}
			out.WriteString(escape(lit.String()))
			lit.Reset()
			out.WriteString(ref.String())
			refs = append(refs, ref)
		default:
			lit.WriteByte(s[i])
			i++
		}
	}
	out.WriteString(escape(lit.String()))
	return out.String(), refs, nil
}

// escape writes literal text in the resource input encoding.
func escape(literal string) string { return strings.ReplaceAll(literal, "${", "$${") }

// unescape reverses escape.
func unescape(encoded string) string { return strings.ReplaceAll(encoded, "$${", "${") }

// envValue substitutes ${env.NAME} and ${env.NAME:-default}; ok is false when
// inner is not an env reference.
func (ip interpolation) envValue(inner string) (value string, ok bool, err error) {
	name, isEnv := strings.CutPrefix(inner, "env.")
	if !isEnv {
		return "", false, nil
	}
	name, def, hasDefault := strings.Cut(name, ":-")
	if !envName.MatchString(name) {
		return "", true, fmt.Errorf("${%s}: %q is not a variable name: write ${env.NAME} or ${env.NAME:-default}", inner, name)
	}
	if v, set := ip.env(name); set && (v != "" || !hasDefault) {
		return v, true, nil
	}
	if hasDefault {
		return def, true, nil
	}
	return "", true, fmt.Errorf("${env.%s}: %s is not set: set it in hatch's environment, or give a default: ${env.%s:-value}", name, name, name)
}

// ref translates the inside of a reference to an output.
func (ip interpolation) ref(inner string) (resource.Ref, error) {
	parts := strings.Split(inner, ".")
	bad := fmt.Errorf("${%s} is not a reference: write ${<egg>.address}, ${<egg>.hosts}, ${volume.<name>.name|host}, ${network.<name>.name}, ${secret.<name>} or ${env.NAME}", inner)
	var typ resource.Kind
	var name, output string
	switch resource.Kind(parts[0]) {
	case resource.Volume, resource.Network:
		if len(parts) != 3 {
			return resource.Ref{}, bad
		}
		typ, name, output = resource.Kind(parts[0]), parts[1], parts[2]
	case resource.Secret:
		if len(parts) == 3 {
			return resource.Ref{}, fmt.Errorf("${%s}: a secret has one value, write ${secret.%s}", inner, parts[1])
		}
		if len(parts) != 2 {
			return resource.Ref{}, bad
		}
		typ, name, output = resource.Secret, parts[1], inputs.OutputHandle // written ${secret.<name>}: the handle is implicit
	case resource.Route:
		return resource.Ref{}, fmt.Errorf("${%s}: routes have no outputs", inner)
	case resource.Egg:
		if len(parts) == 3 {
			return resource.Ref{}, fmt.Errorf("${%s}: an egg is referenced by its name alone, write ${%s.%s}", inner, parts[1], parts[2])
		}
		return resource.Ref{}, bad
	default:
		if len(parts) != 2 {
			return resource.Ref{}, bad
		}
		typ, name, output = resource.Egg, parts[0], parts[1]
	}
	if !ip.defined.has(typ, name) {
		return resource.Ref{}, fmt.Errorf("${%s} refers to %s %q, which is not defined%s", inner, typ, name, suggest(name, keys(ip.defined[typ])))
	}
	if outputs, _ := inputs.Outputs(typ); !contains(outputs, output) {
		return resource.Ref{}, fmt.Errorf("${%s}: %s %q has no output %q; its outputs are %s", inner, typ, name, output, strings.Join(outputs, " and "))
	}
	if !ip.outputs {
		return resource.Ref{}, errOutputsHere(inner)
	}
	return resource.Ref{Key: resource.Key(typ, name), Output: output}, nil
}

func errOutputsHere(inner string) error {
	return errors.New("${" + inner + "}: outputs are known only at deploy time, so they can be used only in env, command, entrypoint and health.cmd")
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}
