package reconciler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/resource"
)

// DefaultConcurrency is the default maximum concurrency to use.
// In practice, the reconciler is likely bound by network i/o.
var DefaultConcurrency = 10

// Default retry policy, used when Reconciler.Backoff is nil: exponential, and
// bounded so that a resource that never succeeds (or a parent that never
// becomes ready) fails the run instead of hanging it. Ten minutes leaves room
// for an egg's default five-minute progress deadline. Tries are at most 2 s
// apart (3 s with the jitter): what a step waits for (a database back, an
// egg ready) is usually back within seconds, and a 10 s cap once left an
// apply waiting 17 s after its database returned.
const (
	defaultInitialInterval = 200 * time.Millisecond
	defaultMaxInterval     = 2 * time.Second
	defaultMaxElapsedTime  = 10 * time.Minute
)

// Graph contains the desired graph to reconcile. It is seen from its leaves
// upward: LeafResources are the resources nothing depends on, and walking
// ParentResources from them must reach every resource. graph.Graph implements
// it. Whatever the implementation, the reconciler checks what it discovers
// with graph.New before anything runs; if the implementation also lists
// every resource (a Resources() []*resource.Desired method, as graph.Graph
// has), it walks from those too, since a cycle no leaf reaches is invisible
// through this interface.
type Graph interface {
	LeafResources() []*resource.Desired
	ParentResources(child string) []*resource.Desired
	DependenciesOf(child string) []*resource.Dependency
}

// IDGenerator generates unique identifiers for created resources. The
// reconciler calls it from one goroutine at a time.
type IDGenerator interface {
	GenerateID() string
}

// IDGeneratorFunc is a function type that implements the IDGenerator interface.
type IDGeneratorFunc func() string

// GenerateID calls the wrapped function.
func (fn IDGeneratorFunc) GenerateID() string { return fn() }

// ResourceStorage persists deployed resources, per project
// ("<namespace>/<project>"). A project holds at most one record per type and
// name: PutResource inserts or replaces the record with r's type and name,
// DeleteResource removes it (removing an absent record is not an error), and
// ListResources returns the project's records, pending ones included. Records
// are stored by value: the storage neither keeps nor hands out pointers the
// caller could mutate. It must be safe for concurrent use. The conformance
// suite in package storagetest checks all of this.
type ResourceStorage interface {
	PutResource(ctx context.Context, project string, r *resource.Deployed) error
	DeleteResource(ctx context.Context, project string, r *resource.Deployed) error
	ListResources(ctx context.Context, project string) ([]*resource.Deployed, error)
}

// SourceStorage provides resource source code: the content-addressed blobs
// named by resource.Desired.Source. The reconciler only needs to know a blob is
// there before it hands a resource to its provider (which passes the digest on;
// the agents fetch the blob themselves): a missing source fails the resource
// permanently, with ErrSourceMissing, before its provider is called.
type SourceStorage interface {
	// HasSource reports whether the blob with the given digest is stored. An
	// error means the storage could not tell; the check is then retried.
	HasSource(ctx context.Context, digest string) (bool, error)
}

// Errors callers branch on, with errors.Is.
var (
	// ErrInvalidGraph wraps every reason a graph is refused before anything runs:
	// *graph.CycleError, *graph.DuplicateError, *graph.MissingError,
	// *UnknownTypeError, *UnknownOutputError, *ConditionError.
	ErrInvalidGraph = errors.New("invalid graph")
	// ErrSourceMissing fails a resource whose source blob is not stored.
	ErrSourceMissing = errors.New("source not stored")
	// ErrNotReady fails a child whose parent never met the dependency's condition.
	ErrNotReady = errors.New("not ready")
	// ErrSkipped marks a resource not applied because something it needs failed.
	ErrSkipped = errors.New("skipped")
)

// A Reconciler reconciles changes to a graph. See package doc for details.
// Its fields are read-only once Reconcile or Plan has been called; one
// Reconciler may serve several projects at once.
type Reconciler struct {
	Resources ResourceStorage
	Source    SourceStorage
	Registry  Registry
	IDGen     IDGenerator
	// Concurrency sets the maximum allowed concurrency to use.
	// If not set, DefaultConcurrency is used.
	Concurrency uint
	// Logger logs reconciliation updates. If not set, logs are discarded.
	Logger *zap.Logger
	// Backoff algorithm used for retries. If not set, exponential backoff is used.
	// It is called once per operation that needs a retry (and once per
	// readiness wait), so each gets its own state.
	Backoff func() backoff.BackOff

	// fifo switches the priority of ready operations from critical path to
	// readiness order (first ready, first started). Only the benchmarks set
	// it, to measure what the priority buys.
	fifo bool
}

// Reconcile makes the deployed resources of project ("<namespace>/<project>")
// match graph: see the package doc for the steps. The Result lists what
// happened to every resource; the error is non-nil if the graph was refused,
// storage could not be listed, or any resource failed or was skipped.
func (r *Reconciler) Reconcile(ctx context.Context, project string, graph Graph) (Result, error) {
	start := time.Now()
	st, err := r.prepare(ctx, project, graph)
	if err != nil {
		return Result{Project: project}, err
	}
	w := newWalk(ctx, r, st)
	w.applyDesired()
	w.deleteUnwanted()
	res := w.result()
	res.Duration = time.Since(start)
	return res, res.err()
}

// state is what both Reconcile and Plan start from: the checked desired graph
// and the project's deployed records, matched by key.
type state struct {
	project  string
	graph    *checkedGraph
	deployed map[string]*resource.Deployed // by key
	// unwanted are the deployed records no desired resource matches, in
	// delete order: children before parents, ties by key.
	unwanted []*unwanted
}

func (r *Reconciler) prepare(ctx context.Context, project string, g Graph) (*state, error) {
	if _, _, err := resource.SplitProject(project); err != nil {
		return nil, err
	}
	if r.Resources == nil || r.Registry == nil {
		return nil, errors.New("reconciler: Resources and Registry must be set")
	}
	cg, err := checkGraph(g, r.Registry)
	if err != nil {
		return nil, err
	}
	if r.Source == nil {
		for _, n := range cg.nodes {
			if n.res.Source != "" {
				return nil, fmt.Errorf("reconciler: %s is built from a source, but no SourceStorage is set", n.key)
			}
		}
	}
	records, err := r.Resources.ListResources(ctx, project)
	if err != nil {
		return nil, fmt.Errorf("list resources of %s: %w", project, err)
	}
	st := &state{project: project, graph: cg, deployed: make(map[string]*resource.Deployed, len(records))}
	for _, rec := range records {
		if _, dup := st.deployed[rec.Key()]; dup {
			return nil, fmt.Errorf("storage holds two records for %s in %s", rec.Key(), project)
		}
		st.deployed[rec.Key()] = rec
	}
	if st.unwanted, err = orderDeletes(records, cg, r.Registry); err != nil {
		return nil, err
	}
	return st, nil
}

func (r *Reconciler) logger() *zap.Logger {
	if r.Logger == nil {
		return zap.NewNop()
	}
	return r.Logger
}

func (r *Reconciler) limit() int {
	if r.Concurrency == 0 {
		return DefaultConcurrency
	}
	return int(r.Concurrency)
}

func (r *Reconciler) newBackoff() backoff.BackOff {
	if r.Backoff != nil {
		return r.Backoff()
	}
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(defaultInitialInterval),
		backoff.WithMaxInterval(defaultMaxInterval),
		backoff.WithMaxElapsedTime(defaultMaxElapsedTime),
	)
}

func (r *Reconciler) generateID() string {
	if r.IDGen != nil {
		return r.IDGen.GenerateID()
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
