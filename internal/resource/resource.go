// Package resource defines the values the graph reconciler works on: a desired
// resource (what a project file asks for), a deployed resource (what was created,
// with its ID and outputs) and the dependencies between them.
//
// Inputs and outputs are JSON-compatible values (nil, bool, float64 or int,
// string, []any, map[string]any) so that they survive a round trip through any
// store unchanged in meaning: Equal compares them by their canonical JSON form.
package resource

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Kind is a resource's type: which provider makes it and which inputs
// (package inputs) it takes.
type Kind string

// The kinds of resource a project holds.
const (
	Egg     Kind = "egg"
	Volume  Kind = "volume"
	Network Kind = "network"
	Secret  Kind = "secret"
	Route   Kind = "route"
)

// Kinds lists every kind, in the order a project file declares them.
func Kinds() []Kind { return []Kind{Egg, Volume, Network, Secret, Route} }

// Key identifies a resource within a project: "type/name", for example
// "egg/web" or "route/api.localhost/v1".
func Key(typ Kind, name string) string { return string(typ) + "/" + name }

// SplitKey splits a key into its type and name: the type is everything
// before the first "/", the name the rest (a route's name holds slashes).
// ok is false unless both are non-empty.
func SplitKey(key string) (typ Kind, name string, ok bool) {
	t, name, _ := strings.Cut(key, "/")
	if t == "" || name == "" {
		return "", "", false
	}
	return Kind(t), name, true
}

// KindOf returns the kind a key names ("" for a malformed key).
func KindOf(key string) Kind {
	typ, _, _ := SplitKey(key)
	return typ
}

// Project returns the project string "<namespace>/<name>" that keys a
// project's resources, records and workloads.
func Project(namespace, name string) string { return namespace + "/" + name }

// SplitProject splits a project string "<namespace>/<name>", refusing any
// other form: it is the only one that keeps namespaces apart everywhere the
// string is used as a key.
func SplitProject(project string) (namespace, name string, err error) {
	ns, name, ok := strings.Cut(project, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("project %q: want <namespace>/<project>", project)
	}
	return ns, name, nil
}

// Desired is one resource a project asks for.
type Desired struct {
	Type Kind
	Name string
	// Inputs configure the resource. String values may hold references to a
	// parent's outputs (see Ref); the reconciler resolves them before it
	// compares or hands the inputs to a provider.
	Inputs map[string]any
	// Source is the digest of the resource's source blob ("sha256:<hex>"), if it
	// is built from one. It is internal and never shown to users.
	Source string
}

// Key returns the resource's "type/name".
func (d *Desired) Key() string { return Key(d.Type, d.Name) }

// Condition says what a child needs of its parent before it may start.
type Condition string

const (
	// ConditionCreated (the zero value) needs the parent created or updated.
	ConditionCreated Condition = ""
	// ConditionHealthy needs the parent ready to serve: for an egg, its replicas
	// healthy at the new spec.
	ConditionHealthy Condition = "healthy"
	// ConditionCompleted needs a one-shot parent to have run to success.
	ConditionCompleted Condition = "completed"
)

// Dependency is an edge of the graph: Child needs Parent (both keys).
type Dependency struct {
	Parent    string
	Child     string
	Condition Condition
}

// Deployed is a resource as it was recorded after a provider operation.
type Deployed struct {
	ID   string
	Type Kind
	Name string
	// Inputs are the resolved inputs the resource was last created or updated with.
	Inputs map[string]any
	// Source is the source blob digest it was built from, if any.
	Source string
	// Outputs are what the provider reported, passed on to children.
	Outputs map[string]any
	// Parents are the keys of the resources it depended on when it was last
	// applied, so that deletes can run children first after the desired graph
	// no longer holds the edges.
	Parents []string
	// Pending is true between the moment a create is decided (and its ID
	// chosen) and the moment the provider confirmed it: a crash in between
	// leaves a pending record, and the re-run creates with the same ID, which
	// providers treat idempotently.
	Pending bool
}

// Key returns the resource's "type/name".
func (d *Deployed) Key() string { return Key(d.Type, d.Name) }

// Clone returns a deep copy of the record (nil for nil), so that what a
// provider, a store or a walk keeps never aliases another's maps and slices.
func (d *Deployed) Clone() *Deployed {
	if d == nil {
		return nil
	}
	c := *d
	c.Inputs = Clone(d.Inputs)
	c.Outputs = Clone(d.Outputs)
	c.Parents = slices.Clone(d.Parents)
	return &c
}

// Equal reports whether two input or output maps hold the same values, comparing
// their canonical JSON encodings (map keys sorted, 1 and 1.0 alike).
func Equal(a, b map[string]any) bool {
	ja, errA := canonical(a)
	jb, errB := canonical(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

func canonical(m map[string]any) ([]byte, error) {
	if len(m) == 0 {
		return []byte("{}"), nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode values: %w", err)
	}
	// Decode and re-encode so that numbers of any Go type compare alike.
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("decode values: %w", err)
	}
	return json.Marshal(v)
}

// Clone returns a deep copy of a JSON-compatible map.
func Clone(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = cloneValue(v)
	}
	return out
}

func cloneValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		return Clone(v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = cloneValue(e)
		}
		return out
	case []string:
		return append([]string(nil), v...)
	default:
		return v
	}
}

// Int reads a count from a record's inputs or outputs, as a provider wrote
// it (int, int64) or as it came back from the store (a JSON number, as
// float64 or json.Number); anything else is 0.
func Int(v any) int {
	switch n := v.(type) {
	case int:
		return n
	case int64:
		return int(n)
	case float64:
		return int(n)
	case json.Number:
		i, _ := n.Int64()
		return int(i)
	}
	return 0
}
