package resource

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Ref is a reference from a resource's inputs to an output of another resource,
// written ${type/name.output} inside a string input, for example
// "postgres://app@${egg/db.address}/shop". "$${" stands for a literal "${".
//
// The output is the part after the last dot, so resource names may contain dots
// (route names do) while output names may not.
type Ref struct {
	Key    string // the referenced resource, "type/name"
	Output string // the output's name
}

// String returns the reference as it is written in an input.
func (r Ref) String() string { return "${" + r.Key + "." + r.Output + "}" }

// Refs lists every reference in a map of inputs, each once, sorted.
func Refs(inputs map[string]any) ([]Ref, error) {
	seen := map[Ref]bool{}
	var walk func(v any) error
	walk = func(v any) error {
		switch v := v.(type) {
		case string:
			_, err := expand(v, func(r Ref) (any, error) {
				seen[r] = true
				return "", nil
			})
			return err
		case map[string]any:
			for _, e := range v {
				if err := walk(e); err != nil {
					return err
				}
			}
		case []any:
			for _, e := range v {
				if err := walk(e); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(inputs); err != nil {
		return nil, err
	}
	refs := make([]Ref, 0, len(seen))
	for r := range seen {
		refs = append(refs, r)
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].String() < refs[j].String() })
	return refs, nil
}

// Templated reports whether Resolve would change inputs: whether a string
// in them holds a reference or an escaped "$${". Resolving costs a deep copy,
// which callers holding many plain resources may skip when this is false.
func Templated(inputs map[string]any) bool {
	var walk func(v any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case string:
			return strings.Contains(v, "${")
		case map[string]any:
			for _, e := range v {
				if walk(e) {
					return true
				}
			}
		case []any:
			for _, e := range v {
				if walk(e) {
					return true
				}
			}
		}
		return false
	}
	return walk(inputs)
}

// Resolve returns a copy of inputs with every reference replaced by the value
// lookup gives for it. A string that is exactly one reference takes the output's
// value as it is (a list stays a list), except as an item of a list, where a
// list output's items take its place (["${egg/db.hosts}"] becomes ["h1", "h2"]),
// so that a list written with a reference is a list of the same items once
// resolved; a reference inside a longer string is formatted into it (strings
// as they are, other values as JSON).
func Resolve(inputs map[string]any, lookup func(Ref) (any, error)) (map[string]any, error) {
	out, err := resolveValue(inputs, lookup)
	if err != nil {
		return nil, err
	}
	m, _ := out.(map[string]any)
	return m, nil
}

func resolveValue(v any, lookup func(Ref) (any, error)) (any, error) {
	switch v := v.(type) {
	case string:
		return expand(v, lookup)
	case map[string]any:
		if v == nil {
			return map[string]any(nil), nil
		}
		out := make(map[string]any, len(v))
		for k, e := range v {
			r, err := resolveValue(e, lookup)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, 0, len(v))
		for _, e := range v {
			r, err := resolveValue(e, lookup)
			if err != nil {
				return nil, err
			}
			if s, ok := e.(string); ok && wholeRef(s) {
				if items, ok := listItems(r); ok {
					for _, item := range items { // a list output spliced in
						out = append(out, cloneValue(item))
					}
					continue
				}
			}
			out = append(out, r)
		}
		return out, nil
	default:
		return cloneValue(v), nil
	}
}

// wholeRef reports whether s is exactly one reference, "${type/name.output}".
func wholeRef(s string) bool {
	return strings.HasPrefix(s, "${") && strings.IndexByte(s, '}') == len(s)-1
}

// listItems returns the items of a list value.
func listItems(v any) ([]any, bool) {
	switch v := v.(type) {
	case []any:
		return v, true
	case []string:
		items := make([]any, len(v))
		for i, s := range v {
			items[i] = s
		}
		return items, true
	}
	return nil, false
}

// expand substitutes the references of one string.
func expand(s string, lookup func(Ref) (any, error)) (any, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			b.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return nil, fmt.Errorf("unclosed reference in %q", s)
			}
			ref, err := ParseRef(s[i+2 : i+end])
			if err != nil {
				return nil, err
			}
			val, err := lookup(ref)
			if err != nil {
				return nil, err
			}
			if i == 0 && end == len(s)-1 {
				return val, nil // the whole string is one reference
			}
			b.WriteString(format(val))
			i += end + 1
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String(), nil
}

func format(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	j, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(j)
}

// ParseRef parses the inside of a reference, "type/name.output".
func ParseRef(s string) (Ref, error) {
	dot := strings.LastIndexByte(s, '.')
	if dot < 0 || dot == len(s)-1 {
		return Ref{}, fmt.Errorf("bad reference ${%s}: want ${type/name.output}", s)
	}
	if _, _, ok := SplitKey(s[:dot]); !ok {
		return Ref{}, fmt.Errorf("bad reference ${%s}: want ${type/name.output}", s)
	}
	return Ref{Key: s[:dot], Output: s[dot+1:]}, nil
}
