package spec

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hatchery/hatchery/internal/schedule"
)

// This file holds the helpers that read yaml.Nodes into typed values. Each
// reports a problem with the node's line and returns ok=false; the caller then
// leaves its default in place and carries on, so that one run finds every
// problem of the file.

// decoder reads one project file.
type decoder struct {
	*problems
	interp interpolation
	// flattened memoizes flatten per mapping node: merge keys may name the
	// same anchor many times over, and without it a few lines of YAML that
	// merge an anchor twice at each of 40 levels would take 2^40 steps.
	flattened map[*yaml.Node][]field
}

// field is one key/value pair of a mapping, aliases and merge keys resolved.
type field struct {
	Key   string
	Line  int // the key's line
	Value *yaml.Node
}

// fields returns the pairs of a mapping node in file order. It reports a
// duplicate key, and every key not in valid, naming the closest valid one or
// listing them all (what is "the mapping" in a message). A node that is not
// a mapping is reported and gives no fields.
func (d *decoder) fields(n *yaml.Node, what string, valid ...string) []field {
	n = resolve(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n.Line, "%s must be a mapping (key: value lines), not %s", what, describe(n))
		return nil
	}
	var out []field
	seen := map[string]int{}
	for _, f := range d.flatten(n) {
		if first, dup := seen[f.Key]; dup {
			d.errorf(f.Line, "%s: %q is set twice (first on line %d)", what, f.Key, first)
			continue
		}
		seen[f.Key] = f.Line
		if valid != nil && !contains(valid, f.Key) {
			d.errorf(f.Line, "%s: unknown field %q%s", what, f.Key, suggestOrList(f.Key, valid))
			continue
		}
		out = append(out, f)
	}
	return out
}

// flatten lists a mapping's pairs, with the pairs of YAML merge keys
// ("<<: *defaults") placed first so that the mapping's own keys override them.
func (d *decoder) flatten(n *yaml.Node) []field {
	if fs, done := d.flattened[n]; done {
		return fs
	}
	if d.flattened == nil {
		d.flattened = map[*yaml.Node][]field{}
	}
	d.flattened[n] = nil // a mapping merging itself adds nothing
	fs := d.flattenOnce(n)
	d.flattened[n] = fs
	return fs
}

func (d *decoder) flattenOnce(n *yaml.Node) []field {
	var merged, own []field
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			for _, src := range mergeSources(v) {
				merged = append(merged, d.flatten(src)...)
			}
			continue
		}
		own = append(own, field{Key: k.Value, Line: k.Line, Value: v})
	}
	if len(merged) == 0 {
		return own
	}
	keep := map[string]bool{}
	for _, f := range own {
		keep[f.Key] = true
	}
	var out []field
	for _, f := range merged {
		if !keep[f.Key] {
			keep[f.Key] = true
			out = append(out, f)
		}
	}
	return append(out, own...)
}

func mergeSources(v *yaml.Node) []*yaml.Node {
	v = resolve(v)
	switch v.Kind {
	case yaml.MappingNode:
		return []*yaml.Node{v}
	case yaml.SequenceNode:
		var out []*yaml.Node
		for _, e := range v.Content {
			if e = resolve(e); e.Kind == yaml.MappingNode {
				out = append(out, e)
			}
		}
		return out
	}
	return nil
}

// resolve follows YAML aliases to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// describe names a node's kind for messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "empty"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "this"
}

// scalar returns a scalar's text as written (numbers and booleans included).
func (d *decoder) scalar(n *yaml.Node, what string) (string, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || isNull(n) {
		d.errorf(n.Line, "%s must be a single value, not %s", what, describe(n))
		return "", false
	}
	return n.Value, true
}

// text returns a string setting in the input encoding (see interpolate),
// recording the output references it holds in refs when it may have some.
func (d *decoder) text(n *yaml.Node, what string, refs *[]lineRef) (string, bool) {
	s, ok := d.scalar(n, what)
	if !ok {
		return "", false
	}
	ip := d.interp
	ip.outputs = refs != nil
	out, found, err := ip.interpolate(s)
	if err != nil {
		d.errorf(n.Line, "%s: %v", what, err)
		return "", false
	}
	for _, r := range found {
		*refs = append(*refs, lineRef{Ref: r, Line: n.Line})
	}
	return out, true
}

// plain returns a setting the loader itself must understand (a duration, a
// port mapping, a path...): ${env.*} is substituted and no output may appear.
func (d *decoder) plain(n *yaml.Node, what string) (string, bool) {
	s, ok := d.scalar(n, what)
	if !ok {
		return "", false
	}
	out, _, err := d.interp.interpolate(s)
	if err != nil {
		d.errorf(n.Line, "%s: %v", what, err)
		return "", false
	}
	return unescape(out), true
}

func (d *decoder) boolean(n *yaml.Node, what string) (bool, bool) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool" {
		var b bool
		if err := n.Decode(&b); err == nil {
			return b, true
		}
	}
	d.errorf(n.Line, "%s must be true or false, not %s", what, describe(n))
	return false, false
}

// integer reads a whole number in [lo, hi].
func (d *decoder) integer(n *yaml.Node, what string, lo, hi int) (int, bool) {
	n = resolve(n)
	s, ok := d.plain(n, what)
	if !ok {
		return 0, false
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		d.errorf(n.Line, "%s must be a whole number, not %q", what, s)
		return 0, false
	}
	if v < lo || v > hi {
		d.errorf(n.Line, "%s must be between %d and %d, not %d", what, lo, hi, v)
		return 0, false
	}
	return v, true
}

// duration reads a Go duration with its unit ("10s", "1m30s"), at least min.
func (d *decoder) duration(n *yaml.Node, what string, min time.Duration) (time.Duration, bool) {
	n = resolve(n)
	s, ok := d.plain(n, what)
	if !ok {
		return 0, false
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		if _, numErr := strconv.ParseFloat(s, 64); numErr == nil {
			d.errorf(n.Line, "%s: %q has no unit: write it as a duration, for example %ss", what, s, s)
		} else {
			d.errorf(n.Line, "%s: %q is not a duration: write a number with a unit (ms, s, m, h), for example 10s or 1m30s", what, s)
		}
		return 0, false
	}
	if v < min {
		d.errorf(n.Line, "%s must be at least %s, not %s", what, formatDuration(min), s)
		return 0, false
	}
	return v, true
}

// list returns the elements of a sequence; a null is an empty list.
func (d *decoder) list(n *yaml.Node, what, example string) ([]*yaml.Node, bool) {
	n = resolve(n)
	if isNull(n) {
		return nil, true
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n.Line, "%s must be a list, for example %s, not %s", what, example, describe(n))
		return nil, false
	}
	return n.Content, true
}

// textList reads a list of string settings (see text).
func (d *decoder) textList(n *yaml.Node, what, example string, refs *[]lineRef) ([]string, bool) {
	items, ok := d.list(n, what, example)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(items))
	for _, item := range items {
		s, ok := d.text(item, what, refs)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// plainList reads a list of plain settings (see plain).
func (d *decoder) plainList(n *yaml.Node, what, example string) ([]string, bool) {
	items, ok := d.list(n, what, example)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(items))
	ok = true
	for _, item := range items {
		s, itemOK := d.plain(item, what)
		ok = ok && itemOK
		out = append(out, s)
	}
	return out, ok
}

// stringMap reads a mapping of string settings, such as env or labels.
func (d *decoder) stringMap(n *yaml.Node, what string, refs *[]lineRef) (map[string]string, map[string]int) {
	out := map[string]string{}
	lines := map[string]int{}
	for _, f := range d.fields(n, what) {
		if isNull(resolve(f.Value)) {
			d.errorf(f.Line, "%s %s has no value: write %s: \"\" for an empty one", what, f.Key, f.Key)
			continue
		}
		if v, ok := d.text(f.Value, what+" "+f.Key, refs); ok {
			out[f.Key] = v
			lines[f.Key] = f.Line
		}
	}
	return out, lines
}

// suggestOrList ends an "unknown" message with the closest valid word, or
// with the list of valid words when none is close.
func suggestOrList(word string, valid []string) string {
	if s := suggest(word, valid); s != "" {
		return s
	}
	sorted := append([]string(nil), valid...)
	sort.Strings(sorted)
	return "; valid fields are " + strings.Join(sorted, ", ")
}

// suggest returns `: did you mean "x"?` for the valid word closest to word,
// if one is close enough to be a likely typo, else "".
func suggest(word string, valid []string) string {
	sorted := append([]string(nil), valid...)
	sort.Strings(sorted)
	best, bestDist := "", len(word)/3+2 // farther than that is not a typo
	for _, v := range sorted {
		if d := editDistance(word, v); d < bestDist {
			best, bestDist = v, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(`: did you mean %q?`, best)
}

// editDistance is the Levenshtein distance between two short strings.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func keys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// formatDuration writes a duration without trailing zero units ("5m", not
// "5m0s"), for messages and inputs.
func formatDuration(d time.Duration) string { return schedule.FormatDuration(d) }
