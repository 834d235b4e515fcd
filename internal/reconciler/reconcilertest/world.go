package reconcilertest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/resource"
)

// Op names a provider call.
type Op string

const (
	OpCreate Op = "create"
	OpUpdate Op = "update"
	OpDelete Op = "delete"
	OpReady  Op = "ready"
)

// Call is one provider call as the World logged it. Start and End are ticks
// of the World's logical clock, so that calls of different providers order.
type Call struct {
	Op      Op
	Project string
	Key     string // "type/name"
	ID      string
	Start   int
	End     int // 0 while the call runs
	Err     error
}

// Object is what a fake provider made: the outside world's state.
type Object struct {
	Project string
	Type    resource.Kind
	Name    string
	ID      string
	Inputs  map[string]any
	Source  string
}

// Key returns the object's "type/name".
func (o Object) Key() string { return resource.Key(o.Type, o.Name) }

// World is a fake outside world shared by the fake providers of one test: the
// objects they made and a log of every call, with the number of calls in
// flight at once across all of them.
type World struct {
	mu          sync.Mutex        // guards the fields below
	objects     map[string]Object // by project, type and ID
	calls       []*Call
	clock       int
	inflight    int
	maxInflight int
}

// NewWorld returns an empty World.
func NewWorld() *World { return &World{objects: map[string]Object{}} }

// Provider is a fake reconciler.Provider for one type. It creates
// idempotently by ID (a create for an existing ID adopts the object), deletes
// idempotently, and returns for each declared output a value derived from the
// resource's name and inputs (never its ID), so equal inputs give equal outputs.
type Provider struct {
	world  *World
	typ    resource.Kind
	schema reconciler.Schema
	// Hook, if set, runs at the start of every call, while it counts as in
	// flight and before it has any effect: it may sleep, cancel, or fail the
	// call by returning an error. Set it before the reconciler runs.
	Hook func(ctx context.Context, c Call) error
	// ReadyFunc, if set, answers Ready; by default every object is ready.
	ReadyFunc func(c Call, cond resource.Condition) (bool, string, error)
}

var _ reconciler.Provider = (*Provider)(nil)

// Provider returns a fake provider of the type, with the schema.
func (w *World) Provider(typ resource.Kind, schema reconciler.Schema) *Provider {
	return &Provider{world: w, typ: typ, schema: schema}
}

// Schema returns the schema the provider was made with.
func (p *Provider) Schema() reconciler.Schema { return p.schema }

// Diff compares inputs with reconciler.DiffInputs.
func (p *Provider) Diff(deployed, desired map[string]any) []string {
	return reconciler.DiffInputs(deployed, desired)
}

// Create makes (or adopts) the object with r.ID.
func (p *Provider) Create(ctx context.Context, project string, r *resource.Deployed) (map[string]any, error) {
	return p.write(ctx, OpCreate, project, r)
}

// Update brings the object with next.ID to next's inputs.
func (p *Provider) Update(ctx context.Context, project string, _, next *resource.Deployed) (map[string]any, error) {
	return p.write(ctx, OpUpdate, project, next)
}

func (p *Provider) write(ctx context.Context, op Op, project string, r *resource.Deployed) (map[string]any, error) {
	c := p.world.begin(op, project, r)
	if err := p.hook(ctx, c); err != nil {
		return nil, p.world.end(c, err)
	}
	p.world.mu.Lock()
	p.world.objects[objectKey(project, r.Type, r.ID)] = Object{
		Project: project, Type: r.Type, Name: r.Name, ID: r.ID,
		Inputs: resource.Clone(r.Inputs), Source: r.Source,
	}
	p.world.mu.Unlock()
	return p.outputs(r), p.world.end(c, nil)
}

// Delete removes the object with r.ID; a missing one is already deleted.
func (p *Provider) Delete(ctx context.Context, project string, r *resource.Deployed) error {
	c := p.world.begin(OpDelete, project, r)
	if err := p.hook(ctx, c); err != nil {
		return p.world.end(c, err)
	}
	p.world.mu.Lock()
	delete(p.world.objects, objectKey(project, r.Type, r.ID))
	p.world.mu.Unlock()
	return p.world.end(c, nil)
}

// Ready answers with ReadyFunc, or ready.
func (p *Provider) Ready(ctx context.Context, project string, r *resource.Deployed, cond resource.Condition) (bool, string, error) {
	c := p.world.begin(OpReady, project, r)
	if err := p.hook(ctx, c); err != nil {
		return false, "", p.world.end(c, err)
	}
	if p.ReadyFunc == nil {
		return true, "", p.world.end(c, nil)
	}
	ready, reason, err := p.ReadyFunc(c, cond)
	return ready, reason, p.world.end(c, err)
}

func (p *Provider) hook(ctx context.Context, c Call) error {
	if p.Hook == nil {
		return nil
	}
	return p.Hook(ctx, c)
}

func (p *Provider) outputs(r *resource.Deployed) map[string]any {
	out := make(map[string]any, len(p.schema.Outputs))
	rev := Revision(r.Inputs)
	for _, name := range p.schema.Outputs {
		out[name] = fmt.Sprintf("%s.%s@%s", r.Name, name, rev)
	}
	return out
}

// Revision is a short hash of inputs, part of every output value, so that a
// change of inputs changes the outputs and reaches the children using them.
func Revision(inputs map[string]any) string {
	b, _ := json.Marshal(inputs) // map keys are sorted: stable
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:4])
}

func objectKey(project string, typ resource.Kind, id string) string {
	return project + "|" + string(typ) + "|" + id
}

func (w *World) begin(op Op, project string, r *resource.Deployed) Call {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.clock++
	c := &Call{Op: op, Project: project, Key: r.Key(), ID: r.ID, Start: w.clock}
	w.calls = append(w.calls, c)
	w.inflight++
	w.maxInflight = max(w.maxInflight, w.inflight)
	return *c
}

func (w *World) end(c Call, err error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.clock++
	w.inflight--
	for i := len(w.calls) - 1; i >= 0; i-- {
		if w.calls[i].Start == c.Start {
			w.calls[i].End, w.calls[i].Err = w.clock, err
			break
		}
	}
	return err
}

// Calls returns a copy of the call log, in start order.
func (w *World) Calls() []Call {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Call, len(w.calls))
	for i, c := range w.calls {
		out[i] = *c
	}
	return out
}

// CountCalls returns how many calls had one of the ops (all calls if none given).
func (w *World) CountCalls(ops ...Op) int {
	n := 0
	for _, c := range w.Calls() {
		if len(ops) == 0 || slices.Contains(ops, c.Op) {
			n++
		}
	}
	return n
}

// ResetCalls forgets the call log and the in-flight maximum, keeping objects.
func (w *World) ResetCalls() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls, w.maxInflight = nil, w.inflight
}

// MaxInflight is the largest number of calls that were in flight at once.
func (w *World) MaxInflight() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.maxInflight
}

// Objects returns the objects of a project, sorted by key then ID.
func (w *World) Objects(project string) []Object {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Object
	for _, o := range w.objects {
		if o.Project == project {
			o.Inputs = resource.Clone(o.Inputs)
			out = append(out, o)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Key() != out[j].Key() {
			return out[i].Key() < out[j].Key()
		}
		return out[i].ID < out[j].ID
	})
	return out
}
