package compose

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/hatchery/hatchery/internal/spec"
)

// Compose allows names that Hatchery does not: capitals and dots in any
// name, and underscores in service names, which become parts of container
// and DNS names. They are mapped to valid names; a service keeps its original
// name as an alias, so that the application's configuration keeps working.

// The rules are package spec's (spec.ValidName, spec.ValidKey,
// spec.ReservedNames): a mapped name passes spec.Parse.

// eggName maps a service name to an egg name: lower case, "_" and "." as "-".
func eggName(service string) string {
	return strings.Trim(strings.Map(func(r rune) rune {
		switch {
		case r == '_' || r == '.':
			return '-'
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		}
		return r
	}, service), "-")
}

// keyName maps a volume, network or secret name: lower case, "." as "-"
// ("_" is valid there).
func keyName(name string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '.':
			return '-'
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		}
		return r
	}, name)
}

// projectName maps a Compose project name ([a-z0-9_-], as Compose normalises
// it) to a Hatchery one.
func projectName(name string) string { return strings.Trim(strings.ReplaceAll(name, "_", "-"), "-") }

// nameMap maps the names of one kind (services, volumes...) and reports the
// ones that cannot be mapped.
type nameMap struct {
	to   map[string]string // Compose name -> Hatchery name
	from map[string]string // Hatchery name -> Compose name
}

// nameRule maps one kind of name and says what a valid one is.
type nameRule struct {
	what  string // "service", "volume"...
	rule  string // what valid names are made of, for messages
	apply func(string) string
	valid func(string) bool
}

var serviceNames = nameRule{"service", spec.NameRule, eggName, spec.ValidName}

// keyNames is the rule of volume, network and secret names.
func keyNames(what string) nameRule {
	return nameRule{what, spec.KeyRule, keyName, spec.ValidKey}
}

// mapNames maps every name and returns a problem per name that is invalid or
// that collides with another once mapped, in name order.
func (r nameRule) mapNames(names []string) (nameMap, []string) {
	sort.Strings(names)
	m := nameMap{to: map[string]string{}, from: map[string]string{}}
	var problems []string
	for _, name := range names {
		mapped := r.apply(name)
		switch {
		case !r.valid(mapped):
			problems = append(problems, fmt.Sprintf("%s %q becomes %q, but Hatchery names are %s: rename it", r.what, name, mapped, r.rule))
			continue
		case r.what == "service" && slices.Contains(spec.ReservedNames(), mapped):
			problems = append(problems, fmt.Sprintf("service %q: the name %q is reserved in Hatchery (so are %s): rename the service", name, mapped, strings.Join(spec.ReservedNames(), ", ")))
			continue
		}
		if other, taken := m.from[mapped]; taken {
			problems = append(problems, fmt.Sprintf("%ss %q and %q both become %q in Hatchery: rename one of them", r.what, other, name, mapped))
			continue
		}
		m.to[name], m.from[mapped] = mapped, name
	}
	return m, problems
}
